"""The one place a subscript of a tensor is recognized.

`normalize_subscript` turns a device-code subscript key into a tuple of IR
index items (`TileSlice`, `FullSlice`, `ScalarIndex`, `NewAxis`, `GatherIndex`)
covering every axis of the tensor. Planning and codegen consume these items
and never look at the user's key again. A host-code subscript indexes a whole
tensor with JAX's indexing, which agrees with torch's for the forms
`check_host_subscript` accepts, so it keeps the user's items.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch

from .. import exc
from ..ir import (
    FullSlice, GatherIndex, IndexItem, NarrowItem, NewAxis, Run, ScalarIndex, ShiftedTile, StaticSlice, TileSlice,
    Value,
)
from ..ir.sizes import SymbolicSize
from ..ir.intervals import scalar_interval
from .tile_runs import tile_run
from ..ir.index_forms import NARROW_INDEX_DTYPES, IndexForm, RefusedForm, narrow_index
from .proxies import DeviceTensor, HostScalar, HostTensor, TileProxy, int_argument_value, static_int

# The supported-forms page's index forms beyond one item type each (each item type of
# ir/nodes.py carries its own `FORM`): subscripts that combine items, and the subscripts
# this module and paired_indexing.py refuse, with what to write instead.
SUBSCRIPT_FORMS = (
    IndexForm("paired index tensors", ("x[tile.index, labels[tile]]", "x[idx_a[:, None], idx_b[None, :]]"),
              "torch's advanced indexing: the index tensors broadcast together and pair up element by element; "
              "read as the first one's rows, then a torch.gather per other index (paired_indexing.py)"),
    IndexForm("a tile on a size-1 axis", ("bias[tile, :]", "mask[tile.begin, :]"),
              "with bias.size(0) == 1 (static), read as torch broadcasts a size-1 dim: index 0 at every "
              "position, the axis kept with size 1 (a loop within [0, 1) tiles the axis instead); the "
              "tile's begin reads index 0 likewise, the axis dropped as a scalar index drops it; a store "
              "through either is refused, except through the tile of a range read from data, which tiles "
              "the axis, checked when it runs (one jagged row; broadcasts_tile)"),
    IndexForm("a tuple of tiles", ("out[tiles, :]", "x[tiles]"),
              "`hl.tile([n])` yields a 1-tuple of tiles (`for tiles in hl.tile([n])`); inside a subscript a "
              "tuple of tiles stands for its tiles, one axis each, as in Helion (torch gives it no meaning)"),
    IndexForm("a window of computed start", ("a[tile_m, 2 * tile_k.begin:2 * tile_k.begin + 2 * tile_k.block_size]",),
              "a slice whose start is a device scalar and whose length is a compile-time int reads (or writes) "
              "the index vector start + hl.arange(length), a gather; a tile's begin times c for its block "
              "size times c is padded where the tile is (windows.py:computed_window); a tile's begin plus a "
              "constant for its block size, inside the axis, is the shifted tile (windows.py:shifted_window: "
              "`W[tk, tn.begin + n:tn.begin + n + tn.block_size]`)"),
)
REFUSED_FORMS = (  # each example is checked to raise (see RefusedForm for the names it uses)
    RefusedForm("boolean mask", ("x[mask[tile]]",), "the result's size is known only from the data",
                "`torch.where(mask[tile][:, None], x[tile, :], 0)` keeps the shape; or gather with an int32 index tensor"),
    RefusedForm("a slice with a step", ("x[tile, ::2]",),
                "a tensor's axis is read whole, by a tile, at a scalar or in a static window of step 1",
                "load the window and pick lanes from it: `x[tile, :]` then a gather, or hl.split of pairs"),
    RefusedForm("several index tensors in a store", ("out[idx_a[tile], idx_b[tile]] = v[:, 0]",),
                "a scatter takes one index vector",
                "scatter into a flat view: `flat = out.view(-1)` in host code, then "
                "`flat[idx_a[tile] * n + idx_b[tile]] = v[:, 0]`"),
    RefusedForm("an N-D index tile in a store", ("out[idx2d[tile, :]] = v",),
                "a scatter takes a 1-D index vector", "scatter the flat vector: `out[i.reshape(-1), ...] = "
                "v.reshape(-1, ...)`"),
    RefusedForm("float or bool scalar index", ("x[x[0, 0]]",), "only integers name positions",
                "cast it: `x[s.to(torch.int32)]`"),
    RefusedForm("strided or computed narrowing of a device value", ("blk[::2]", "blk[idx[tile]]"),
                "a narrowing read must be one contiguous run of the loaded block (a negative int counts from "
                "the end of an axis only where no partial tile pads it)",
                "a constant, a constant slice, tile.begin or tile.index; or index the tensor itself "
                "(`x[idx[tile], :]` gathers)"),
)




def normalize_subscript(
    key: Any,
    shape: tuple[int, ...],
    tensor_name: str,
    scalar_value: Callable[[Any], Value],
    store: bool = False,
    zero_past_end: bool = False,
) -> tuple[IndexItem, ...]:
    """Normalize `tensor[key]`; `scalar_value` turns a host scalar into a device Value.

    `store`: the subscript is the target of an assignment (an index vector there scatters).
    `zero_past_end`: a masked load's (`hl.load(..., extra_mask=...)`): a tile whose static
    range runs past the tensor's end is a `ShiftedTile` by 0, which reads 0 there, not a
    bounds error."""
    items = list(key) if isinstance(key, (tuple, list)) else [key]
    consumed = sum(1 for item in items if item is not None and item is not Ellipsis)
    if sum(1 for item in items if item is Ellipsis) > 1:
        raise exc.IndexingError(f"{tensor_name}[...]: only one Ellipsis is allowed.")
    if consumed > len(shape):
        raise exc.IndexingError(
            f"Too many indices for {tensor_name}: it has {len(shape)} dimensions, "
            f"the subscript indexes {consumed}."
        )
    out: list[IndexItem] = []
    axis = 0
    for item in items:
        if item is Ellipsis:
            for _ in range(len(shape) - consumed):
                out.append(FullSlice())
                axis += 1
            continue
        if item is None:
            out.append(NewAxis())
            continue
        if isinstance(item, TileProxy) and broadcasts_tile(item.dim.begin, item.dim.end, shape[axis]) \
                and not (store and _read_from_data(item.dim)):
            if store:
                raise broadcast_store_error(tensor_name, item.dim.name, axis)
            out += [ScalarIndex(0), NewAxis()]  # torch's broadcasting: index 0, a size-1 axis kept
            axis += 1
            continue
        begun = _begin_of_tile(item)
        if begun is not None and broadcasts_tile(begun.begin, begun.end, shape[axis]):
            if store:
                raise broadcast_store_error(tensor_name, f"{begun.name}.begin", axis)
            out.append(ScalarIndex(0))  # a scalar index: the axis goes, read at its one index
            axis += 1
            continue
        normalized = _normalize_item(item, shape[axis], axis, tensor_name, scalar_value)
        if zero_past_end and isinstance(normalized, TileSlice) and _past_end(normalized.dim, shape[axis]):
            normalized = ShiftedTile(normalized.dim, 0)
        out.append(normalized)
        axis += 1
    while axis < len(shape):
        out.append(FullSlice())
        axis += 1
    gathers = [item for item in out if isinstance(item, GatherIndex)]
    if len(gathers) > 1 and store:
        raise exc.IndexingError(
            f"{tensor_name}[...] = ...: a scatter may hold only one index vector; this one has "
            f"{len(gathers)}. Scatter into a flat view instead: `flat = {tensor_name}.view(-1)` in host "
            "code, then `flat[idx_a * size_b + idx_b] = v` in the loop.")
    if len(gathers) > 1:
        raise exc.IndexingError(
            f"{tensor_name}[...]: a subscript may hold only one index vector (a gather along one "
            f"axis); this one has {len(gathers)}. Gather one axis at a time.")
    return tuple(out)


def _past_end(dim: Any, size: Any) -> bool:
    """Whether a tile loop with static bounds runs past an axis of static `size`."""
    static = all(isinstance(v, int) and not isinstance(v, bool) for v in (dim.begin, dim.end, size))
    return static and 0 <= dim.begin < dim.end and dim.end > size


def _normalize_item(item, size, axis, tensor_name, scalar_value) -> IndexItem:
    if isinstance(item, TileProxy):
        return TileSlice(item.dim)
    if isinstance(item, slice):
        if whole_slice(item):
            return FullSlice()
        return _static_slice(_constant_bounds(item), size, axis, tensor_name)
    if isinstance(item, bool):
        raise exc.IndexingError(f"{tensor_name}[...]: boolean indices are not supported.")
    if isinstance(item, int):
        if not -size <= item < size:
            raise exc.IndexingError(
                f"Index {item} is out of bounds for axis {axis} of {tensor_name} (size {size})."
            )
        return ScalarIndex(item % size)
    if isinstance(item, HostScalar):
        if item.python_type is not int:
            raise exc.IndexingError(f"{tensor_name}[...]: a float scalar cannot index a tensor.")
        return ScalarIndex(scalar_value(item))
    if isinstance(item, DeviceTensor):
        value = item.value
        producer = value.producer
        shifted = tile_run(value, int_argument_value)
        if shifted is not None:  # tile.index, tile.index + c, tile - c
            dim, offset = shifted
            return TileSlice(dim) if offset == 0 else ShiftedTile(dim, offset)
        if value.dtype in NARROW_INDEX_DTYPES:  # torch: uint8 is a boolean mask, int8/int16 no index
            raise exc.IndexingError(narrow_index(tensor_name, value.dtype))
        if value.shape == () and not value.dtype.is_floating_point and value.dtype != torch.bool:
            return ScalarIndex(value)
        if value.shape == ():
            raise exc.IndexingError(f"{tensor_name}[...]: a {value.dtype} scalar cannot index a tensor.")
        if value.dtype.is_floating_point or value.dtype == torch.bool:
            raise exc.IndexingError(
                f"{tensor_name}[...]: a {value.dtype} vector cannot index a tensor (boolean masks "
                "are not supported); gather with an int32 index vector.")
        if len(value.shape) != 1:  # a load flattens an N-D index tile first (`is_index_tile`)
            raise exc.IndexingError(
                f"{tensor_name}[...] = ...: a scatter takes a 1-D index vector; this index is a "
                f"{len(value.shape)}-D tile of shape {list(value.shape)}. Scatter its flat vector "
                f"instead: `{tensor_name}[idx.reshape(-1), ...] = v.reshape(-1, ...)` (gathers take "
                "index tiles of any rank).")
        return GatherIndex(value)
    if isinstance(item, list):  # torch's advanced indexing by a list of positions
        raise exc.IndexingError(
            f"{tensor_name}[...]: a list index ({item!r}) in device code: pass the positions as an int32 index "
            f"tensor argument and gather with it (`{tensor_name}[t, cols[:]]`, cols = torch.tensor({item!r}, "
            "dtype=torch.int32)).")
    raise exc.IndexingError(
        f"{tensor_name}[...]: unsupported index {item!r} of type {type(item).__name__}."
    )


def _constant_bounds(item: slice) -> slice:
    """`item` with bounds computed from int kernel arguments (`x[t, n - h:]`) as ints, the
    arguments made constants of the variant (as a shifted tile's `t + c` makes them); other
    device values stay, for `_static_slice` to refuse."""
    return slice(static_int(item.start), static_int(item.stop), item.step)


def _static_slice(item: slice, size: int, axis: int, tensor_name: str) -> FullSlice | StaticSlice:
    """A slice of a tensor axis in device code: a static window, its bounds read as Python
    reads them (negative counts from the end, None is the end, out-of-range clamps)."""
    text = slice_text(item)
    if not is_int(item.step, None, 1):
        raise exc.IndexingError(
            f"{tensor_name}[...]: the slice {text} on axis {axis} has step {item.step!r}; a slice in device "
            "code is a contiguous window (step 1). Read the window and take every n-th element with a "
            "reshape, or index with a tile.")
    bounds = (item.start, item.stop)
    if any(b is not None and (isinstance(b, bool) or not isinstance(b, int)) for b in bounds):
        raise exc.IndexingError(
            f"{tensor_name}[...]: the slice {text} on axis {axis} needs compile-time int bounds (host ints, "
            "sizes, hl.specialize'd scalars); a window that moves with the data is a tile: "
            "`for t in hl.tile(begin, end)`, then index with t.")
    if is_int(item.start, None, 0) and (item.stop is None or item.stop is size):
        return FullSlice()
    if isinstance(size, SymbolicSize) or any(isinstance(b, SymbolicSize) for b in bounds):
        raise exc.IndexingError(
            f"{tensor_name}[...]: the slice {text} on axis {axis} of a dynamic size (static_shapes=False) "
            "has no static window; use static_shapes=True or index with a tile.")
    start, stop, _ = slice(item.start, item.stop).indices(size)
    if start == 0 and stop == size:
        return FullSlice()
    if stop <= start:
        raise exc.IndexingError(
            f"{tensor_name}[...]: the slice {text} selects no element of axis {axis} (size {size}); device "
            "code has no empty tiles.")
    return StaticSlice(start, stop)


def is_narrowing(key: Any) -> bool:
    """Whether a subscript of a device value selects part of it (anything but None, ':' and
    Ellipsis, which only add or keep axes: plain views)."""
    items = key if isinstance(key, tuple) else (key,)
    return not all(item is None or item is Ellipsis or whole_slice(item) for item in items)


def is_int(value: Any, *allowed) -> bool:
    """Whether `value` is one of `allowed` (None or ints), never asking a traced value `==`."""
    return any(value is option if option is None else type(value) is int and value == option
               for option in allowed)


def whole_slice(item: Any) -> bool:
    """`:` — by identity of its parts: `==` on a slice compares them with `==`, which a
    traced bound (`ts.begin`) answers with a traced value, not a bool."""
    return isinstance(item, slice) and item.start is None and item.stop is None and item.step is None


def normalize_narrowing(key: Any, shape: tuple[int, ...], name: str,
                        scalar_value: Callable[[Any], Value]) -> tuple[NarrowItem, ...]:
    """Recognize a narrowing read of a device value (`blk[2]`, `blk[1:3]`, `blk[tile.index]`,
    `blk[tile.begin]`): one `NarrowItem` per axis of the result's source, NewAxis included.

    Only the forms are recognized here; whether a read can be lowered (the block it
    reads, its bounds, its masks) is decided once, in `plan/subviews.py`."""
    items = list(key) if isinstance(key, tuple) else [key]
    consumed = sum(1 for item in items if item is not None and item is not Ellipsis)
    if consumed > len(shape):
        raise exc.IndexingError(f"Too many indices for {name}: it has {len(shape)} dimensions, "
                                f"the subscript indexes {consumed}.")
    vectors = [item for item in items if isinstance(item, DeviceTensor) and len(item.value.shape) == 1]
    if len(vectors) > 1:
        raise exc.IndexingError(
            f"{name}[{', '.join(_item_text(item) for item in items)}]: this subscript holds {len(vectors)} index "
            "vectors, and torch pairs them element by element (the diagonal: position i of each), not the "
            "block they span; a narrowing read of a device value reads a block of runs. For the block, index "
            "with the tiles themselves (`blk[tile_a, tile_b]`) or one axis at a time "
            "(`blk[tile_a.index][:, tile_b.index]`).")
    out: list = []
    for item in items:
        if item is Ellipsis:
            out += [FullSlice()] * (len(shape) - consumed)
        elif item is None:
            out.append(NewAxis())
        else:
            out.append(_narrow_item(item, shape[len([i for i in out if not isinstance(i, NewAxis)])], name))
    while len([i for i in out if not isinstance(i, NewAxis)]) < len(shape):
        out.append(FullSlice())
    return tuple(_with_scalars(item, scalar_value) for item in out)


def _with_scalars(item, scalar_value):
    if isinstance(item, ScalarIndex) and isinstance(item.index, HostScalar):
        return ScalarIndex(scalar_value(item.index))
    return item


def _from_unknown_end(text: str) -> exc.IndexingError:
    return exc.IndexingError(f"{text}: a negative index counts from the end of an axis whose size is not a "
                             "compile-time int here (static_shapes=False); count from 0.")


def _narrow_item(item: Any, size: int, name: str):
    if isinstance(item, slice):
        if item.step not in (None, 1):
            raise exc.IndexingError(
                f"{name}[{slice_text(item)}]: a strided slice (step {item.step}) is not one contiguous "
                "run; a narrowing read of a device value must read contiguous positions.")
        bounds = (item.start, item.stop)
        if any(b is not None and (isinstance(b, bool) or not isinstance(b, int)) for b in bounds):
            raise exc.IndexingError(
                f"{name}[{slice_text(item)}]: slice bounds of a device value must be compile-time ints; "
                "for a run that moves with a tile, index with the tile (`blk[tile.index]`).")
        from_end = any(b is not None and b < 0 for b in bounds)
        if from_end and not isinstance(size, int):
            raise _from_unknown_end(f"{name}[{slice_text(item)}]")
        start, stop = (b if b is None or b >= 0 else max(size + b, 0) for b in bounds)
        start = start or 0
        stop = size if stop is None else stop
        if start == 0 and stop == size:
            return FullSlice()
        if stop <= start:
            raise exc.IndexingError(f"{name}[{slice_text(item)}]: the slice is empty.")
        return Run(start, stop - start, from_end=from_end)
    if isinstance(item, bool):
        raise exc.IndexingError(f"{name}[...]: boolean indices are not supported.")
    if isinstance(item, int):
        if item >= 0:
            return ScalarIndex(item)
        if not isinstance(size, int):
            raise _from_unknown_end(f"{name}[{item}]")
        if item < -size:
            raise exc.IndexingError(f"{name}[{item}]: index {item} is out of bounds for an axis of size {size}.")
        return ScalarIndex(size + item, from_end=True)
    if isinstance(item, HostScalar):
        if item.python_type is not int:
            raise exc.IndexingError(f"{name}[...]: a float scalar cannot index a tensor.")
        return ScalarIndex(item)
    if isinstance(item, TileProxy):
        return Run(item.dim.begin_value, item.dim.block_size, item.dim)
    if isinstance(item, DeviceTensor):
        value = item.value
        if value.dtype == torch.bool:
            raise exc.IndexingError(
                f"{name}[mask]: a boolean mask keeps a number of elements only the data knows, so the "
                "result has no shape when compiling; use torch.where(mask, value, other) to keep the shape.")
        if value.dtype.is_floating_point:
            raise exc.IndexingError(f"{name}[...]: a {value.dtype} value cannot index a tensor.")
        if value.shape == ():
            return ScalarIndex(value)
        if len(value.shape) != 1:
            raise exc.IndexingError(
                f"{name}[...]: a {len(value.shape)}-D index tile cannot narrow a device value; "
                "index the host tensor instead.")
        producer = value.producer
        if producer is not None and producer.op == "tile_index":
            dim = producer.args[0]
            return Run(dim.begin_value, dim.block_size, dim)
        if producer is not None and producer.op == "iota":
            step = producer.kwargs["step"]
            if step != 1:
                raise exc.IndexingError(
                    f"{name}[hl.arange(...)]: a strided run (step {step}) is not contiguous; a narrowing "
                    "read of a device value must read contiguous positions.")
            return Run(producer.kwargs["start"], value.shape[0])
        raise exc.IndexingError(
            f"{name}[...]: this index vector is not provably one contiguous run of the block "
            f"(computed by '{producer.op if producer is not None else '?'}'); narrowing a device value takes "
            "a constant, a constant slice, tile.begin or tile.index (shift the inner loop's range "
            "instead of the index), or index the host tensor.")
    if isinstance(item, (list, tuple)):  # torch's advanced indexing by a list of positions
        raise exc.IndexingError(
            f"{name}[...]: a list index ({item!r}) of a device value picks scattered positions, which a "
            "narrowing read does not (it reads contiguous runs); read each run and join them "
            "(`torch.stack([v[:, 0], v[:, 2]], dim=1)`, `torch.cat`), or gather from the kernel's tensor with "
            "an index tensor argument (`x[t, cols[:]]`, cols = torch.tensor([0, 2], dtype=torch.int32)).")
    raise exc.IndexingError(f"{name}[...]: unsupported index {item!r} of type {type(item).__name__}.")


def narrowed_shape(index: tuple[NarrowItem, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of `value[index]` (runs keep their full size; the tail is padding)."""
    out, axis = [], 0
    for item in index:
        if isinstance(item, NewAxis):
            out.append(1)
            continue
        if isinstance(item, Run):
            out.append(item.size)
        elif isinstance(item, FullSlice):
            out.append(shape[axis])
        axis += 1
    return tuple(out)


def is_index_tile(item: Any) -> bool:
    """An integer device value of rank >= 2 in a subscript: a gather through an index tile."""
    if not isinstance(item, DeviceTensor):
        return False
    dtype = item.value.dtype
    return len(item.value.shape) >= 2 and not dtype.is_floating_point and dtype != torch.bool


def gathered_axis(index: tuple[IndexItem, ...]) -> int:
    """The axis of `tensor[index]` that the index vector's lanes fill."""
    axis = 0
    for item in index:
        if isinstance(item, GatherIndex):
            return axis
        if not isinstance(item, ScalarIndex):
            axis += 1
    raise AssertionError("no index vector in the subscript")


def _item_text(item: Any) -> str:
    """An index item as the user wrote it, near enough for a message."""
    if item is None:
        return "None"
    if item is Ellipsis:
        return "..."
    if isinstance(item, slice):
        return slice_text(item)
    if isinstance(item, TileProxy):
        return item.dim.name
    if isinstance(item, DeviceTensor) and item.value.producer is not None:
        producer = item.value.producer
        if producer.op == "tile_index":
            return f"{producer.args[0].name}.index"
    if isinstance(item, DeviceTensor):
        return item.value.name or "index"
    return repr(item)


def slice_text(item: slice) -> str:
    parts = ["" if p is None else str(p) if isinstance(p, int) else "<a device value>" for p in (item.start, item.stop)]
    text = ":".join(parts)
    return text + (f":{item.step}" if item.step is not None else "")


def indexed_shape(index: tuple[IndexItem, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of `tensor[index]` as device code sees it (tiles are full blocks)."""
    out = []
    axis = 0
    for item in index:
        if isinstance(item, NewAxis):
            out.append(1)
            continue
        if isinstance(item, TileSlice):
            out.append(item.dim.block_size)
        elif isinstance(item, FullSlice):
            out.append(shape[axis])
        elif isinstance(item, GatherIndex):  # the index's axis replaces the tensor's
            out.append(item.value.shape[0])
        elif isinstance(item, StaticSlice):
            out.append(item.size)
        elif isinstance(item, ShiftedTile):
            out.append(item.dim.block_size)
        axis += 1
    return tuple(out)


def tile_after_its_loop(tensor_name: str, tile_name: str) -> exc.IndexingError:
    """The error for a tile indexing a tensor in host code (after its loop), in both modes."""
    return exc.IndexingError(
        f"{tensor_name}[...]: tile '{tile_name}' is used in host code, after its loop: a tile indexes only "
        "inside the hl.tile loop that makes it; return the whole tensor, or index it in the loop.")


def check_host_subscript(key: Any, tensor_name: str) -> None:
    """Reject host-code subscript items whose result shape only the data knows (boolean
    masks) or that torch reads differently from JAX (float indices)."""
    items = key if isinstance(key, tuple) else (key,)
    for item in items:
        if isinstance(item, list):
            flat = list(_flatten_list(item))
            if any(isinstance(i, bool) for i in flat):
                raise _mask_error(tensor_name)
            if not all(isinstance(i, int) for i in flat):
                raise exc.IndexingError(
                    f"{tensor_name}[...]: a list index must hold ints; use an int32 index tensor.")
        elif isinstance(item, HostTensor):
            dtype = item.symbol.dtype
            if dtype in (torch.bool, torch.uint8):
                raise _mask_error(tensor_name)
            if dtype.is_floating_point:
                raise exc.IndexingError(f"{tensor_name}[...]: a {dtype} tensor cannot index; cast it to int32.")
        elif isinstance(item, HostScalar) and item.python_type is not int:
            raise exc.IndexingError(f"{tensor_name}[...]: a float scalar cannot index a tensor.")
        elif isinstance(item, TileProxy):
            raise tile_after_its_loop(tensor_name, item.dim.name)


def _mask_error(tensor_name: str) -> exc.IndexingError:
    return exc.IndexingError(
        f"{tensor_name}[mask]: a boolean mask keeps a number of elements only the data knows, so "
        "the result has no shape when compiling; use torch.where(mask, value, other) to keep the "
        "shape, or an int32 index tensor.")


def _flatten_list(item: Any):
    for entry in item:
        if isinstance(entry, (list, tuple)):
            yield from _flatten_list(entry)
        else:
            yield entry


def _begin_of_tile(item: Any) -> Any:
    """The tile dim whose `tile.begin` `item` is (not hl.grid's index), else None: on a size-1
    axis it broadcasts as the tile itself does (Helion's flex attention reads a block mask of
    one head for every head so)."""
    if not isinstance(item, DeviceTensor) or item.value.producer is None:
        return None
    producer = item.value.producer
    if producer.op != "tile_begin" or producer.args[0].is_grid:
        return None
    return producer.args[0]


def broadcasts_tile(loop_begin: Any, loop_end: Any, size: Any) -> bool:
    """Whether a tile of a loop over [loop_begin, loop_end) indexing an axis of size 1 reads
    it as torch broadcasts a size-1 dim (`bias[tile_m, tile_n]` with `bias.size(0) == 1`,
    as Helion does): index 0 at every position, the axis kept with size 1. A loop that
    stays within [0, 1) tiles the axis itself (its bounds given by host ints, or device scalars
    whose range is known: `_bounds`). Only a static 1 broadcasts: with
    static_shapes=False, sizes of 1 are their own bucket (runtime/dynamic.py), never a
    symbolic size, so a dim of 1 never shares a variant with a wider one. Reference mode
    asks the same question of its tiles (reference/indexing.py)."""
    if type(size) is not int or size != 1:
        return False
    return not (_bounds(loop_begin) == (0, 0) and _bounds(loop_end)[1] <= 1)


def _read_from_data(dim: Any) -> bool:
    """Whether a tile loop's range is not given by host ints. A store through its tile on a
    size-1 axis tiles the axis: the range is checked when the kernel runs (a jagged batch of
    one row in all writes that row, as torch does; a range past it is the range check's error),
    where a read still broadcasts (Helion's rule for `bias[tile, :]`)."""
    return not (type(dim.begin) is int and type(dim.end) is int)


def _bounds(operand: Any) -> tuple:
    """The least and greatest value of a loop bound: a host int, or a device scalar whose
    range planning knows (`hl.tile(0, min(kv, tq.end))` with kv == 1 ends at 1 at most,
    so its tiles stay within [0, 1) and tile a size-1 axis, as torch reads it); else
    unbounded."""
    if type(operand) is int:
        return operand, operand
    interval = scalar_interval(operand) if isinstance(operand, Value) else None
    return interval if interval is not None else (-math.inf, math.inf)


def broadcast_store_error(tensor_name: str, tile_name: str, axis: int) -> exc.IndexingError:
    return exc.IndexingError(
        f"{tensor_name}[...] = ...: tile '{tile_name}' indexes axis {axis} of size 1, which a read "
        "broadcasts (every position reads index 0, as torch broadcasts a size-1 dim) but a store "
        f"cannot: each position of the tile would write the one element. Store at index 0 "
        f"({tensor_name}[0, ...] or a tile of a loop over that axis), or allocate the axis at "
        "the tile loop's size.")
