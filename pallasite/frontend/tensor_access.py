"""Subscripts and assignments in device code: loads, stores and subviews.

`x[tile_m, tile_n]` of a kernel tensor records a `Load`, `x[...] = v` a `Store`
(`index` normalized by `indexing.py`), a narrowing read of a device value
(`blk[tile.index]`) a `subview` node, and any other subscript the `getitem`
view through `OpRecorder.apply`. The functions take the recorder and use its
public interface (`device`, `record`, `append_node`, `scalar_value`,
`device_operand`, `apply`, `call_method`, `host`, `location`).
"""
from __future__ import annotations

from typing import Any

import torch

from .. import exc
from .. import language as hl
from ..ir import GatherIndex, Load, Run, ScalarIndex, Store, Value, ops
from ..ir.index_forms import splice_tile_tuples
from ..ir.sizes import broadcast_shape
from . import chunk_views, flat_rows, lane_pairs, paired_indexing
from .indexing import (
    check_host_subscript, gathered_axis, indexed_shape, is_index_tile, is_narrowing, narrowed_shape,
    normalize_narrowing, normalize_subscript,
)
from .operands import shape_key
from . import device_values
from .windows import computed_window, scaled_tile, shifted_window
from .proxies import DeviceTensor, HostTensor, TileProxy


def subscript(recorder: Any, tensor: Any, key: Any, zero_past_end: bool = False) -> Any:
    """`tensor[key]` in device or host code (`zero_past_end`: a masked load's, where a tile
    past the tensor's end reads 0, `indexing.normalize_subscript`)."""
    key = splice_tile_tuples(key, _is_tile)
    if isinstance(tensor, HostTensor) and _in_jagged_loops(recorder):
        return hl.load(tensor, key if isinstance(key, tuple) else (key,))  # it applies the loops' implicit mask
    if isinstance(tensor, HostTensor) and recorder.device is None:
        check_host_subscript(key, tensor.symbol.name)
    if isinstance(tensor, DeviceTensor) and recorder.device is not None:
        half = lane_pairs.pair_half(recorder.composite_record("indexing"), tensor, key)
        if half is not None:  # one half of RoPE's lane pairs: a strided lane gather
            return half
    if isinstance(tensor, DeviceTensor) and recorder.device is not None and is_narrowing(key):
        return _subview(recorder, tensor, key)
    if isinstance(tensor, DeviceTensor) or recorder.device is None:
        return recorder.apply("getitem", lambda m, k: m[shape_key(k)], (tensor, key), {}, display="indexing")
    if len(paired_indexing.index_tensors(key)) > 1:  # torch pairs them element by element
        return paired_indexing.paired_load(recorder, tensor, key)
    rows = flat_rows.read_rows(recorder, tensor, key, subscript)
    if rows is not None:  # a flat gather of whole rows: a gather of rows of the 2-D view
        return rows
    chunked = None if zero_past_end else chunk_views.chunked_subscript(recorder, tensor, key, write=False)
    if chunked is not None:  # `x[c * K + tile.index]`: the tile of row c of the axis seen as [n // K, K]
        return subscript(recorder, *chunked)
    symbol = tensor.symbol
    flat_rows.check_access(recorder, symbol, write=False)
    key = _windows_as_index_vectors(recorder, key, symbol.shape)
    key, tile_shape = _flatten_index_tile(recorder, key)
    index = normalize_subscript(key, symbol.shape, symbol.name, recorder.scalar_value,
                                zero_past_end=zero_past_end)
    shape = indexed_shape(index, symbol.shape)
    value = recorder.record("load", (), {}, shape, symbol.dtype, node_type=Load, tensor=symbol, index=index)
    result = DeviceTensor(recorder, value)
    if tile_shape is None:
        return result
    # torch semantics: the index tile's dims replace the gathered axis
    axis = gathered_axis(index)
    return recorder.call_method(result, "reshape", (shape[:axis] + tile_shape + shape[axis + 1:],), {})


def _in_jagged_loops(recorder: Any) -> bool:
    """Whether a subscript of a kernel tensor in device code is inside hl.jagged_tile loops
    (and not already the one an hl.load/hl.store applying their mask makes)."""
    return recorder.device is not None and hl.active_tracer().jagged_active


def _is_tile(item: Any) -> bool:
    return isinstance(item, TileProxy)


def _subview(recorder: Any, block: DeviceTensor, key: Any) -> DeviceTensor:
    """`blk[2]`, `blk[1:3]`, `blk[tile.index]`: a narrowing read of a device value, recorded
    as a `subview` node (whether it reads a VMEM ref is decided in plan/subviews.py)."""
    producer = block.value.producer
    internal = producer is not None and producer.composite  # a composite's step: no name of the user's
    name = "value" if internal or not block.value.name else block.value.name
    index = normalize_narrowing(key, tuple(block.value.shape), name, recorder.scalar_value)
    shape = narrowed_shape(index, tuple(block.value.shape))
    scalars = tuple(item.start if isinstance(item, Run) else item.index for item in index
                    if isinstance(item, (Run, ScalarIndex))
                    and isinstance(item.start if isinstance(item, Run) else item.index, Value))
    value = recorder.record("subview", (block.value, *scalars), {"index": index}, shape, block.value.dtype,
                            name=f"{name}_part" if block.value.name else "")
    return DeviceTensor(recorder, value)


def _windows_as_index_vectors(recorder: Any, key: Any, shape: tuple) -> Any:
    """A slice of computed start and static length (`computed_window`) reads the index
    vector `start + hl.arange(length)`: a gather, planned as any other; a tile's window
    shifted by a constant (inside the axis of `shape` it indexes) is that shifted tile."""
    items = list(key) if isinstance(key, (tuple, list)) else [key]
    windows = [computed_window(item) for item in items]
    if not any(windows):
        return key
    axes = _item_axes(items, len(shape))
    for position, window in enumerate(windows):
        if window is None:
            continue
        start, length = window
        scaled = scaled_tile(start, length)
        axis = axes[position]
        shifted = shifted_window(start, length, shape[axis]) if axis is not None else None
        if shifted is not None:  # the tile's lanes c positions on: a shifted tile, padded where the tile is
            dim, offset = shifted
            items[position] = TileProxy(recorder, dim).index + offset
        elif scaled is None:
            items[position] = start + device_values.arange(recorder, (length,), torch.int32)
        else:  # lane i * c + j is tile position i's j-th: padded where the tile is
            dim, factor = scaled
            index = TileProxy(recorder, dim).index[:, None] * factor
            items[position] = (index + device_values.arange(recorder, (factor,), torch.int32)[None, :]).reshape(-1)
        items[position].value.name = f"{start.value.name or 'start'}_window"
    return tuple(items)


def _item_axes(items: list, rank: int) -> list[int | None]:
    """The tensor axis each item of a subscript indexes (None: a new axis, an Ellipsis, or
    any item after an Ellipsis, whose axis depends on the items this function does not read)."""
    axes, axis = [], 0
    for item in items:
        if item is Ellipsis:
            return axes + [None] * (len(items) - len(axes))
        axes.append(None if item is None else axis)
        axis += item is not None
    return axes


def _flatten_index_tile(recorder: Any, key: Any) -> tuple[Any, tuple | None]:
    """A gather through an N-D index tile gathers through its flat vector (`idx.reshape(-1)`);
    the load's result is reshaped back to the tile's dims. Returns the key and the tile's shape."""
    items = list(key) if isinstance(key, (tuple, list)) else [key]
    tiles = [position for position, item in enumerate(items) if is_index_tile(item)]
    if not tiles:
        return key, None
    tile_shape = tuple(items[tiles[0]].value.shape)
    for position in tiles:  # several index vectors: normalize_subscript rejects them
        flat = recorder.call_method(items[position], "reshape", (-1,), {})
        flat.value.name = f"{items[position].value.name or 'index'}_flat"
        items[position] = flat
    return tuple(items), tile_shape


def store(recorder: Any, tensor: Any, key: Any, value: Any, atomic: bool = False, lane_mask: Any = None) -> None:
    """`tensor[key] = value`; `atomic`: the store of an `hl.atomic_add` (kwargs["atomic"]).
    Through an index vector, `lane_mask` (a bool vector over its lanes) keeps the lanes that
    write (`ir.Store.args[1]`)."""
    key = splice_tile_tuples(key, _is_tile)
    if recorder.device is None:
        return recorder.host.store(tensor, key, value)
    if isinstance(tensor, HostTensor) and not atomic and lane_mask is None and _in_jagged_loops(recorder):
        return hl.store(tensor, key if isinstance(key, tuple) else (key,), value)  # it applies the loops' mask
    if isinstance(tensor, DeviceTensor):
        raise exc.UnsupportedSyntax(
            "Assigning into part of a device value is not supported; build it with torch.where."
        )
    if not atomic and flat_rows.write_rows(recorder, tensor, key, value, lane_mask, store):
        return  # a flat scatter of whole rows: a scatter of rows of the 2-D view
    chunked = None if atomic or lane_mask is not None else chunk_views.chunked_subscript(recorder, tensor, key, True)
    if chunked is not None:  # `out[c * K + tile.index] = v`: the tile of row c of the chunk view
        return store(recorder, *chunked, value)
    symbol = tensor.symbol
    flat_rows.check_access(recorder, symbol, write=True)
    paired_indexing.refuse_paired_store(symbol.name, key)
    key = _windows_as_index_vectors(recorder, key, symbol.shape)
    index = normalize_subscript(key, symbol.shape, symbol.name, recorder.scalar_value, store=True)
    target_shape = indexed_shape(index, symbol.shape)
    operand = recorder.device_operand(value)
    extra = len(operand.shape) - len(target_shape) if isinstance(operand, Value) else 0
    if extra > 0 and all(type(size) is int and size == 1 for size in operand.shape[:extra]):
        # torch drops a value's leading unit dims to fit the slot (`out[g] = v.amax(0, keepdim=True)`)
        value = recorder.call_method(value, "reshape", (tuple(operand.shape[extra:]),), {})
        operand = recorder.device_operand(value)
    if isinstance(operand, Value):
        try:
            fits = broadcast_shape(operand.shape, target_shape) == tuple(target_shape)
        except ValueError:
            fits = False
        if not fits:
            raise exc.ShapeMismatch(
                f"Cannot store a value of shape {list(operand.shape)} into "
                f"{symbol.name}[...] of shape {list(target_shape)}."
            )
    elif not isinstance(operand, (int, float, bool)):
        raise exc.UnsupportedOperation(f"Cannot store {value!r} into {symbol.name}.")
    else:
        ops.check_number_fits(f"{symbol.name}[...]", operand, symbol.caller_dtype or symbol.dtype)
    kwargs = {"atomic": True} if atomic else {}
    args: tuple = (operand,)
    if lane_mask is not None:
        gathers = [item for item in index if isinstance(item, GatherIndex)]
        if not gathers:
            raise exc.UnsupportedOperation(f"A lane mask of a store into {symbol.name} needs an index vector.")
        lanes = gathers[0].value.shape[0]
        mask = recorder.device_operand(lane_mask)
        if not isinstance(mask, Value) or mask.dtype != torch.bool or tuple(mask.shape) != (lanes,):
            raise exc.ShapeMismatch(
                f"The mask of a store through an index vector into {symbol.name} must be a bool vector "
                f"of its {lanes} lanes.")
        args = (operand, mask)
    node = Store("store", args, kwargs, [], recorder.location, tensor=symbol, index=index)
    recorder.append_node(node)
