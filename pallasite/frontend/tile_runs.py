"""`tile.index + c`: a tile's positions shifted by a compile-time int, recognized from the
producers of a device value (for `frontend/indexing.py`'s `ShiftedTile` and for `hl.load`,
through `DeviceTensor.tile_shift`)."""
from __future__ import annotations

from typing import Any, Callable

from ..ir import ScalarSymbol, Value

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
    shift = right if type(right) is int else None if inner is None or argument is None else argument(_symbol(right))
    if inner is None or shift is None:
        return None
    return inner[0], inner[1] + (shift if producer.op == "add" else -shift)


def _symbol(value: Value) -> ScalarSymbol:
    return value.producer.args[0]


def _may_be_constant(value: Any) -> bool:
    """An int, or a scalar argument read into device code (`%c = scalar_arg(c)`)."""
    return type(value) is int or (
        isinstance(value, Value) and value.producer is not None and value.producer.op == "scalar_arg")
