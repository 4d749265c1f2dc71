"""Loads and stores of reference mode: torch indexing on the real tensors.

A tile indexes the slice `[tile.begin, tile.end)`; a 0-d integer tensor (a
scalar read from a tensor) is an int; one 1-D integer tensor (`tile.index +
1`, `indices[tile]`) gathers on load and scatters on store along its own axis
(of lanes with equal indices the last, highest, lane writes); its values must lie in [0, size) (`exc.ShapeMismatch`, as the compiled kernel's check).
A load is a copy (a device value never aliases the tensor it was read from);
a store writes the caller's tensor. A value longer than the slice it is
stored into is cut to the slice (a store never writes past its tile); a
shorter one is an error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .. import exc
from ..frontend.indexing import tile_after_its_loop
from ..ir.index_forms import moved_beside_pairs, moved_scatter, splice_tile_tuples, unbroadcastable_pairs
from ..ir.ops import check_number_fits
from . import lanes
from .tiles import MOVED_TILE, RefTile, RuntimeInt, TileBegin

NameOf = Callable[[torch.Tensor], str]


@dataclass
class _Subscript:
    """A key split into basic indexing (a view) and at most one gathering index vector."""

    basic: list[Any] = field(default_factory=list)
    gather: list[tuple[int, torch.Tensor]] = field(default_factory=list)  # (view axis, index)
    lanes: set[int] = field(default_factory=set)
    tiles: dict[int, str] = field(default_factory=dict)  # result axis -> the tile indexing it
    native: tuple | None = None  # several index tensors: torch's own advanced indexing
    # `tile + c` (a moved tile): per such axis (result axis, its positions' first lane inside
    # the tensor, the tile's extent, c); `basic` holds the slice of its positions inside
    moved: list[tuple[int, int, int, int]] = field(default_factory=list)


def load(tensor: torch.Tensor, key: Any, name_of: NameOf) -> torch.Tensor:
    subscript = _split(tensor, key, name_of)
    if subscript.native is not None:
        return lanes.finish(_paired_read(tensor, subscript.native))
    view = tensor[tuple(subscript.basic)]
    if subscript.gather:
        ((axis, index),) = subscript.gather
        if lanes.is_run(index):  # a tile's shifted positions: 0 outside the tensor
            size = view.shape[axis]
            inside = (index >= 0) & (index < size)
            result = view[(slice(None),) * axis + (index.clamp(0, max(size - 1, 0)),)]
            keep = inside.reshape((-1,) + (1,) * (result.ndim - axis - 1))
            result = torch.where(keep, result, torch.zeros((), dtype=result.dtype))
        else:
            result = view[(slice(None),) * axis + (index,)]
    else:
        result = view.clone()
    for axis, first, extent, _ in subscript.moved:  # positions outside the tensor read 0
        if result.shape[axis] != extent:
            padded = torch.zeros(result.shape[:axis] + (extent,) + result.shape[axis + 1:], dtype=result.dtype)
            padded.narrow(axis, first, result.shape[axis]).copy_(result)
            result = padded
    return lanes.mark_tiles(lanes.finish(result, subscript.lanes), subscript.tiles)


def store(tensor: torch.Tensor, key: Any, value: Any, name_of: NameOf,
          own_view: Callable[[torch.Tensor], bool] | None = None) -> None:
    if lanes.is_device(tensor):
        raise exc.UnsupportedSyntax(
            "Assigning into part of a device value is not supported; build it with torch.where.")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        check_number_fits(f"{name_of(tensor)}[...]", value, tensor.dtype)
    if own_view is not None and own_view(tensor):  # as codegen/host.py
        raise exc.UnsupportedOperation(
            f"A device loop writes into '{name_of(tensor)}', a getitem view of '{name_of(tensor._base)}'; only "
            "reshape/view results can be written. Write the base tensor instead.")
    subscript = _split(tensor, key, name_of, store=True)
    if isinstance(value, torch.Tensor) and value.dtype.is_floating_point and not (
            tensor.dtype.is_floating_point or tensor.dtype == torch.bool):  # the store's cast saturates
        value = lanes.marked_as(lanes.saturated(value, tensor.dtype), value)
    if len(subscript.gather) > 1:  # as the compiler says (frontend/indexing.py)
        name = name_of(tensor)
        raise exc.IndexingError(
            f"{name}[...] = ...: a scatter may hold only one index vector; this one has "
            f"{len(subscript.gather)}. Scatter into a flat view instead: `flat = {name}.view(-1)` in host "
            "code, then `flat[idx_a * size_b + idx_b] = v` in the loop.")
    if subscript.native is not None:
        tensor[subscript.native] = value
        return
    if subscript.moved and subscript.gather and not lanes.is_run(subscript.gather[0][1]):  # as plan/bounds.py
        raise exc.UnsupportedOperation(
            moved_scatter(f"{name_of(tensor)}[...] = ...", "the tile", subscript.moved[0][3]))
    view = tensor[tuple(subscript.basic)]
    target = list(view.shape)
    gather_key = ()
    if subscript.gather:
        ((axis, index),) = subscript.gather
        target[axis] = index.shape[0]
        gather_key = (slice(None),) * axis + (index,)
    kept_shape = list(target)  # a moved tile's axis: its positions inside the tensor
    for moved_axis, _, extent, _ in subscript.moved:
        target[moved_axis] = extent
    if isinstance(value, torch.Tensor):
        if not lanes.is_device(value) and value.ndim > 0:
            raise exc.IndexingError(
                f"A host tensor is stored whole into {name_of(tensor)}[...] inside a device loop; "
                "index it with tiles.")
        value = _fit(value, target, lambda: name_of(tensor))
        if subscript.moved:  # a moved tile's positions outside the tensor are not written
            value = torch.broadcast_to(value, target)
            for moved_axis, first, _, _ in subscript.moved:
                value = value.narrow(moved_axis, first, kept_shape[moved_axis])
    target = kept_shape
    if gather_key and lanes.is_run(index):  # a tile's shifted positions: those outside are dropped
        inside = ((index >= 0) & (index < view.shape[axis])).nonzero().reshape(-1)
        if isinstance(value, torch.Tensor):
            value = torch.broadcast_to(value, target).index_select(axis, inside).to(view.dtype)
        view[(slice(None),) * axis + (index[inside],)] = value
    elif gather_key:
        _scatter(view, axis, index, value, target)
    else:
        view[...] = value


def _scatter(view: torch.Tensor, axis: int, index: torch.Tensor, value: Any, target: list[int]) -> None:
    """`view[..., index, ...] = value` along `axis` where, of lanes with equal indices, the
    last one (the highest lane) writes: torch leaves duplicates' order unspecified."""
    lane = torch.arange(index.shape[0])
    last = torch.full((view.shape[axis],), -1, dtype=torch.long)
    last.scatter_reduce_(0, index.long(), lane, reduce="amax")
    keep = lane[last[index.long()] == lane]
    if isinstance(value, torch.Tensor):
        value = torch.broadcast_to(value, target).index_select(axis, keep).to(view.dtype)  # as a store casts
    view[(slice(None),) * axis + (index[keep],)] = value


def _fit(value: torch.Tensor, target: list[int], name: Callable[[], str]) -> torch.Tensor:
    """`value` cut to the target's extents; a broadcast axis stays for torch to broadcast."""
    shape = list(value.shape)

    def mismatch() -> exc.ShapeMismatch:
        return exc.ShapeMismatch(
            f"Cannot store a value of shape {shape} into {name()}[...] of shape {target}.")

    extra = value.ndim - len(target)
    if extra > 0:
        if any(value.shape[a] != 1 or a in lanes.of(value) for a in range(extra)):
            raise mismatch()
        value = lanes.mark(value.reshape(value.shape[extra:]), {a - extra for a in lanes.of(value)})
    shift = len(target) - value.ndim
    for axis in range(value.ndim):
        extent, wanted = lanes.real_extent(value, axis), target[axis + shift]
        if extent is None or extent == wanted:
            continue
        if extent < wanted or axis in lanes.tiles_of(value):  # a tile's or a slice's part, not a block's size
            raise mismatch()
        value = lanes.mark(value.narrow(axis, 0, wanted), lanes.of(value))
    return value


def _split(tensor: torch.Tensor, key: Any, name_of: NameOf, store: bool = False) -> _Subscript:
    key = splice_tile_tuples(key, lambda item: isinstance(item, RefTile))
    items = list(key) if isinstance(key, (tuple, list)) else [key]
    from_data = [isinstance(item, torch.Tensor) and item.ndim == 0 for item in items]
    items = [_scalar(item, name_of, tensor) for item in items]
    if sum(1 for item in items if item is Ellipsis) > 1:
        raise exc.IndexingError(f"{name_of(tensor)}[...]: only one Ellipsis is allowed.")
    consumed = sum(1 for item in items if item is not None and item is not Ellipsis)
    if consumed > tensor.ndim:
        raise exc.IndexingError(
            f"Too many indices for {name_of(tensor)}: it has {tensor.ndim} dimensions, "
            f"the subscript indexes {consumed}.")
    subscript = _Subscript()
    source_lanes = lanes.of(tensor)
    axis = out_axis = 0
    for item, read_from_data in zip(items, from_data):
        if item is Ellipsis:
            for _ in range(tensor.ndim - consumed):
                subscript.basic.append(slice(None))
                if axis in source_lanes:
                    subscript.lanes.add(out_axis)
                axis, out_axis = axis + 1, out_axis + 1
        elif item is None:
            subscript.basic.append(None)
            out_axis += 1
        elif (kept := _broadcast_read(item, tensor, axis, store, name_of)) is not None:
            # torch's broadcasting: index 0; a tile keeps the size-1 axis, its begin drops it
            subscript.basic.append(slice(0, 1) if kept else 0)
            axis, out_axis = axis + 1, out_axis + int(kept)
        elif isinstance(item, int):
            _check_int_index(item, tensor.shape[axis], axis, read_from_data, name_of(tensor))
            subscript.basic.append(item)
            axis += 1
        elif isinstance(item, slice):
            subscript.basic.append(item)
            if axis in source_lanes:
                subscript.lanes.add(out_axis)
            if not lanes.is_device(tensor):  # a fixed part of a kernel tensor (reference/extents.py)
                subscript.tiles[out_axis] = f"[{len(range(*item.indices(tensor.shape[axis])))}]"
            axis, out_axis = axis + 1, out_axis + 1
        elif isinstance(item, RefTile):  # of a device value too: a narrowing read (`blk[tile_s]`)
            if item.begin < 0 or item.end > tensor.shape[axis]:
                raise exc.ShapeMismatch(
                    f"{name_of(tensor)}[...]: tile '{item.name}' covers [{item.begin}, {item.end}), "
                    f"past axis {axis} of size {tensor.shape[axis]}.")
            subscript.basic.append(slice(item.begin, item.end))
            subscript.tiles[out_axis] = item.name
            if item.single_lane:
                subscript.lanes.add(out_axis)
            axis, out_axis = axis + 1, out_axis + 1
        elif isinstance(item, torch.Tensor) and getattr(item, MOVED_TILE, False):  # `tile + c`: an axis
            _moved_axis(subscript, item, tensor.shape[axis], out_axis)
            axis, out_axis = axis + 1, out_axis + 1
        elif isinstance(item, torch.Tensor) and item.ndim >= 1 and not item.dtype.is_floating_point \
                and item.dtype != torch.bool:  # of a device value too (`blk[tile_s.index]`)
            if item.ndim > 1 and store:
                raise exc.IndexingError(
                    f"{name_of(tensor)}[...] = ...: a scatter takes a 1-D index vector; this index is a "
                    f"{item.ndim}-D tile of shape {list(item.shape)}. Scatter its flat vector instead: "
                    f"`{name_of(tensor)}[idx.reshape(-1), ...] = v.reshape(-1, ...)` (gathers take "
                    "index tiles of any rank).")
            _check_index_vector(item, tensor.shape[axis], axis, store, lambda: name_of(tensor))
            subscript.gather.append((out_axis, item))  # the index's dims replace the axis
            subscript.basic.append(slice(None))
            subscript.lanes.update(out_axis + k for k in lanes.of(item))
            axis, out_axis = axis + 1, out_axis + item.ndim
        else:
            raise exc.IndexingError(
                f"{name_of(tensor)}[...]: unsupported index {item!r} of type {type(item).__name__}.")
    if not lanes.is_device(tensor):  # the axes the subscript leaves whole
        subscript.tiles.update({out_axis + k: f"[{tensor.shape[axis + k]}]" for k in range(tensor.ndim - axis)})
    if len(subscript.gather) > 1:
        subscript.native = _paired(subscript, items, name_of(tensor))
    return subscript


def _paired(subscript: _Subscript, items: list, name: str) -> tuple:
    """The key torch indexes with when several index tensors pair (as the tracer refuses: a
    moved tile beside them, shapes that do not broadcast)."""
    if subscript.moved:
        raise exc.IndexingError(moved_beside_pairs(name))
    shapes = [tuple(index.shape) for _, index in subscript.gather]
    try:
        torch.broadcast_shapes(*shapes)
    except RuntimeError:
        raise exc.IndexingError(unbroadcastable_pairs(name, shapes)) from None
    return tuple(slice(i.begin, i.end) if isinstance(i, RefTile) else i for i in items)


def _paired_read(tensor: torch.Tensor, native: tuple) -> torch.Tensor:
    """`tensor[native]` (torch's advanced indexing), where a tile's shifted positions among
    the index tensors (`x[t.index, t.index + c]`) read 0 outside the tensor, as alone."""
    items, inside, axis = list(native), None, 0
    for position, item in enumerate(native):
        if item is None:
            continue
        if isinstance(item, torch.Tensor) and lanes.is_run(item):
            size = tensor.shape[axis]
            valid = (item >= 0) & (item < size)
            inside = valid if inside is None else inside & valid
            items[position] = item.clamp(0, max(size - 1, 0))
        axis += 1
    result = tensor[tuple(items)].clone()
    if inside is None:
        return result
    vectors = [p for p, item in enumerate(native) if isinstance(item, torch.Tensor) and item.ndim >= 1]
    common = torch.broadcast_shapes(*(native[p].shape for p in vectors))
    between = native[vectors[0]:vectors[-1] + 1]
    adjacent = all(isinstance(item, (int, torch.Tensor)) for item in between)  # as frontend/paired_indexing.py
    start = sum(1 for item in native[:vectors[0]] if item is None or isinstance(item, slice)) if adjacent else 0
    mask = inside.expand(common).reshape((1,) * start + tuple(common) + (1,) * (result.ndim - start - len(common)))
    return torch.where(mask, result, torch.zeros((), dtype=result.dtype))


def _check_index_vector(index: torch.Tensor, size: int, axis: int, store: bool, name: Callable[[], str]) -> None:
    """An index vector's values lie in [0, size) (a tile's shifted positions read 0 outside)."""
    bad = index[(index < 0) | (index >= size)] if not lanes.is_run(index) else index[:0]
    if bad.numel():
        raise exc.ShapeMismatch(
            f"{name()}[...]: an index in the index vector is {int(bad[0])} but axis {axis} has size {size}; "
            f"{'scattered' if store else 'gathered'} indices must lie in [0, {size}) (they do not wrap).")


def _moved_axis(subscript: _Subscript, positions: torch.Tensor, size: int, out_axis: int) -> None:
    """A moved tile (`tile + c`) on an axis of `size`: the slice of its positions inside the
    tensor, and where they sit in the tile's extent (the rest reads 0, is not written)."""
    first, extent = int(positions[0]), positions.shape[0]
    low, high = min(max(first, 0), size), min(max(first + extent, 0), size)
    subscript.basic.append(slice(low, high))
    subscript.moved.append((out_axis, low - first if high > low else 0, extent, lanes.run_offset(positions)))
    if 0 in lanes.of(positions):
        subscript.lanes.add(out_axis)



def _check_int_index(item: int, size: int, axis: int, read_from_data: bool, name: str) -> None:
    """An int index: a Python int counts from the end when negative, as in torch; one read
    from data, a grid index or a tile's begin (a `RuntimeInt`) does not, as in the kernel."""
    runtime = isinstance(item, RuntimeInt)
    if not (0 if read_from_data or runtime else -size) <= item < size:
        raise exc.ShapeMismatch(
            f"{name}[...]: index {item} is outside axis {axis} of size {size}"
            + ("; indices read from data must lie in [0, size) (they do not wrap)." if read_from_data
               else "; a grid index or a tile's begin (and ints computed from them) must lie in [0, size): "
               "it does not wrap as a negative Python int does." if runtime else "."))


def refuse_tiles_in_host_code(func: Callable, args: tuple, name_of: NameOf) -> None:
    """A tile subscripting a tensor in host code (after its loop) is the compiler's error."""
    tile = next((item for item in lanes.leaves(args[1:2]) if isinstance(item, RefTile)), None)
    if tile is not None and getattr(func, "__name__", "") in ("__getitem__", "__setitem__"):
        raise tile_after_its_loop(name_of(args[0]), tile.name)


def _broadcast_read(item: Any, tensor: torch.Tensor, axis: int, store: bool, name_of: NameOf) -> bool | None:
    """Whether `item` reads a size-1 axis broadcast: True for a tile (the axis kept), False
    for a tile's begin (dropped), None when it does not; a store through it raises."""
    tile = item if isinstance(item, RefTile) else item.tile if isinstance(item, TileBegin) else None
    if tile is None or not _broadcasts(tile, tensor, axis):
        return None
    if store and tile is item and tile.static_range is None:
        return None  # a store through a tile of a range read from data tiles the axis (checked)
    if store:
        what = tile.name if tile is item else f"{tile.name}.begin"
        raise exc.IndexingError(
            f"{name_of(tensor)}[...] = ...: tile '{what}' indexes axis {axis} of size 1, which a read "
            "broadcasts but a store cannot.")
    return tile is item


def _broadcasts(tile: RefTile, tensor: torch.Tensor, axis: int) -> bool:
    """A tile indexing a size-1 axis of a tensor reads it broadcast (index 0 everywhere),
    unless its loop's range, given by host ints, lies within [0, 1): then it tiles the axis.
    A range of device scalars the compiler proves within [0, 1) (frontend/indexing.py
    `_bounds`) has an extent of at most 1 here, where broadcasting and tiling read the same."""
    if lanes.is_device(tensor) or tensor.shape[axis] != 1:
        return False
    return tile.static_range is None or not (tile.static_range[0] == 0 and tile.static_range[1] <= 1)


def _scalar(item: Any, name_of: NameOf, tensor: torch.Tensor) -> Any:
    """0-d integer tensors and int-like values as Python ints."""
    if isinstance(item, bool):
        raise exc.IndexingError(f"{name_of(tensor)}[...]: boolean indices are not supported.")
    if isinstance(item, torch.Tensor) and item.ndim == 0:
        if item.dtype.is_floating_point or item.dtype == torch.bool:
            raise exc.IndexingError(f"{name_of(tensor)}[...]: a {item.dtype} scalar cannot index a tensor.")
        return int(item.item())
    if not isinstance(item, (int, torch.Tensor, RefTile, slice)) and item is not None \
            and item is not Ellipsis and hasattr(item, "__index__"):
        return int(item.__index__())
    return item

