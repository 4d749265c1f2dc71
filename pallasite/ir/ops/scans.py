"""Scans and user-combined reductions as programs of registry ops.

`scan` is the log-step (Hillis-Steele) inclusive scan a TPU runs well: for
k = 1, 2, 4, ... below the axis' length, every lane combines with the lane k
places before it (after it, in reverse), shifted there by `shift_lanes` (the
TPU's lane/sublane rotate), and an iota mask keeps lanes that have no such
partner. Mosaic has no cumsum or associative_scan primitive; rotates, selects
and the combine's own ops are all it needs.

The combine is any associative function of tile values, traced once per step
(torch.add for cumsum, torch.mul for cumprod, the user's for
`hl.associative_scan` / `hl.reduce`), so its ops are ordinary registry ops
that the mask planner and the lowering rules already know.

A partial tile's padding sits at the end of the axis. A forward scan never
reads past a lane, so its valid lanes never see padding. A reverse scan reads
later lanes: there the step's mask also requires the partner to be valid,
`index + k < count`, where count is the number of valid lanes (a sum of ones
laid out like the input, which the mask planner masks like any reduction's
operand). No identity is needed, so a user combine needs none either.
`reduce_by_scan` is lane 0 of a reverse scan: the combination of every valid lane.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from ... import exc
from .binders import normalize_dims
from .definition import EVERY_DTYPE, Call, Composite, Record

_LOW_PRECISION = (torch.bfloat16, torch.float16)
Combine = Callable[[list, list], list]  # (earlier lanes, later lanes) -> combined, one value per scanned value


def scan(record: Record, values: Sequence[Any], axis: int, reverse: bool, combine: Combine) -> list:
    """The inclusive scan of `values` (tile values of one shape) along `axis`.

    `record(spelling, ...)` records a registry op; `record.internal(op, operand, **attrs)`
    one that no torch spelling names; `record.arange(n)` an int32 iota; `record.named`
    names a step in the generated code. `combine(a, b)`
    combines earlier lanes `a` with later lanes `b` (in reverse: later with earlier, so
    a reverse scan is the forward scan of the flipped axis, as in torch)."""
    values = list(values)
    shape = tuple(values[0].shape)
    length = shape[axis]
    if length <= 1:
        return values
    index = record("reshape", record.arange(length), [length if a == axis else 1 for a in range(len(shape))])
    record.named(index, "scan_index")
    count = valid_count(record, values[0], axis) if reverse else None
    step = 1
    while step < length:
        shifted = [record.named(record.internal("shift_lanes", v, shift=-step if reverse else step, axis=axis),
                                f"{'later' if reverse else 'earlier'}_by_{step}") for v in values]
        combined = combine(shifted, values)
        if reverse:
            keep = record("lt", record("add", index, step), count)
        else:
            keep = record("ge", index, step)
        values = [record.named(record("where", keep, c, v), f"scan_{step * 2}") for c, v in zip(combined, values)]
        step *= 2
    return values


def valid_count(record: Record, value: Any, axis: int) -> Any:
    """How many lanes of `value` along `axis` are valid (int32, keepdim): a partial tile's
    padding is masked to 0 before the sum like any reduction's operand."""
    ones = record("where", record("isnan", value), 1, 1)
    return record.named(record("sum", ones, axis, True), "valid_count")


def reduce_by_scan(record: Record, values: Sequence[Any], axes: Sequence[int], keepdim: bool,
                   combine: Combine) -> list:
    """The combination of every valid lane of `values` over `axes`: lane 0 of a reverse scan,
    axis by axis from the last, its combine given the earlier lanes first (as a left fold: a combine that
    keeps the earlier of equals, a first-index argmax, answers as reference mode does)."""
    values = list(values)
    in_order = lambda later, earlier: combine(earlier, later)  # noqa: E731 - the reverse scan's order, undone
    for axis in sorted(axes, reverse=True):  # the last axis first: row-major order, as a flat fold
        values = scan(record, values, axis, True, in_order)
        key = tuple(slice(0, 1) if a == axis else slice(None) for a in range(len(values[0].shape)))
        values = [v[key] for v in values]
    if not keepdim and axes:
        values = [record("squeeze", v, tuple(sorted(axes))) for v in values]
    return values


def check_combined(combined: Any, like: Sequence[Any], what: str) -> list:
    """A combine function's result as a list, of the scanned values' count, shapes and dtypes."""
    items = list(combined) if isinstance(combined, (tuple, list)) else [combined]
    if len(items) != len(like):
        raise exc.UnsupportedOperation(
            f"{what}: the combine function returned {len(items)} value(s) for {len(like)} scanned value(s); "
            "it must return one value per input, in order.")
    for item, value in zip(items, like):
        shape, dtype = tuple(getattr(item, "shape", ())), getattr(item, "dtype", None)
        if shape != tuple(value.shape) or dtype != value.dtype:
            raise exc.ShapeMismatch(
                f"{what}: the combine function returned a {list(shape)} {dtype} value for a {list(value.shape)} "
                f"{value.dtype} input; it must combine elementwise and keep the dtype (cast inside it).")
    return items


# ------------------------------------------------------- torch.cumsum / cumprod --


def _cumulative(spelling: str) -> Callable[[Call, Record], Any]:
    operation = {"cumsum": "add", "cumprod": "mul"}[spelling]

    def expand(call: Call, record: Record) -> Any:
        x, dim, dtype = _cumulative_arguments(call)
        source = call.meta_of(x)
        if not isinstance(source, torch.Tensor):
            raise exc.UnsupportedOperation(f"{call.display} needs a tensor, got {x!r}.")
        result_dtype = dtype or (source.dtype if source.dtype.is_floating_point else torch.int32)
        work = torch.float32 if result_dtype in _LOW_PRECISION else result_dtype  # torch accumulates 16-bit in f32
        if source.dtype != work:
            x = record("to", x, work)
        reverse = call.kwargs.get("reverse", False)
        (out,) = scan(record, [x], dim, reverse, lambda a, b: [record(operation, a[0], b[0])])
        if dtype is None and not source.dtype.is_floating_point:  # torch's result is int64 (hl.cumsum's too)
            record.holds_int64(out, spelling, (x,), dim=dim, reverse=reverse)
        return out if work == result_dtype else record("to", out, result_dtype)

    return expand


def _cumulative_arguments(call: Call) -> tuple[Any, int, torch.dtype | None]:
    """(input, dim, dtype) of torch.cumsum(x, dim, *, dtype=None) and Tensor.cumsum(dim);
    `reverse=` is hl.cumsum's own."""
    unknown = set(call.kwargs) - {"input", "dim", "dtype", "reverse"}
    if unknown:
        raise exc.UnsupportedOperation(f"{call.display}() got an unsupported argument {sorted(unknown)[0]!r}.")
    args = list(call.args)
    x = args.pop(0) if args else call.kwargs.get("input")
    dim = args.pop(0) if args else call.kwargs.get("dim")
    if dim is None or isinstance(dim, (list, tuple)):
        raise exc.UnsupportedOperation(f"{call.display} needs one dim: the axis to scan, e.g. dim=-1.")
    (dim,) = normalize_dims(dim, call.rank_of(x))
    return x, dim, call.kwargs.get("dtype")


_NOTE = ("one dim; a log-step scan of lane rotates (Mosaic has no scan primitive); 16-bit floats "
         "accumulate in float32; integers give torch's int64 numbers in int32, checked to fit in interpret mode")

SCAN_DEFINITIONS = (
    Composite("cumsum", ("cumsum",), _cumulative("cumsum"), dtypes=EVERY_DTYPE, note=_NOTE),
    Composite("cumprod", ("cumprod",), _cumulative("cumprod"), dtypes=EVERY_DTYPE, note=_NOTE),
)
