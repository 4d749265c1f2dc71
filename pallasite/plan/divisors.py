"""Integer divisors that may be zero: torch raises ZeroDivisionError, a TPU returns garbage.

Each integer `//`, `%`, `torch.fmod` and `torch.div(..., rounding_mode=...)` whose divisor
planning cannot prove nonzero (`bounds.py:value_interval`: `t.index + 1` is [1, ...]) is a
`RangeCheck` with `nonzero` set: interpret mode checks the divisor just before the
division (so a division an `if` skips is not checked), on the lanes that hold data (the
mask planner's padded axes: a partial tile's padding holds zeros), and the call raises
`exc.ShapeMismatch` at the user's line, as reference mode does. A TPU does not check. A
literal 0 divisor is that error when compiling.
"""
from __future__ import annotations

from typing import Iterator

from .. import exc
from ..ir import Value, walk_nodes
from ..ir.intervals import value_interval
from .bounds import describe
from .plans import RangeCheck

_DIVISIONS = ("floor_divide", "remainder", "fmod")
_SPELLINGS = {"floor_divide": "//", "remainder": "%", "fmod": "torch.fmod", "div": "torch.div"}


def divisor_checks(body: list, check_ids: Iterator[int], padded: dict) -> tuple[RangeCheck, ...]:
    """One check per integer division whose divisor may be zero (`padded`: the mask planner's
    padded axes of each value, by id)."""
    checks = []
    for node in walk_nodes(body):
        rounded = node.op == "div" and node.kwargs.get("rounding_mode") in ("floor", "trunc")
        if not (node.op in _DIVISIONS or rounded) or len(node.outputs) != 1 or len(node.args) < 2:
            continue
        divisor = node.args[1]
        if type(divisor) is int and divisor == 0 and not node.output.dtype.is_floating_point:
            # a literal 0 (`x % 0`, or int8 `x // 65536`: 0 in int8, as torch converts it)
            raise exc.ShapeMismatch(f"{_SPELLINGS[node.op]} of integers by 0, where torch raises ZeroDivisionError "
                                    "(integer division by zero).", node.location)
        if not isinstance(divisor, Value) or divisor.dtype.is_floating_point or node.output.dtype.is_floating_point:
            continue
        interval = value_interval(divisor)
        if interval is not None and (interval[0] > 0 or interval[1] < 0):
            continue
        text = describe(divisor).replace("{", "{{").replace("}", "}}")
        message = (f"{_SPELLINGS[node.op]} of integers: its divisor ({text}) is 0 in some lane, where torch raises "
                   "ZeroDivisionError (integer division by zero)")
        checks.append(RangeCheck(next(check_ids), 0, message, node.location, value=divisor, node_id=node.id,
                                 guarded=True, nonzero=True,
                                 valid_axes=tuple(sorted(padded.get(divisor.id, {}).items()))))
    return tuple(checks)


__all__ = ["divisor_checks"]
