"""`x[b, c * K + tile.index, h, :]`: a tile's positions inside chunk c of an axis cut into
chunks of K (Helion's Mamba2 kernels: `tile_c.begin * chunk_size + tile_m.index`).

As an index vector this is a gather, which keeps the whole axis in VMEM with a one-hot over
it (80 MiB for Mamba2's C at its own sizes). When K divides the axis and the tile's range
lies in [0, K), the positions are the tile of row c of the axis seen as [n // K, K]: the
access goes through the host view `x.reshape(..., n // K, K, ...)` made before the device
loop, indexed `[b, c, tile, h, :]` (a scalar index picks the chunk, the tile its block), so
it streams like any tile. The view is recorded as `frontend/flat_rows.py`'s rows views are
(one view of a buffer per loop; another access of a written buffer retraces without it).
"""
from __future__ import annotations

from typing import Any

import torch

from ..ir import TileDim, Value
from ..ir.intervals import scalar_interval
from . import flat_rows
from .proxies import DeviceTensor, HostTensor, TileProxy


def chunked_subscript(recorder: Any, tensor: Any, key: Any, write: bool) -> tuple[HostTensor, tuple] | None:
    """(the chunk view, its key) for `tensor[key]` when one item is `c * K + tile.index` of a
    chunk form (see the module's doc), else None."""
    items = key if isinstance(key, tuple) else (key,)
    if not isinstance(tensor, HostTensor) or recorder.device is None or any(i is None or i is Ellipsis for i in items):
        return None
    shape = tuple(tensor.symbol.shape)
    forms = [(axis, _chunk_form(item.value, shape[axis])) for axis, item in enumerate(items)
             if axis < len(shape) and isinstance(item, DeviceTensor)]
    forms = [(axis, form) for axis, form in forms if form is not None]
    if len(forms) != 1 or not flat_rows.may_use_view(recorder, tensor.symbol, write=write):
        return None
    axis, (chunk, width, dim) = forms[0]
    view_shape = shape[:axis] + (shape[axis] // width, width) + shape[axis + 1:]
    view = flat_rows.shaped_view(recorder, tensor, view_shape, "chunks")
    row = chunk if isinstance(chunk, int) else DeviceTensor(recorder, chunk)
    return view, tuple(items[:axis]) + (row, TileProxy(recorder, dim)) + tuple(items[axis + 1:])


def _chunk_form(value: Value, size: Any) -> tuple[Any, int, TileDim] | None:
    """(c, K, tile) when `value` is `c * K + tile.index` (either order, c an int32 scalar or an
    int), K an int dividing `size`, the tile's range inside [0, K); else None."""
    node = value.producer
    if node is None or node.op != "add" or node.kwargs.get("alpha", 1) != 1 or len(node.args) != 2:
        return None
    for positions, scaled in (node.args, node.args[::-1]):
        dim = _tile_of(positions)
        factors = _scaled(scaled)
        if dim is None or factors is None:
            continue
        chunk, width = factors
        if type(size) is not int or width <= 0 or size % width or not isinstance(dim.begin, int) or dim.begin < 0:
            continue
        interval = scalar_interval(dim.end)
        if interval is not None and interval[1] <= width:
            return chunk, width, dim
    return None


def _tile_of(value: Any) -> TileDim | None:
    node = value.producer if isinstance(value, Value) else None
    if node is None or node.op != "tile_index" or len(value.shape) != 1:
        return None
    return node.args[0]


def _scaled(value: Any) -> tuple[Any, int] | None:
    """(c, K) for the int32 scalar `c * K` (or `K * c`), K a positive int."""
    node = value.producer if isinstance(value, Value) else None
    if node is None or value.shape != () or value.dtype != torch.int32 or node.op != "mul" or len(node.args) != 2:
        return None
    for chunk, width in (node.args, node.args[::-1]):
        if type(width) is int and width > 0 and (type(chunk) is int or isinstance(chunk, Value)
                                                 and chunk.shape == () and chunk.dtype == torch.int32):
            return chunk, width
    return None
