"""`hl.associative_scan`, `hl.cumsum`/`hl.cumprod` and `hl.reduce` while tracing.

Each becomes the log-step program of `ir/ops/scans.py`, whose combine steps call
the user's combine function on tile values: its torch ops are recorded like any
others (once per step). The combine takes (earlier, later) elements: `fn(a, b)`
for one scanned value; for a tuple of values either `fn(a_tuple, b_tuple)` or the
unpacked `fn(a0, a1, ..., b0, b1, ...)`, told apart by its parameter count as Helion
does.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

from .. import exc
from ..ir.ops import normalize_dims
from ..ir.ops.scans import check_combined, reduce_by_scan, scan
from .op_recorder import CompositeRecord, OpRecorder
from .proxies import DeviceTensor


def _scanned(values: Any, what: str) -> tuple[list[DeviceTensor], bool]:
    """The device values to scan, and whether they came as a tuple."""
    is_tuple = isinstance(values, (tuple, list))
    items = list(values) if is_tuple else [values]
    if not items or not all(isinstance(v, DeviceTensor) for v in items):
        raise exc.UnsupportedOperation(
            f"{what} takes a device value (or a tuple of them) computed in the device loop, got {values!r}.")
    shapes = {tuple(v.shape) for v in items}
    if len(shapes) > 1:
        raise exc.ShapeMismatch(f"{what}: the scanned values have different shapes {sorted(shapes)}.")
    return items, is_tuple


def combine_of(fn: Callable, is_tuple: bool, count: int, what: str) -> Callable[[list, list], list]:
    """The user's combine function as (earlier list, later list) -> combined list."""
    if not callable(fn):
        raise exc.UnsupportedOperation(f"{what}: combine_fn must be a function of two elements, got {fn!r}.")
    packed = False
    if is_tuple:
        try:
            packed = len(inspect.signature(fn).parameters) == 2 and count != 1
        except (TypeError, ValueError):
            packed = False

    def combine(earlier: list, later: list) -> list:
        if not is_tuple:
            result = fn(earlier[0], later[0])
        elif packed:
            result = fn(tuple(earlier), tuple(later))
        else:
            result = fn(*earlier, *later)
        return check_combined(result, earlier, what)

    return combine


def _axis(dim: Any, rank: int, what: str) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise exc.UnsupportedOperation(f"{what}: dim must be a Python int, got {dim!r}.")
    (axis,) = normalize_dims(dim, rank)
    return axis


def associative_scan(recorder: OpRecorder, combine_fn: Callable, values: Any, dim: int, reverse: bool) -> Any:
    what = "hl.associative_scan"
    items, is_tuple = _scanned(values, what)
    axis = _axis(dim, len(items[0].shape), what)
    out = scan(CompositeRecord(recorder, what), items, axis, bool(reverse),
               combine_of(combine_fn, is_tuple, len(items), what))
    return tuple(out) if is_tuple else out[0]


def cumulative(recorder: OpRecorder, spelling: str, value: Any, dim: int, reverse: bool) -> Any:
    """hl.cumsum / hl.cumprod: torch's, with `reverse`."""
    return recorder.apply(spelling, None, (value, dim), {"reverse": bool(reverse)}, f"hl.{spelling}")


def reduce(recorder: OpRecorder, combine_fn: Callable, values: Any, dim: Any, other: Any, keep_dims: bool) -> Any:
    """hl.reduce: every valid lane combined (padding never reaches the combine, so `other`,
    Helion's fill for masked lanes, changes nothing; it is checked and accepted)."""
    what = "hl.reduce"
    items, is_tuple = _scanned(values, what)
    others = list(other) if isinstance(other, (tuple, list)) else [other] * len(items)
    if len(others) != len(items) or not all(isinstance(o, (int, float, bool)) for o in others):
        raise exc.UnsupportedOperation(
            f"{what}: other must be a number (or a tuple of one number per input), got {other!r}.")
    rank = len(items[0].shape)
    axes = tuple(range(rank)) if dim is None else (_axis(dim, rank, what),)
    out = reduce_by_scan(CompositeRecord(recorder, what), items, axes, bool(keep_dims),
                         combine_of(combine_fn, is_tuple, len(items), what))
    return tuple(out) if is_tuple else out[0]
