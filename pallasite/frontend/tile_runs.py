"""`tile.index + c`: a tile's positions shifted by a compile-time int, recognized from the
producers of a device value (for `frontend/indexing.py`'s `ShiftedTile` and for `hl.load`,
through `DeviceTensor.tile_shift`)."""
from __future__ import annotations

from typing import Any, Callable

import torch

from ..ir import ScalarSymbol, Value
from ..ir.ops import scalar_arithmetic

# the value of an int kernel argument's symbol, made a constant of the variant (None: not one)
ArgumentValue = Callable[[ScalarSymbol], "int | None"]


def tile_run(value: Value, argument: ArgumentValue | None = None) -> tuple | None:
    """(dim, c) when `value` is `tile.index + c` for a compile-time int c (built with + and -
    of ints, `tile + c` included), else None. With `argument`, c may add int kernel arguments
    too (`tile.index - back`): each becomes a constant of the variant, as reference mode,
    which reads the argument's value, shifts by it."""
    producer = value.producer
    if producer is None:
        return None
    if producer.op == "tile_index":
        return producer.args[0], 0
    if producer.op not in ("add", "sub") or producer.kwargs.get("alpha", 1) != 1 or len(producer.args) != 2:
        return None
    left, right = producer.args
    if producer.op == "add" and _may_be_constant(left) and isinstance(right, Value):
        left, right = right, left
    if not (isinstance(left, Value) and _may_be_constant(right)):
        return None
    inner = tile_run(left, argument)
    # an argument becomes a constant only here, for a run (not for `gathered - c`)
    shift = None if inner is None else constant_int(right, argument)
    if inner is None or shift is None:
        return None
    return inner[0], inner[1] + (shift if producer.op == "add" else -shift)


def constant_int(value: Any, argument: ArgumentValue | None) -> int | None:
    """The int `value` is when it is built of ints and int kernel arguments with integer
    arithmetic (`c + 1`, `2 * c`: the arguments made constants of the variant), else None."""
    if type(value) is int:
        return value
    if argument is None or not _may_be_constant(value):
        return None
    node = value.producer
    if node.op == "scalar_arg":
        return argument(node.args[0])
    operands = [constant_int(item, argument) for item in node.args[:2]]
    if any(item is None for item in operands):
        return None
    if node.op == "neg":
        return -operands[0]
    return scalar_arithmetic(node.op).function(operands[0], operands[1] * node.kwargs.get("alpha", 1))


def _may_be_constant(value: Any) -> bool:
    """An int, or an int scalar of device code built of ints and scalar arguments read into it
    (`%c = scalar_arg(c)`, `c + 1`) with integer arithmetic (nothing is specialized here)."""
    if type(value) is int:
        return True
    if not (isinstance(value, Value) and value.shape == () and value.dtype == torch.int32 and value.producer):
        return False
    node = value.producer
    if node.op == "scalar_arg":
        return True
    arithmetic = scalar_arithmetic(node.op)
    if node.op == "neg":
        return _may_be_constant(node.args[0])
    return (arithmetic is not None and arithmetic.spelling in ("+", "-", "*") and len(node.args) == 2
            and all(_may_be_constant(item) for item in node.args))
