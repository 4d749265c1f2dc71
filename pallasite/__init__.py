"""pallasite: Helion-style tile kernels compiled to JAX Pallas for TPUs."""
from __future__ import annotations

import sys
from typing import Any, Callable

from . import exc, language
from .config import Config
from .runtime import BoundKernel, CompiledKernel, Kernel
from .runtime.checks import range_checked
from . import testing  # noqa: E402 - pallasite.testing.run_ref / code_and_output without another import

__all__ = ["Config", "Kernel", "BoundKernel", "CompiledKernel", "exc", "kernel", "language", "range_checked", "testing"]
from .version import __version__  # noqa: E402

# Helion's import path of the tunable fragments (`from helion.autotuner import
# PowerOfTwoFragment`), so such kernels port by renaming the package. It names the module
# that defines them (`language/tunables.py`, also `hl.PowerOfTwoFragment`, ...) as `os.path`
# names `posixpath`: no file of its own, so nothing sits beside `autotune/` (the autotuner).
autotuner = sys.modules[f"{__name__}.autotuner"] = language.tunables


def kernel(fn: Callable | None = None, **options: Any) -> Any:
    """Decorate a function as a pallasite kernel: `@pallasite.kernel` or `@pallasite.kernel(config=...)`."""
    from .runtime.kernel import _for_user  # a bad setting raises without pallasite's frames

    if fn is None:
        return lambda f: _for_user(Kernel, (f,), options)
    return _for_user(Kernel, (fn,), options)
