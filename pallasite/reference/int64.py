"""Integers torch computes in int64, in reference mode: the compiled kernel's rule.

Device integers are int32. Where torch's result is int64 (an integer sum, `.long()`, and
the integer arithmetic taking such a value on), the compiled kernel holds torch's number
while it fits int32, and interpret mode checks that it does where an op could leave int32
(plan/int64_values.py). Reference mode runs torch itself: a value torch holds in int64 is
marked (`ATTRIBUTE`) when narrowed to int32, and an op taking a marked operand runs on its
int64 values again. Where the op is one the compiled kernel checks (`ir/exact_ints.py`) and
its number leaves int32, the value is marked overflowed instead (an `Overflow`: the op, its span
and line): ops that give torch's result wrapped on a wrapped operand take it on
(`exact_ints.passes_wrapped`: `+`, `*`, sums, selections, views), a cast to int32 or an
int32 store ends it (torch wraps there too), and any other use (a comparison, a float cast,
an index, an int64 store) raises its `exc.ShapeMismatch` at the op's line, as the compiled
call's check does (which planning makes only for numbers a use needs). A contraction of such
values is refused, as there. `x op= v` of an unmarked x wraps to x's int32 (torch keeps x's
dtype).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from .. import exc
from ..ir import ops
from ..ir.exact_ints import EXACT, SATURATED_USE, drops_wrap, needing_use, passes_wrapped, past_int32
from . import lanes

ATTRIBUTE = "_pallasite_int64"
_INT32 = torch.iinfo(torch.int32)
_OPERATORS = {name: op.name for op in ops.OPS.values() if op.operator is not None
              for name in (op.operator.dunder, op.operator.reflected) if name}
_SOURCES = frozenset({"sum", "prod", "cumsum", "cumprod", "long", "to", "argmax", "argmin", "max", "min",
                      "type", "int64", "sort", "argsort", "topk", "cummax", "cummin"})
_SHAPE_QUERIES = frozenset({"size", "dim", "numel", "nelement", "ndimension", "stride", "__len__", "element_size",
                            "is_contiguous", "is_floating_point", "get_device"})
_COMBINED = frozenset({"associative_scan", "reduce"})  # a user combine function's result (`whole`)
_in_place_targets: list[bool] = []  # `x op= v` running: whether x is marked


@dataclass(frozen=True)
class Overflow:
    """A value whose torch number left int32 (the op, its span, its line): a use needing that
    number raises `error(use)`."""

    op: str
    lo: int
    hi: int
    location: exc.SourceLocation | None

    def error(self, use: str) -> exc.ShapeMismatch:
        return exc.ShapeMismatch(past_int32(self.op, self.lo, self.hi, use) + ".", self.location)


def is_wide(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and bool(getattr(value, ATTRIBUTE, False))


def overflow_of(value: Any) -> Overflow | None:
    mark = getattr(value, ATTRIBUTE, None) if isinstance(value, torch.Tensor) else None
    return mark if isinstance(mark, Overflow) else None


def check_stored(target: torch.Tensor, key: Any, value: Any, location: exc.SourceLocation | None) -> None:
    """`target[key] = value`: an int32 (or narrower) tensor wraps torch's number as the kernel
    does; any other tensor, and any index, needs the number itself."""
    for item in lanes.leaves(key):
        _needs(item, needing_use("index", None, location))
    integer = not (target.dtype.is_floating_point or target.dtype.is_complex or target.dtype == torch.bool)
    if not (integer and target.dtype.itemsize <= 4):
        _needs(value, needing_use("store", target.dtype, location))


def check_bound(bound: Any, location: exc.SourceLocation | None) -> None:
    """A loop's begin or end (`hl.grid(j)` of an integer sum) needs torch's number."""
    _needs(bound, needing_use("bound", None, location))


def _needs(item: Any, use: str) -> None:
    overflow = overflow_of(item)
    if overflow is not None:
        raise overflow.error(use)


def wanted(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether a device call may make a value torch holds in int64."""
    return name in _SOURCES or any(is_wide(item) for item in lanes.leaves((args, kwargs)))


def follow(func: Callable, name: str, args: tuple, kwargs: dict, run: Callable,
           location: exc.SourceLocation | None = None) -> Any:
    """`run(func, args, kwargs)` with marked operands at their int64 values; an int64 result
    narrowed and marked (overflowed where it leaves int32 and the compiled kernel checks it)."""
    op = _op_name(func, name)
    wide_operand = any(is_wide(item) for item in lanes.leaves((args, kwargs)))
    source = args[0] if args else kwargs.get("input")
    if op in ("cumsum", "cumprod") and kwargs.get("dtype") is None and isinstance(source, torch.Tensor) and \
            not source.dtype.is_floating_point:
        kwargs = {**kwargs, "dtype": torch.int64}  # torch's own result dtype (the handler narrows otherwise)
    # the `x op= v` running is this call's alone (not the calls its handler makes)
    in_place = _in_place_targets.pop() if _in_place_targets else None
    try:
        with lanes.keeping_int64():
            result = run(func, _widened(args), _widened(kwargs))
    finally:
        if in_place is not None:
            _in_place_targets.append(in_place)
    carried = _overflow_passed(op, args, kwargs, result, location)
    if op == "to" and isinstance(source, torch.Tensor) and source.dtype.is_floating_point:
        _check_float_cast(source, result, location)
    return _narrowed(result, op, wide_operand, in_place, carried, location)


def _check_float_cast(source: torch.Tensor, result: Any, location: exc.SourceLocation | None) -> None:
    """`.long()` of floats is torch's int64 number, which the kernel's cast saturates at int32's
    ends: past them it is an error at once (saturating is not wrapping), as compiled."""
    if not isinstance(result, torch.Tensor) or result.dtype != torch.int64 or not source.numel():
        return
    with torch._C.DisableTorchFunction():
        exact = source.to(torch.int64)  # NaN and infinities: int64's minimum, as torch's cast gives
        lo, hi = int(exact.min()), int(exact.max())
    if lo < _INT32.min or hi > _INT32.max:
        raise exc.ShapeMismatch(past_int32("to", lo, hi, SATURATED_USE) + ".", location)


def _overflow_passed(op: str, args: tuple, kwargs: dict, result: Any,
                     location: exc.SourceLocation | None) -> Overflow | None:
    """The overflow an operand brings that the result takes on (raised where the op needs the
    operand's number: `exact_ints.passes_wrapped`)."""
    rest = dict(kwargs)  # torch.bitwise_and(h, other=1023): the operands by position
    first = (rest.pop("input"),) if "input" in rest else ()
    args = (*first, *args, *((rest.pop("other"),) if "other" in rest else ()))
    if op in _SHAPE_QUERIES:  # `h.size(0)`: no number needed
        return None
    results = [r for r in lanes.leaves(result) if isinstance(r, torch.Tensor)]
    use = needing_use(op, results[0].dtype if len(results) == 1 else None, location)
    for item in lanes.leaves(rest):
        _needs(item, use)
    carried = None
    for position, item in enumerate(args):
        for leaf in lanes.leaves(item):
            overflow = overflow_of(leaf)
            if overflow is None:
                continue
            if drops_wrap(op, args) and len(results) == 1:
                continue
            if len(results) != 1 or not passes_wrapped(op, position, results[0].dtype):
                raise overflow.error(use)
            carried = carried or overflow
    return carried


def whole(op: str, values: Any, run: Callable[[Any], Any], location: exc.SourceLocation | None) -> Any:
    """`run(values)` of a user combine function (hl.associative_scan, hl.reduce) on values torch
    holds in int64: run on their int64 numbers, each integer result marked, overflowed where it
    leaves int32 (the compiled kernel checks the combine's ops)."""
    if not any(is_wide(item) for item in lanes.leaves(values)):
        return run(values)
    with lanes.keeping_int64():
        result = run(_widened(values))
    return _narrowed(result, op, True, None, None, location)


def marked(tensor: torch.Tensor, mark: bool | Overflow = True) -> torch.Tensor:
    """`tensor` (int32) marked as holding torch's int64 numbers (or their low 32 bits, with
    the `Overflow` a use needing the numbers raises)."""
    setattr(tensor, ATTRIBUTE, mark)
    return tensor


def viewed(args: tuple, result: Any, location: exc.SourceLocation | None) -> Any:
    """A view or part of a marked value (`s[:, None]`, `c.T`) is marked too (an index needs
    its number)."""
    for item in lanes.leaves(args[1:]):
        _needs(item, needing_use("index", None, location))
    if args and is_wide(args[0]) and isinstance(result, torch.Tensor) and not result.dtype.is_floating_point:
        return marked(result, getattr(args[0], ATTRIBUTE))
    return result


@contextlib.contextmanager
def in_place_update(target: Any) -> Iterator[None]:
    """`x op= v`: the result keeps x's dtype, as torch's in-place update does."""
    _in_place_targets.append(is_wide(target))
    try:
        yield
    finally:
        _in_place_targets.pop()


def _narrowed(result: Any, op: str, wide_operand: bool, in_place: bool | None, carried: Overflow | None,
              location: exc.SourceLocation | None) -> Any:
    if isinstance(result, (tuple, list)) and any(isinstance(r, torch.Tensor) for r in result):
        items = [_narrowed(r, op, wide_operand, in_place, carried, location) for r in result]
        return type(result)(items)
    if not isinstance(result, torch.Tensor) or result.dtype != torch.int64:
        return result
    narrow = lanes.marked_as(result.to(torch.int32), result)
    if in_place is False:  # an int32 x: torch wraps the update into x
        return narrow
    if carried is not None:
        return marked(narrow, carried)
    if (op in EXACT or op in _COMBINED) and result.numel():
        lo, hi = int(result.min()), int(result.max())
        if lo < _INT32.min or hi > _INT32.max:
            return marked(narrow, Overflow(op, lo, hi, location))
    elif wide_operand and op in ("matmul", "mm", "bmm", "dot", "addmm", "baddbmm", "einsum"):
        raise exc.UnsupportedDtype(
            f"{op}: torch computes it in int64 (from an integer sum, `.long()`, ...), which device integers "
            "cannot hold (TPU has no 64-bit vectors), and pallasite has no exact check of this op; cast the "
            "int64 value to int32 first (`.to(torch.int32)`) or compute in float32.")
    return marked(narrow)


def _op_name(func: Callable, name: str) -> str:
    if name in _OPERATORS:
        return _OPERATORS[name]
    spelling = name.rstrip("_")
    if spelling in ops.SPELLINGS:
        return ops.SPELLINGS[spelling][0].name
    return spelling


def _widened(item: Any) -> Any:
    if is_wide(item):
        return lanes.marked_as(item.to(torch.int64), item)
    if isinstance(item, (tuple, list)):
        return type(item)(_widened(i) for i in item)
    if isinstance(item, dict):
        return {key: _widened(value) for key, value in item.items()}
    return item


__all__ = ["ATTRIBUTE", "Overflow", "check_bound", "check_stored", "follow", "in_place_update", "is_wide", "marked", "overflow_of",
           "viewed", "wanted", "whole"]
