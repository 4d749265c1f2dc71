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
    return constant_number(value, argument, floats=False)


def constant_number(value: Any, argument: ArgumentValue | None, floats: bool = True) -> int | float | None:
    """The number `value` is when it is built of numbers and scalar kernel arguments with -, +,
    * (and, with `floats`, float arguments and / too: `-s` as an op's parameter), the arguments
    made constants of the variant by `argument`, else None (then none is specialized)."""
    if type(value) is int or (floats and type(value) is float):
        return value
    if argument is None or not _may_be_constant(value, floats):
        return None
    node = value.producer
    if node.op == "scalar_arg":
        return argument(node.args[0])
    operands = [constant_number(item, argument, floats) for item in node.args[:2]]
    if any(item is None for item in operands[:1 if node.op == "neg" else 2]):
        return None
    if node.op == "neg":
        return -operands[0]
    if node.op == "div":
        return operands[0] / operands[1]
    return scalar_arithmetic(node.op).function(operands[0], operands[1] * node.kwargs.get("alpha", 1))


def _may_be_constant(value: Any, floats: bool = False) -> bool:
    """A number, or a scalar of device code built of numbers and scalar arguments read into it
    (`%c = scalar_arg(c)`, `c + 1`) with that arithmetic (nothing is specialized here)."""
    if type(value) is int or (floats and type(value) is float):
        return True
    dtypes = (torch.int32, torch.float32) if floats else (torch.int32,)
    if not (isinstance(value, Value) and value.shape == () and value.dtype in dtypes and value.producer):
        return False
    node = value.producer
    if node.op == "scalar_arg":
        return True
    if node.op == "neg":
        return _may_be_constant(node.args[0], floats)
    arithmetic = scalar_arithmetic(node.op)
    divides = floats and node.op == "div" and node.kwargs.get("rounding_mode") is None
    return ((divides or arithmetic is not None and arithmetic.spelling in ("+", "-", "*")) and len(node.args) == 2
            and all(_may_be_constant(item, floats) for item in node.args))
