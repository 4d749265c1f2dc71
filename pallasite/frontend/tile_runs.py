"""`tile.index + c`: a tile's positions shifted by a compile-time int, recognized from the
producers of a device value (for `frontend/indexing.py`'s `ShiftedTile` and for `hl.load`,
through `DeviceTensor.tile_shift`)."""
from __future__ import annotations

from typing import Any

from ..ir import Value


def tile_run(value: Value) -> tuple | None:
    """(dim, c) when `value` is `tile.index + c` for a compile-time int c (built with + and -
    of ints, `tile + c` included), else None."""
    producer = value.producer
    if producer is None:
        return None
    if producer.op == "tile_index":
        return producer.args[0], 0
    if producer.op not in ("add", "sub") or producer.kwargs.get("alpha", 1) != 1 or len(producer.args) != 2:
        return None
    left, right = producer.args
    if producer.op == "add" and _constant_int(left) and isinstance(right, Value):
        left, right = right, left
    if not (isinstance(left, Value) and _constant_int(right)):
        return None
    inner = tile_run(left)
    if inner is None:
        return None
    return inner[0], inner[1] + (right if producer.op == "add" else -right)


def _constant_int(value: Any) -> bool:
    return type(value) is int
