"""Integers torch computes in int64, in reference mode: the compiled kernel's rule.

Device integers are int32. Where torch's result is int64 (an integer sum, `.long()`, and
the integer arithmetic taking such a value on), the compiled kernel holds torch's number
while it fits int32, and interpret mode checks that it does where an op could leave int32
(plan/int64_values.py). Reference mode runs torch itself: a value torch holds in int64 is
marked (`ATTRIBUTE`) when narrowed to int32, an op taking a marked operand runs on its
int64 values again, and where the op is one the compiled kernel checks (`ir/exact_ints.py`)
a number past int32 raises `exc.ShapeMismatch` at the line, as the compiled call does; a
contraction of such values is refused, as there. `x op= v` of an unmarked x wraps to x's
int32 (torch keeps x's dtype).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch

from .. import exc
from ..ir import ops
from ..ir.exact_ints import EXACT
from . import lanes

ATTRIBUTE = "_pallasite_int64"
_INT32 = torch.iinfo(torch.int32)
_OPERATORS = {name: op.name for op in ops.OPS.values() if op.operator is not None
              for name in (op.operator.dunder, op.operator.reflected) if name}
_SOURCES = frozenset({"sum", "prod", "cumsum", "cumprod", "long", "to", "argmax", "argmin", "max", "min",
                      "type", "int64"})
_in_place_targets: list[bool] = []  # `x op= v` running: whether x is marked


def is_wide(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and getattr(value, ATTRIBUTE, False)


def wanted(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether a device call may make a value torch holds in int64."""
    return name in _SOURCES or any(is_wide(item) for item in lanes.leaves((args, kwargs)))


def follow(func: Callable, name: str, args: tuple, kwargs: dict, run: Callable) -> Any:
    """`run(func, args, kwargs)` with marked operands at their int64 values; an int64 result
    checked (where the compiled kernel checks it), narrowed and marked."""
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
    return _narrowed(result, op, wide_operand, in_place)


def marked(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` (int32) marked as holding torch's int64 numbers."""
    setattr(tensor, ATTRIBUTE, True)
    return tensor


def viewed(args: tuple, result: Any) -> Any:
    """A view or part of a marked value (`s[:, None]`, `c.T`) is marked too."""
    if args and is_wide(args[0]) and isinstance(result, torch.Tensor) and not result.dtype.is_floating_point:
        return marked(result)
    return result


@contextlib.contextmanager
def in_place_update(target: Any) -> Iterator[None]:
    """`x op= v`: the result keeps x's dtype, as torch's in-place update does."""
    _in_place_targets.append(is_wide(target))
    try:
        yield
    finally:
        _in_place_targets.pop()


def _narrowed(result: Any, op: str, wide_operand: bool, in_place: bool | None) -> Any:
    if isinstance(result, (tuple, list)) and any(isinstance(r, torch.Tensor) for r in result):
        items = [_narrowed(r, op, wide_operand, in_place) for r in result]
        return type(result)(items)
    if not isinstance(result, torch.Tensor) or result.dtype != torch.int64:
        return result
    narrow = lanes.marked_as(result.to(torch.int32), result)
    if in_place is False:  # an int32 x: torch wraps the update into x
        return narrow
    if op in EXACT and result.numel():
        lo, hi = int(result.min()), int(result.max())
        if lo < _INT32.min or hi > _INT32.max:
            raise exc.ShapeMismatch(
                f"{op}: torch computes it in int64, and its values span [{lo}, {hi}], past int32, which "
                "device integers are (TPU has no 64-bit vectors); compute in float32 (`x.float()`), or cast "
                "its integer operands to int32 (`.sum(dim, dtype=torch.int32)`, `s.to(torch.int32) * k`: "
                "torch then wraps as the kernel does).")
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


__all__ = ["ATTRIBUTE", "follow", "marked", "in_place_update", "is_wide", "viewed", "wanted"]
