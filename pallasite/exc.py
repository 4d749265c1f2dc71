"""Every error pallasite raises on bad input, and how it warns.

Each error names the problem, the user's source line where one applies, and
what to do about it. Config errors subclass ``ValueError`` so code that
validates settings generically keeps working. Warnings are attributed to the
user's call site (`warn_user`).
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Iterator

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


# The warning classes the running kernel's `ignore_warnings=[...]` setting silences.
_IGNORED: contextvars.ContextVar[tuple[type[Warning], ...]] = contextvars.ContextVar(
    "pallasite_ignored_warnings", default=())


@contextlib.contextmanager
def ignoring(categories: tuple[type[Warning], ...]) -> Iterator[None]:
    """Within the block, `warn_user` drops warnings of `categories` (and their subclasses):
    a kernel's `ignore_warnings=[...]`, applied while that kernel binds, compiles, tunes and
    runs. A context variable, so it holds for this thread (and task) only."""
    if not categories:
        yield
        return
    token = _IGNORED.set(_IGNORED.get() + tuple(categories))
    try:
        yield
    finally:
        _IGNORED.reset(token)


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """`warnings.warn` attributed to the first frame outside pallasite and JAX (the user's
    call site, also under `jax.jit` tracing), not to library internals; nothing when the
    running kernel ignores `category` (`ignoring`)."""
    if issubclass(category, _IGNORED.get()):
        return
    libraries = [_PACKAGE_DIR + os.sep]
    jax = sys.modules.get("jax")
    if jax is not None and getattr(jax, "__file__", None):
        libraries.append(os.path.dirname(os.path.abspath(jax.__file__)) + os.sep)
    level, frame = 2, sys._getframe(1)  # stacklevel 2: the caller of warn_user
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(tuple(libraries)):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, category, stacklevel=level)


@dataclass(frozen=True)
class SourceLocation:
    """A line of the user's kernel source."""

    filename: str
    lineno: int
    text: str

    def __str__(self) -> str:
        return f'{self.filename}:{self.lineno}: "{self.text.strip()}"'


class PallasiteError(Exception):
    """Base class of every pallasite error."""

    def __init__(self, message: str, location: SourceLocation | None = None):
        self.message = message
        self.location = location
        super().__init__(self._render())

    def _render(self) -> str:
        if self.location is None:
            return self.message
        return f"{self.message}\n  at {self.location}"

    def with_location(self, location: SourceLocation | None) -> PallasiteError:
        """Attach the user's source line if the error has none yet."""
        if self.location is None and location is not None:
            self.location = location
            self.args = (self._render(),)
        return self


class UnsupportedSyntax(PallasiteError):
    """Python syntax that device code cannot express."""


class UnsupportedOperation(PallasiteError):
    """A torch op or method with no lowering in device code."""


class ShapeMismatch(PallasiteError):
    """A value whose shape does not fit where it is stored or combined."""


class IndexingError(PallasiteError):
    """A subscript of a tensor that device code cannot lower."""


class UnsupportedDtype(PallasiteError):
    """A dtype the TPU cannot hold in vectors (64-bit, complex)."""


class DeviceValueInHostCode(PallasiteError):
    """A value computed inside a device loop used outside of it."""


class KernelArgumentError(PallasiteError, TypeError):
    """A kernel called with the wrong number or kinds of arguments."""


class InvalidConfig(PallasiteError, ValueError):
    """A config key or value that is not valid for this kernel."""


class IllegalBlockSize(InvalidConfig):
    """A block size the TPU cannot tile (last dim 128, second-to-last 8)."""


class VmemOverflow(InvalidConfig):
    """A config whose VMEM working set exceeds the chip's VMEM."""


class TpuLoweringFailed(PallasiteError):
    """The generated kernel did not lower to Mosaic for a TPU generation."""


class DataRace(PallasiteError):
    """TPU interpret mode's race detector saw two unordered accesses of one buffer."""


class PallasiteWarning(UserWarning):
    """Base class of pallasite's warnings."""


class IgnoredConfigKeys(PallasiteWarning):
    """Config keys or kernel settings of Helion's GPU backends, which a TPU kernel ignores."""


class TensorOperationInWrapper(PallasiteWarning):
    """Host code (outside the `hl.tile`/`hl.grid` loops) computes on whole tensors: each such
    op runs as its own XLA op beside the kernel's `pallas_call`s, not fused into them (an
    extra pass over HBM). Helion's name; said once per kernel and source line, silenced by
    `@pallasite.kernel(ignore_warnings=[pallasite.exc.TensorOperationInWrapper])`."""
