"""pallasite: Helion-style tile kernels compiled to JAX Pallas for TPUs."""
from __future__ import annotations

import sys
import types
from typing import Any, Callable

from . import exc, language
from .config import Config
from .ir import cdiv, next_power_of_2
from .runtime import BoundKernel, CompiledKernel, Kernel, release_compiled_code
from .runtime.checks import range_checked
from .reference import RefMode
from .autotune import searches as _searches
from . import testing  # noqa: E402 - pallasite.testing.run_ref / code_and_output without another import

__all__ = ["Config", "cdiv", "next_power_of_2", "Kernel", "BoundKernel", "CompiledKernel", "exc", "kernel", "language", "range_checked", "RefMode", "release_compiled_code",
           "testing"]
from .version import __version__  # noqa: E402

# Helion's import path `helion.autotuner`, so such kernels port by renaming the package: the
# tunable fragments (`from helion.autotuner import PowerOfTwoFragment`, defined in
# `language/tunables.py`, also `hl.PowerOfTwoFragment`) and the tuners of the `autotuner_fn=`
# setting (`autotune/searches.py`: `LocalAutotuneCache`, `search_algorithms`). A namespace
# with no file of its own, so nothing sits beside `autotune/` (the autotuner).
autotuner = sys.modules[f"{__name__}.autotuner"] = types.ModuleType(
    f"{__name__}.autotuner", "Helion's `helion.autotuner` names: tunable fragments and tuners.")
autotuner.__dict__.update({name: getattr(language.tunables, name) for name in (
    "Fragment", "IntegerFragment", "PowerOfTwoFragment", "EnumFragment", "BooleanFragment")})
autotuner.__dict__.update({name: getattr(_searches, name) for name in (
    "LocalAutotuneCache", "NeighbourhoodSearch", "GeneticSearch", "search_algorithms")})


def kernel(fn: Callable | None = None, **options: Any) -> Any:
    """Decorate a function as a pallasite kernel: `@pallasite.kernel` or `@pallasite.kernel(config=...)`."""
    from .runtime.kernel import _for_user  # a bad setting raises without pallasite's frames

    if fn is None:
        return lambda f: _for_user(Kernel, (f,), options)
    return _for_user(Kernel, (fn,), options)
