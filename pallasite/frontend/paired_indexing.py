"""Subscripts of a tensor holding several index tensors: torch's advanced indexing.

`x[t.index, labels[t]]` pairs its index tensors element by element (after
broadcasting them together), it does not take their outer product. This
module records such a load as what a TPU can run: the rows the first index
names (a tile's block when it is a tile's `.index`, else an ordinary gather),
then, for each other index, one `gather` node (torch.gather) picking the
position that index names along its axis, lane by lane. Where torch puts the
paired dims in front (index tensors separated by a slice or a new axis), the
result is permuted likewise; an N-D broadcast shape is flattened for the
gathers and restored at the end.

Stores through several index tensors are refused here with torch's rule
spelled out (a scatter takes one index vector).
"""
from __future__ import annotations

from typing import Any

import torch

from .. import exc
from ..ir import Value
from ..ir.index_forms import NARROW_INDEX_DTYPES, moved_beside_pairs, narrow_index, unbroadcastable_pairs
from ..ir.sizes import broadcast_shape
from .proxies import DeviceTensor, HostScalar, TileProxy


def index_tensors(key: Any) -> list[int]:
    """The positions in a device subscript key of its index tensors (int device values of
    rank >= 1: a tile's `.index`, a loaded index tile, a computed index vector; a moved tile
    `tile + c` is an axis, as the tile is)."""
    items = list(key) if isinstance(key, (tuple, list)) else [key]
    return [position for position, item in enumerate(items)
            if isinstance(item, DeviceTensor) and not item.tile_axis and len(item.value.shape) >= 1
            and not item.value.dtype.is_floating_point and item.value.dtype != torch.bool]


def refuse_paired_store(name: str, key: Any) -> None:
    """A store through several index tensors: torch would write element by element; a
    scatter here takes one index vector."""
    count = len(index_tensors(key))
    if count > 1:
        raise exc.IndexingError(
            f"{name}[...] = ...: this subscript holds {count} index tensors, which torch pairs up element "
            "by element (out[a[i], b[i]] = v[i]); a scatter takes only one index vector. Scatter into a flat "
            f"view instead: `flat = {name}.view(-1)` in host code, then `flat[a * {name}.size(1) + b] = v` "
            "in the loop.")


def paired_load(recorder: Any, tensor: Any, key: Any) -> DeviceTensor:
    """`tensor[key]` where `key` holds several index tensors (see the module docstring)."""
    name = tensor.symbol.name
    items = _explicit_items(key, len(tensor.symbol.shape), name)
    positions = index_tensors(items)
    narrow = next((items[p].value.dtype for p in positions if items[p].value.dtype in NARROW_INDEX_DTYPES), None)
    if narrow is not None:
        raise exc.IndexingError(narrow_index(name, narrow))
    if any(isinstance(item, DeviceTensor) and item.tile_axis for item in items):
        raise exc.IndexingError(moved_beside_pairs(name))
    shapes = [tuple(items[p].value.shape) for p in positions]
    try:
        common = broadcast_shape(*shapes)
    except ValueError:
        raise exc.IndexingError(unbroadcastable_pairs(name, shapes)) from None
    tiles = _tile_vectors(recorder, [items[p] for p in positions], common)
    if tiles is not None:  # `x[tm.index[:, None], tn.index[None, :]]`: the block x[tm, tn]
        return _tile_block(recorder, tensor, items, positions, tiles)
    lanes = 1
    for size in common:
        lanes *= size
    # a tile's shifted positions (`t.index + c`) read 0 outside the tensor, as alone
    shifted = [items[p].tile_shift is not None for p in positions]
    flat = [_as_lanes(recorder, items[p], common) for p in positions]
    # The rows: read through one index (a tile's .index stays a tile: a block, no gather).
    first = next((i for i, p in enumerate(positions) if _is_tile_index(flat[i])), 0)
    row_key = list(items)
    for i, position in enumerate(positions):
        row_key[position] = flat[i] if i == first else slice(None)
    current = recorder.subscript(tensor, tuple(row_key))
    axes = _result_axes(items)  # item position -> axis of the rows' value (None: dropped)
    lane_axis = axes[positions[first]]
    for i, position in enumerate(positions):
        if i == first:
            continue
        axis = axes[position]
        current = _pick(recorder, current, flat[i], lane_axis, axis, lanes, shifted[i])
        axes = {p: (a if a is None or a < axis else None if a == axis else a - 1) for p, a in axes.items()}
        lane_axis = axes[positions[first]]
    if not _adjacent(items, positions) and lane_axis != 0:  # torch: separated index tensors go first
        order = [lane_axis, *[a for a in range(len(current.value.shape)) if a != lane_axis]]
        current = recorder.call_method(current, "permute", (order,), {})
        lane_axis = 0
    if len(common) != 1:  # the broadcast shape's dims in place of the lanes
        shape = list(current.value.shape)
        current = recorder.call_method(current, "reshape",
                                       (tuple(shape[:lane_axis] + list(common) + shape[lane_axis + 1:]),), {})
    return current


def _tile_vectors(recorder: Any, indices: list, common: tuple) -> list | None:
    """When each index is a different tile's `.index` spread along its own axis of the
    broadcast shape (`tm.index[:, None]`, `tn.index[None, :]`), the pairs they make are the
    tiles' block: per index, (the 1-D `.index` value, its axis in the broadcast shape)."""
    if len(common) != len(indices):
        return None
    found, dims, axes = [], set(), set()
    for index in indices:
        value = index.value
        sized = [axis for axis, size in enumerate(value.shape) if size != 1]
        base = value
        while base.producer is not None and base.producer.op in ("getitem", "reshape") \
                and isinstance(base.producer.args[0], Value) and base.producer.args[0].shape:
            base = base.producer.args[0]
        if base.producer is None or base.producer.op != "tile_index" or len(sized) != 1 \
                or value.shape[sized[0]] != base.shape[0]:
            return None
        dim = base.producer.args[0]
        if dim.id in dims or sized[0] in axes:
            return None
        dims.add(dim.id)
        axes.add(sized[0])
        found.append((TileProxy(recorder, dim), sized[0]))  # a tile: a block, no index tensor
    return found


def _tile_block(recorder: Any, tensor: Any, items: list, positions: list[int], tiles: list) -> DeviceTensor:
    """The block of the tiles `tiles` names, its tile axes ordered as torch orders the
    broadcast shape (in place when the index tensors are adjacent, else first)."""
    key = list(items)
    for position, (index, _) in zip(positions, tiles):
        key[position] = index
    block = recorder.subscript(tensor, tuple(key))
    axes = _result_axes(items)
    tile_axes = [axes[p] for p in positions]
    rank = len(block.value.shape)
    others = [axis for axis in range(rank) if axis not in tile_axes]
    by_common = [axis for axis, _ in sorted(zip(tile_axes, (a for _, a in tiles)), key=lambda pair: pair[1])]
    at = sum(1 for axis in others if axis < min(tile_axes)) if _adjacent(items, positions) else 0
    order = others[:at] + by_common + others[at:]
    if order == list(range(rank)):
        return block
    return recorder.call_method(block, "permute", (order,), {})


def _explicit_items(key: Any, rank: int, name: str) -> list:
    """The key with its Ellipsis spelled out as ':'s."""
    items = list(key) if isinstance(key, (tuple, list)) else [key]
    if sum(1 for item in items if item is Ellipsis) > 1:
        raise exc.IndexingError(f"{name}[...]: only one Ellipsis is allowed.")
    at = next((position for position, item in enumerate(items) if item is Ellipsis), None)
    if at is not None:
        consumed = sum(1 for item in items if item is not None and item is not Ellipsis)
        items[at:at + 1] = [slice(None)] * (rank - consumed)
    return items


def _as_lanes(recorder: Any, index: DeviceTensor, common: tuple) -> DeviceTensor:
    """`index` broadcast to the common shape, flattened to one lane per element."""
    if tuple(index.value.shape) != common:
        index = recorder.call_method(index, "expand", (common,), {})
    if len(common) != 1:
        index = recorder.call_method(index, "reshape", ((-1,),), {})
    return index


def _is_tile_index(index: DeviceTensor) -> bool:
    producer = index.value.producer
    return producer is not None and producer.op == "tile_index"


def _result_axes(items: list) -> dict[int, int | None]:
    """Per subscript item, its axis in the loaded value: an int drops its axis, None adds one."""
    axes, axis = {}, 0
    for position, item in enumerate(items):
        if isinstance(item, (int, HostScalar)) and not isinstance(item, bool) or (
                isinstance(item, DeviceTensor) and not item.value.shape):
            axes[position] = None
            continue
        axes[position] = axis
        axis += 1
    return axes


def _adjacent(items: list, positions: list[int]) -> bool:
    """torch keeps the paired dims in place when nothing but ints stands between its index
    tensors; a slice, a tile or a new axis between them sends the paired dims to the front."""
    for position in range(positions[0], positions[-1] + 1):
        item = items[position]
        scalar = (isinstance(item, (int, HostScalar)) and not isinstance(item, bool)
                  or isinstance(item, DeviceTensor) and not item.value.shape)
        if position not in positions and not scalar:
            return False
    return True


def _pick(recorder: Any, value: DeviceTensor, index: DeviceTensor, lane_axis: int, axis: int,
          lanes: int, shifted: bool = False) -> DeviceTensor:
    """`value` with axis `axis` replaced, per lane of `lane_axis`, by the position `index`
    names: torch.gather along `axis` with the index on the lane axis, then `axis` dropped.
    A tile's `shifted` positions outside the axis pick 0 (the gather reads a clamped one)."""
    shape = list(value.value.shape)
    unit = [lanes if a == lane_axis else 1 for a in range(len(shape))]
    spread = [1 if a == axis else size for a, size in enumerate(shape)]
    size = shape[axis]
    index = recorder.call_method(index, "reshape", (tuple(unit),), {})
    inside = None
    if shifted:
        inside = recorder.apply("bitwise_and", torch.bitwise_and, (recorder.call_method(index, "ge", (0,), {}),
                                recorder.call_method(index, "lt", (size,), {})), {}, display="indexing")
        index = recorder.call_method(index, "clamp", (0, max(size - 1, 0)), {})
    if unit != spread:
        index = recorder.call_method(index, "expand", (tuple(spread),), {})
    picked = recorder.apply("gather", torch.gather, (value, axis, index), {}, display="indexing")
    if inside is not None:
        picked = recorder.apply("where", torch.where, (inside, picked, 0), {}, display="indexing")
    del shape[axis]
    return recorder.call_method(picked, "reshape", (tuple(shape),), {})
