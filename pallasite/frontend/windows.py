"""Windows of a tensor axis written as slices with traced bounds (`x[t, s : s + n]`): which
of them are a tile scaled or shifted by a constant, and which are a gather of `s + arange(n)`.
`frontend/tensor_access.py` asks; `frontend/indexing.py` recognizes every other subscript.
"""
from __future__ import annotations

from typing import Any

from .. import exc
from ..ir import Value, ops
from ..ir.ops import OpKind
from .indexing import is_int, slice_text
from .proxies import DeviceTensor


def computed_window(item: Any) -> tuple[DeviceTensor, int] | None:
    """`x[t, s : s + n]` with `s` a device scalar and `n` a compile-time int (Helion's int4
    GEMM reads `A[tile_m, 2 * tile_k.begin : 2 * tile_k.begin + 2 * block]`): the window's
    start and length, read as the index vector `s + hl.arange(n)`; None for any other item."""
    if not (isinstance(item, slice) and isinstance(item.start, DeviceTensor)
            and isinstance(item.stop, DeviceTensor) and is_int(item.step, None, 1)):
        return None
    start, producer = item.start.value, item.stop.value.producer
    if start.shape != () or producer is None or producer.op != "add" or producer.kwargs.get("alpha", 1) != 1:
        return None
    left, right = producer.args[:2]
    length = right if same_scalar(left, start) else left if same_scalar(right, start) else None
    if type(length) is not int:
        return None
    if length <= 0:
        raise exc.IndexingError(f"The slice {slice_text(item)} selects no element; device code has no "
                                "empty windows.")
    return item.start, length


def same_scalar(a: Any, b: Any) -> bool:
    """Whether two traced scalars are one value, or one computation of the same operands (the
    start of `x[t, t2.begin + n : t2.begin + n + t2.block_size]` written out twice): pure
    arithmetic and tile attributes only, never a load or a random draw."""
    if a is b:
        return True
    if not (isinstance(a, Value) and isinstance(b, Value)) or a.shape != () or b.shape != ():
        return type(a) is int and type(b) is int and a == b
    first, second = a.producer, b.producer
    if first is None or second is None or first.op != second.op or first.op not in ops.OPS \
            or ops.OPS[first.op].kind not in (OpKind.ELEMENTWISE, OpKind.STRUCTURAL) \
            or first.kwargs != second.kwargs or len(first.args) != len(second.args) or a.dtype != b.dtype:
        return False
    return all(x is y or (not isinstance(x, Value) and type(x) is type(y) and x == y) or same_scalar(x, y)
               for x, y in zip(first.args, second.args))


def scaled_tile(start: DeviceTensor, length: int) -> tuple[Any, int] | None:
    """A window `tile.begin * c : tile.begin * c + tile.block_size * c` (int4's activations)
    is the tile scaled by c: (its TileDim, c), else None. Its lanes past c times the tile's
    valid positions are padding, as the tile's are."""
    producer = start.value.producer
    if producer is None or producer.op != "mul":
        return None
    left, right = producer.args[:2]
    begin, factor = (left, right) if type(right) is int else (right, left)
    if type(factor) is not int or factor <= 0 or not isinstance(begin, Value) or begin.producer is None \
            or begin.producer.op != "tile_begin":
        return None
    dim = begin.producer.args[0]
    return (dim, factor) if not dim.is_grid and length == dim.block_size * factor else None


def shifted_window(start: DeviceTensor, length: int, size: Any) -> tuple[Any, int] | None:
    """A window `tile.begin + c : tile.begin + c + tile.block_size` (Helion's fused SwiGLU
    reads the up-projection half `W[tile_k, tile_n.begin + N : ... + tile_n.block_size]`)
    of an axis of `size` positions is the tile shifted by the static int c: (its TileDim,
    c), else None. Its lanes past the tile's valid positions are padding, as the tile's are
    (a gather of start + hl.arange(length) would read past them). Only where every valid
    lane lies inside the axis (static loop bounds): there the slice means what torch's
    does; a start below 0 wraps in Python and a stop past the end clamps, which a shifted
    tile (0 outside the tensor) does not mean, so those stay gathers (range-checked)."""
    value, offset = start.value, 0
    while value.producer is not None and value.producer.op in ("add", "sub") \
            and value.producer.kwargs.get("alpha", 1) == 1:  # tile.begin - 3 + 8: constants fold
        left, right = value.producer.args[:2]
        if type(right) is int and isinstance(left, Value):
            value, offset = left, offset + (right if value.producer.op == "add" else -right)
        elif type(left) is int and isinstance(right, Value) and value.producer.op == "add":
            value, offset = right, offset + left
        else:
            return None
    if value.producer is None or value.producer.op != "tile_begin":
        return None
    dim = value.producer.args[0]
    if dim.is_grid or length != dim.block_size or not all(type(v) is int for v in (dim.begin, dim.end, size)):
        return None
    return (dim, offset) if dim.begin + offset >= 0 and dim.end + offset <= size else None


__all__ = ["computed_window", "same_scalar", "scaled_tile", "shifted_window"]
