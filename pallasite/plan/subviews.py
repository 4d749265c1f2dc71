"""Narrowing reads of device values (`blk[tile_s.index]`, `blk[2]`, `blk[1:3]`): the one
place they are decided.

The frontend records each as a `subview` node holding its `NarrowItem`s (recognized once,
in `frontend/indexing.py`). Here each is composed down to the value it narrows (a
subview of a subview narrows its root), checked, and given one `SubviewRead`:

- a block loaded from a tensor stays the VMEM ref it was loaded into (the load stays in
  its own body, staged by its BlockSpec, stream or pipeline once per tile): the read is
  `ref[pl.ds(start, size), ...]`, the load's own ref subscript with the narrowed axes
  replaced by `RefOffset`s. Mosaic has neither `dynamic_slice` nor a gather on values, so
  this is the only lowering of a run that moves with a tile.
- a tensor the loop also writes would show those writes to a later read of the ref, where
  eager PyTorch reads the loaded copy: such a load copies its window into VMEM scratch
  (`BlockCopy`) and its narrowing reads use the copy.
- any other value (computed, carried) may be narrowed by constants only: a static slice.

Every read must stay inside the block and inside its valid part: a run moving with an
inner tile must end by the block's end on every tile (`InvalidConfig` otherwise: another
block size fits), and on an axis whose tile may be partial it must end by that tile's
extent (`live = tile_t.end - tile_t.begin`). Anything not provable is refused with the
reason; nothing is clamped or approximated.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from .. import exc
from ..ir import FullSlice, Load, NewAxis, ScalarIndex, TileDim, TileSlice, Value, cdiv, walk_nodes
from ..ir.intervals import scalar_interval
from .bounds import describe
from .access_plans import keeps_axis
from .plans import (
    Access, BlockCopy, InnerTileSlice, PrefixSlice, RefOffset, ReductionChunk, Scratch, ScratchKind,
    SubviewRead, TileRange,
)


@dataclass(frozen=True)
class _Narrow:
    """One axis of a composed narrowing: kind 'full', 'point' (terms) or 'run' (terms, size, dim)."""

    kind: str
    terms: tuple = ()
    size: int | None = None
    dim: TileDim | None = None
    from_end: bool = False  # a negative index or bound, counted from the value's end

    @property
    def static(self) -> bool:
        return self.dim is None and all(isinstance(t, int) for t in self.terms)


def plan_subviews(body: list, accesses: dict[int, Access], padded: dict, written: set[int], root_of,
                  skipped: frozenset[int], names: set[str]) -> tuple[dict, dict, list]:
    """`SubviewRead` per subview node id, `BlockCopy` per load id, and the copies' scratch.

    `padded`: the mask planner's padded axes per value id; `written`: storage roots the
    loop writes; `root_of(symbol)`: a tensor's storage root."""
    reads: dict[int, SubviewRead] = {}
    copies: dict[int, BlockCopy] = {}
    scratch: list[Scratch] = []
    spills: dict[int, Scratch] = {}  # computed value id -> the VMEM scratch its runs are read from
    for node in walk_nodes(body):
        if node.op != "subview":
            continue
        root, items = _compose(node)
        pads = padded.get(root.id, {})
        producer = root.producer
        load = producer if isinstance(producer, Load) and producer.id not in skipped else None
        access = accesses.get(load.id) if load is not None else None
        for axis, item in enumerate(items):
            if item.kind != "full":
                _check_inside(node, root, load, axis, item, pads.get(axis))
        if access is None or access.value_axes is None:
            if all(item.kind == "full" or item.static for item in items):
                reads[node.id] = _static_read(node, root, items)
                continue
            spill = spills.get(root.id)
            if spill is None:
                spill = spills[root.id] = _spill_scratch(node, root, names)
                scratch.append(spill)
            base = (spill.name, (FullSlice(),) * len(root.shape), tuple(root.shape))
            read = _resident_read(node, items, tuple(range(len(root.shape))), base,
                                  "a computed value (a carried state) is written to VMEM scratch and the run "
                                  "read back: Mosaic cannot slice a value at a dynamic offset")
            reads[node.id] = dataclasses.replace(read, spill_from=root)
            continue
        if id(root_of(load.tensor)) in written:
            copy = copies.get(load.id)
            if copy is None:
                name = _unique(f"{load.tensor.name}_copy", names)
                copy = copies[load.id] = BlockCopy(load.id, name, tuple(access.ref_shape))
                scratch.append(Scratch(name, ScratchKind.VMEM, copy.shape or (1,), load.tensor.dtype))
            base = (copy.scratch, (FullSlice(),) * len(copy.shape), copy.shape)
            reason = (f"'{load.tensor.name}' is written in this loop: the block is copied at the load "
                      "so this read sees the loaded values")
        else:
            # spelled out: one item per ref axis (a stream's slot leaves its window axes implicit)
            window_items = [i for i in access.ref_index if keeps_axis(i)]
            ref_index = (*access.ref_index, *(FullSlice(),) * (len(access.ref_shape) - len(window_items)))
            base = (access.ref_name, ref_index, tuple(access.ref_shape))
            reason = "read out of the VMEM block the load staged"
        reads[node.id] = _resident_read(node, items, access.value_axes, base, reason)
    return reads, copies, scratch


def _compose(node) -> tuple[Value, list[_Narrow]]:
    """The value a chain of subviews narrows, and the chain as one narrowing of its axes."""
    chain = []
    value = node.outputs[0]
    while value.producer is not None and value.producer.op == "subview":
        chain.append(value.producer)
        value = value.producer.args[0]
    items = [_Narrow("full") for _ in value.shape]
    kept = list(range(len(items)))  # axes of the current result -> root axes (None: a new axis)
    for step in reversed(chain):
        new_kept = []
        position = 0
        for item in step.kwargs["index"]:
            if isinstance(item, NewAxis):
                new_kept.append(None)
                continue
            root_axis = kept[position]
            position += 1
            if isinstance(item, FullSlice):
                new_kept.append(root_axis)
                continue
            narrowed = _narrow_of(item)
            if root_axis is None:  # an axis a None added: only its one position exists
                if not (narrowed.static and narrowed.terms == (0,) and narrowed.size in (None, 1)):
                    raise exc.IndexingError("A narrowing read of an axis added by None may only read its "
                                            "position 0.", step.location)
                if narrowed.size is not None:
                    new_kept.append(None)
                continue
            items[root_axis] = _then(items[root_axis], narrowed, step)
            if narrowed.size is not None:
                new_kept.append(root_axis)
        kept = new_kept
    return value, items


def _narrow_of(item) -> _Narrow:
    if isinstance(item, ScalarIndex):
        return _Narrow("point", (item.index,), from_end=item.from_end)
    return _Narrow("run", (item.start,), item.size, item.dim, item.from_end)


def _then(outer: _Narrow, inner: _Narrow, step) -> _Narrow:
    """`inner` applied to the axis `outer` selected."""
    if outer.kind == "full":
        return inner
    if inner.dim is not None and outer.dim is not None:
        raise exc.IndexingError(
            f"A run of tile '{inner.dim.name}' out of a run of tile '{outer.dim.name}' is not supported; "
            "narrow the block once.", step.location)
    if inner.static and inner.kind == "run" and outer.size is not None and inner.terms[0] + inner.size > outer.size:
        raise exc.IndexingError(
            f"The slice [{inner.terms[0]}:{inner.terms[0] + inner.size}] is wider than the run of "
            f"{outer.size} it narrows.", step.location)
    terms = outer.terms + inner.terms
    return _Narrow(inner.kind, terms, inner.size, inner.dim or outer.dim if inner.kind == "run" else None,
                   outer.from_end or inner.from_end)


# ------------------------------------------------------------------ bounds --


def _check_inside(node, root: Value, load, axis: int, item: _Narrow, pad) -> None:
    """Every position the read keeps lies in the block, and in its valid part."""
    length = root.shape[axis]
    name = root.name or "value"
    tile_axis = _tile_of(load, axis)
    config_error = exc.InvalidConfig if tile_axis is not None else exc.IndexingError
    text = _describe(item)
    if pad is not None and not isinstance(pad, TileRange):
        raise exc.IndexingError(f"{name}[{text}]: narrowing an axis a reshape merged from partial tiles "
                                "is not supported.", node.location)
    lo, hi = _span(item)
    if lo is None or lo < 0:
        raise exc.IndexingError(
            f"{name}[{text}] on axis {axis}: cannot prove the position is not negative; narrow with a "
            "constant, tile.begin or tile.index of a loop starting at 0 or later.", node.location)
    if hi is None:
        raise exc.IndexingError(
            f"{name}[{text}] on axis {axis}: cannot prove the read stays inside the block of {length}; "
            "narrow with a constant, a constant slice, tile.begin or tile.index of an inner loop "
            "bounded by the block (`hl.tile(tile.end - tile.begin)`).", node.location)
    if hi > length:  # the last position read, exclusive, past the block's end
        if item.dim is not None:
            what = f"the last tile of '{item.dim.name}' (block {item.dim.block_size}) reads up to position {hi}"
        elif item.kind == "run" and item.static:
            what = f"the slice is wider than the block (it ends at {hi})"
        elif item.static:
            what = f"the index {hi - 1} is past the block"
        else:
            what = f"it reads up to position {hi}"
        hint = (f"; choose block sizes where the block of '{item.dim.name}' divides the {length} positions "
                "the loaded block holds" if item.dim is not None else "")
        raise config_error(f"{name}[{text}] on axis {axis}: {what} but the block holds {length}{hint}.",
                           node.location)
    if pad is None:
        return
    tile = pad.dim  # the axis is that tile's block: positions past its extent are padding
    if item.from_end:  # a block size dividing the dim pads nothing: the autotuner may pick one
        text = _as_written_from_end(item, length, text)
        raise (exc.InvalidConfig if _min_extent(tile) is not None else exc.IndexingError)(
            f"{name}[{text}] on axis {axis}: a negative index counts from the end of the block of tile "
            f"'{tile.name}', which on its partial last tile is padding, not torch's last element; index "
            "an axis the tile does not pad, choose a block size that divides the dim, or count from 0.",
            node.location)
    if _within_extent(item, tile):
        return
    minimum = _min_extent(tile)
    if item.static and hi <= (1 if minimum is None else minimum):  # a tile is never empty
        return
    holds = (f"whose last tile holds {minimum if minimum is not None else 'as few as 1'} of the block's "
             f"{length} positions")
    if item.kind == "run" and item.static:  # a constant slice: torch shortens it on a short tile
        reason = (f"a constant slice of tile '{tile.name}', {holds}: on a short tile the slice's length "
                  "would depend on the tile's extent; read it through an inner loop bounded by "
                  f"`{tile.name}.end - {tile.name}.begin`, or choose a block size that divides the dim.")
    else:
        reason = (f"the read can pass the end of tile '{tile.name}', {holds} (eager PyTorch raises "
                  f"there); bound the inner loop by `{tile.name}.end - {tile.name}.begin` or choose a "
                  "block size that divides the dim.")
    raise (exc.InvalidConfig if minimum is not None else exc.IndexingError)(
        f"{name}[{text}] on axis {axis}: {reason}", node.location)


def _span(item: _Narrow) -> tuple[int | None, int | None]:
    """The lowest position read and one past the highest, over every tile (None: unknown)."""
    size = 1 if item.size is None else item.size
    lo = hi = 0
    for term in item.terms:
        if item.dim is not None and term is item.dim.begin_value:
            begin, end = _interval(item.dim.begin), _upper(item.dim.end)
            if begin is None or end is None:
                return (None if begin is None else lo + begin[0]), None
            last = item.dim.begin + (cdiv(end - item.dim.begin, item.dim.block_size) - 1) * item.dim.block_size \
                if isinstance(item.dim.begin, int) else None
            if last is None:
                return lo + begin[0], None
            lo, hi = lo + begin[0], hi + last
            continue
        interval = _interval(term)
        if interval is None:  # read from data, or not bounded by tiles: unknown
            return None, None
        lo, hi = lo + interval[0], hi + interval[1]
    return lo, hi + size


def _interval(term) -> tuple[int, int] | None:
    if isinstance(term, Value) and term.producer is not None and term.producer.op == "tile_begin":
        dim = term.producer.args[0]
        end = _upper(dim.end)
        if isinstance(dim.begin, int) and end is not None:
            last = dim.begin + max(cdiv(end - dim.begin, dim.block_size) - 1, 0) * dim.block_size
            return dim.begin, last
    return scalar_interval(term)


def _upper(term) -> int | None:
    """An upper bound of an int scalar over every tile: `tile.end - tile.begin` is at most the
    tile's block; min takes the tighter side."""
    if isinstance(term, int):
        return term
    if not isinstance(term, Value) or term.producer is None:
        return None
    node = term.producer
    if _is_extent(term) is not None:
        return _is_extent(term).block_size
    if node.op == "minimum":
        bounds = [b for b in (_upper(a) for a in node.args) if b is not None]
        return min(bounds) if bounds else None
    interval = scalar_interval(term)
    return None if interval is None else interval[1]


def _is_extent(term) -> TileDim | None:
    """The tile whose extent `term` is (`tile.end - tile.begin`), if it is one."""
    node = term.producer if isinstance(term, Value) else None
    if node is None or node.op != "sub" or node.kwargs.get("alpha", 1) != 1:
        return None
    end, begin = node.args
    if not (isinstance(end, Value) and end.producer is not None and end.producer.op == "tile_end"):
        return None
    dim = end.producer.args[0]
    return dim if begin is dim.begin_value else None


def _within_extent(item: _Narrow, tile: TileDim) -> bool:
    """Whether every kept position lies in `tile`'s extent on every tile: a run (or begin) of an
    inner loop over [0 or more, tile.end - tile.begin) or a tighter min of it."""
    dim = item.dim
    if dim is None and item.kind == "point" and len(item.terms) == 1:  # blk[tile_s.begin]
        term = item.terms[0]
        if isinstance(term, Value) and term.producer is not None and term.producer.op == "tile_begin":
            dim = term.producer.args[0]
    if dim is None or item.terms != (dim.begin_value,):
        return False
    begin = _interval(dim.begin)
    if begin is None or begin[0] < 0:
        return False
    end = dim.end
    candidates = [end]
    if isinstance(end, Value) and end.producer is not None and end.producer.op == "minimum":
        candidates += list(end.producer.args)
    return any(_is_extent(c) is tile for c in candidates)


def _min_extent(tile: TileDim) -> int | None:
    """The fewest positions any tile of `tile` holds, when the range is static."""
    trips = tile.static_trips
    if not trips or not isinstance(tile.begin, int) or not isinstance(tile.end, int):
        return None
    return min(tile.block_size, tile.end - (tile.begin + (trips - 1) * tile.block_size))


def _tile_of(load, axis: int) -> TileDim | None:
    """The tile whose block the loaded value's axis is (its length is a config's block size)."""
    if load is None:
        return None
    items = [item for item in load.index if not isinstance(item, ScalarIndex)]
    item = items[axis] if axis < len(items) else None
    return item.dim if isinstance(item, TileSlice) else None


def _as_written_from_end(item: _Narrow, length: int, text: str) -> str:
    """A negative index (`blk[-1]`) or slice (`blk[-3:]`) as the user wrote it, from its
    position counted from the block's `length` (`text` when it is not a constant)."""
    if not item.static:
        return text
    start = sum(item.terms)
    if item.kind == "point":
        return str(start - length)
    stop = start + item.size
    return f"{start - length}:{stop - length if stop < length else ''}"


def _describe(item: _Narrow) -> str:
    start = " + ".join(describe(t) for t in item.terms) or "0"
    if item.kind == "point":
        return start
    if item.dim is not None:
        return f"{item.dim.name}.index" if len(item.terms) == 1 else f"{start} + {item.dim.name}.index"
    if item.static:
        return f"{sum(item.terms)}:{sum(item.terms) + item.size}"
    return f"{start}:{start} + {item.size}"


# ------------------------------------------------------------------- reads --


def _static_read(node, root: Value, items: list[_Narrow]) -> SubviewRead:
    """Constant narrowing of a computed value: a static slice (Mosaic lowers those)."""
    key = []
    for item in items:
        if item.kind == "full":
            key.append(slice(None))
        elif not item.static:
            raise exc.IndexingError(
                f"{root.name or 'this value'}[{_describe(item)}]: only a block loaded from a tensor "
                "(`blk = x[tile, :]`) can be narrowed at a position that moves with a tile or the data: it "
                "stays the VMEM ref it was loaded into. This value is computed (Mosaic cannot slice a value "
                "at a dynamic offset); index the tensor it came from instead.", node.location)
        elif item.kind == "point":
            key.append(sum(item.terms))
        else:
            key.append(slice(sum(item.terms), sum(item.terms) + item.size))
    shape = tuple(node.outputs[0].shape)
    return SubviewRead(None, (), shape, shape, source=root, static_key=tuple(key),
                       reason="constant slice of a computed value")


def _spill_scratch(node, root: Value, names: set[str]) -> Scratch:
    if root.dtype == torch.bool or not root.shape:
        raise exc.IndexingError(
            f"{root.name or 'this value'}[...]: a {root.dtype} value of shape {list(root.shape)} cannot be "
            "narrowed at a position that moves with a tile; cast it to int32 or float first.", node.location)
    return Scratch(_unique(f"{root.name or 'value'}_vmem", names), ScratchKind.VMEM, tuple(root.shape), root.dtype)


def _resident_read(node, items: list[_Narrow], value_axes, base, reason: str) -> SubviewRead:
    ref_name, ref_index, ref_shape = base
    ref_index = list(ref_index)
    # the ref items that make the window's axes, in order
    window = [position for position, item in enumerate(ref_index) if keeps_axis(item)]
    for axis, item in enumerate(items):
        if item.kind == "full":
            continue
        window_axis = value_axes[axis]
        if window_axis is None:  # a None of the load: only position 0 exists (checked above)
            continue
        position = window[window_axis]
        ref_index[position] = RefOffset(_offset_terms(ref_index[position], node) + item.terms, item.size)
    shape = []
    for position, item in enumerate(ref_index):
        if position not in window:
            continue
        if isinstance(item, RefOffset):
            if item.size is not None:
                shape.append(item.size)
        else:
            shape.append(ref_shape[window.index(position)])
    return SubviewRead(ref_name, tuple(ref_index), tuple(shape), tuple(node.outputs[0].shape), reason=reason)


def _offset_terms(item, node) -> tuple:
    """Where a window axis starts in its ref."""
    if isinstance(item, (FullSlice, PrefixSlice)):
        return ()
    if isinstance(item, InnerTileSlice):
        return (item.dim.begin_value,)
    if isinstance(item, RefOffset) and item.size is not None:  # a static window (`x[t, a:b]`)
        return item.terms
    if isinstance(item, ReductionChunk):
        raise exc.UnsupportedOperation(
            "A narrowing read of a block that a looped reduction reads in chunks is not supported; set "
            "that reduction's `reduction_loops` entry to None.", node.location)
    raise AssertionError(f"window item {item!r}")


def _unique(base: str, names: set[str]) -> str:
    name, count = base, 1
    while name in names:
        name = f"{base}_{count}"
        count += 1
    names.add(name)
    return name


__all__ = ["plan_subviews"]
