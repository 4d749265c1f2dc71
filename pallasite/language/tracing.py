"""The active tracer: the frontend's `Tracer` while a kernel is traced, or reference mode's
`ReferenceRunner` while it runs eagerly. Every `hl` function delegates to it."""
from __future__ import annotations

from typing import Any

from .. import exc

_active_tracer = None


def _tracer(what: str):
    if _active_tracer is None:
        raise exc.UnsupportedSyntax(
            f"hl.{what} can only be used inside a function decorated with @pallasite.kernel."
        )
    return _active_tracer


def set_active_tracer(tracer) -> Any:
    """Install `tracer` for the duration of a trace (or a reference run); returns the previous one."""
    global _active_tracer
    previous, _active_tracer = _active_tracer, tracer
    return previous


def active_tracer() -> Any:
    """The tracer installed now, or None outside a trace or a reference run."""
    return _active_tracer
