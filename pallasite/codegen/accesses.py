"""Loads and stores in the kernel body, as the plan's `Access` says: the ref subscript,
gathers and scatters through index vectors, masks of partial tiles and write-backs.
`k` is the `KernelEmitter`."""
from __future__ import annotations

import itertools

import torch

from ..ir import FullSlice, Load, ScalarIndex, ShiftedTile, Store, Value
from ..plan.access_plans import AlignedRun, GroupRow
from ..plan.plans import InnerTileSlice, PrefixSlice, ReductionChunk, RefOffset, StreamSlot
from .frames import typed_fill
from .gathers import gather_text, one_hot_text
from .loops.streamed import emit_partial_write_back
from .lowering import jnp_dtype, literal
from .row_gathers import emit_row_gather
from .scatters import scatter_text
from .subviews import offset_text


def ref_subscript(k, access) -> str:
    """The subscript of a ref reading or writing the access's block part."""
    if not access.ref_index:
        return "..."
    return ", ".join(_ref_item(k, item) for item in access.ref_index)


def _ref_item(k, item) -> str:
    if isinstance(item, FullSlice):
        return ":"
    if isinstance(item, ScalarIndex):
        return k.render(item.index)
    if isinstance(item, GroupRow):  # the chosen row's place in its group of rows (non-negative)
        if isinstance(item.index, int):
            return str(item.index % item.rows)
        return f"{k.render(item.index)} % {item.rows}"
    if isinstance(item, StreamSlot):
        return k.frames[item.loop_id].slot
    if isinstance(item, PrefixSlice):
        return f":{item.length}"
    if isinstance(item, ReductionChunk):
        counter = k.reduction_chunks[item.node_id]
        return f"pl.ds(pl.multiple_of({counter} * {item.chunk}, {item.chunk}), {item.chunk})"
    if isinstance(item, RefOffset):
        return offset_text(k, item)
    if isinstance(item, InnerTileSlice):
        dim = item.dim
        begin = k.render(dim.begin_value)
        frame = k.frame_of(dim)
        if frame is not None and frame.traced and dim.begin_aligned:
            begin = f"pl.multiple_of({begin}, {dim.block_size})"
        return f"pl.ds({begin}, {dim.block_size})"
    if isinstance(item, AlignedRun):
        dim = item.dim
        begin, block = k.render(dim.begin_value), dim.block_size
        frame = k.frame_of(dim)
        start = _plus(begin, item.blocks * block - item.lead)
        if frame is not None and not frame.traced:  # an unrolled step: a Python int
            return f"pl.ds(max({start}, 0), {block})"
        return f"pl.ds(pl.multiple_of(jnp.maximum({start}, 0), {block}), {block})"
    raise TypeError(f"no ref subscript for a {type(item).__name__}")


def emit_load(k, node: Load) -> None:
    access = k.plan.accesses[node.id]
    value = node.output
    if 0 in value.shape:  # an empty slice: nothing to read (and no vector: see KernelEmitter._emit_op)
        k.set_value(value, f"jnp.zeros({literal(tuple(value.shape))}, {jnp_dtype(value.dtype)})")
        return
    k.emit_index_checks(node)
    if access.gather is not None and access.gather.row_copy is not None:
        emit_row_gather(k, node, access)
        return
    text = f"{access.ref_name}[{ref_subscript(k, access)}]"
    if access.shifts:  # a gather picks its rows from the moved window
        text = _shifted_read(k, node, access)
    if access.gather is not None:
        _emit_gather(k, node, access, text)
        return
    copy = k.plan.block_copies.get(node.id)
    if copy is not None:  # the loop writes the tensor: narrowing reads use this copy
        k.emit(f"{copy.scratch}[...] = {text}", comment="the loaded values, for reads after a write")
    if tuple(access.ref_shape) != tuple(value.shape):
        text = f"{text}.reshape({literal(tuple(value.shape))})"
    name = k.bind(value, node.tensor.name)
    k.emit(f"{name} = {text}", comment=access.note or None, pure=True)  # dropped if only narrowing reads use it


def _shifted_read(k, node: Load, access) -> str:
    """A load at moved tiles (`tile + c`, the plan's `TileShift`s): per moved axis, the aligned
    run holding its first lanes, with the next run's first r lanes selected in and rotated by r
    (axis by axis: 2**axes aligned reads at most), positions outside the tensor zeroed."""
    bind, shape = _binder(k), tuple(access.ref_shape)
    where = ", ".join(ShiftedTile(s.dim, s.offset).text() for s in access.shifts)
    k.comment(f"{node.tensor.name} at {where}: aligned runs of the resident "
              f"ax{'es' if len(access.shifts) > 1 else 'is'}, rotated into place; positions outside the tensor read 0")
    lanes = [bind("lane", f"lax.broadcasted_iota(jnp.int32, {literal(shape)}, {s.axis})") for s in access.shifts]

    def named(hint: str, text: str) -> str:  # a value another axis already named keeps its name
        return text if text.isidentifier() else bind(hint, text)

    def read(items: list, level: int) -> str:
        if level == len(access.shifts):
            return f"{access.ref_name}[{', '.join(_ref_item(k, item) for item in items)}]"
        shift = access.shifts[level]
        text = read(items, level + 1)
        if not shift.rotate:
            return text
        text = named(f"{node.tensor.name}_run", text)
        later = list(items)
        later[shift.item] = shift.run(shift.blocks + 1)
        following = named(f"{node.tensor.name}_next", read(later, level + 1))
        return bind(f"{node.tensor.name}_shifted",
                    f"pltpu.roll(jnp.where({lanes[level]} < {shift.rotate}, {following}, {text}), "
                    f"{shift.dim.block_size - shift.rotate}, {shift.axis})")

    text = read(list(access.ref_index), 0)
    inside = []
    for shift, lane in zip(access.shifts, lanes):
        position = f"{lane} + ({_plus(k.render(shift.dim.begin_value), shift.offset)})"
        inside.append(f"({position} >= 0) & ({position} < {shift.size})")
    return f"jnp.where({' & '.join(inside)}, {text}, {typed_fill(0, node.tensor.dtype)})"  # (a bool's is False)


def _shifted_write(k, node: Store, access, value: str) -> None:
    """A store at moved tiles (the plan's `TileShift`s): the value rotated by r along each moved
    axis into the aligned runs its lanes land in (two per axis rotated by r != 0); each run keeps
    its contents where no valid lane lands (before the value's lanes, past the tile's end,
    outside the tensor, past a partial tile's end on another axis)."""
    bind, shape = _binder(k), tuple(access.ref_shape)
    where = ", ".join(ShiftedTile(s.dim, s.offset).text() for s in access.shifts)
    k.comment(f"{node.tensor.name} at {where}: the value rotated into the aligned runs of the resident "
              f"ax{'es' if len(access.shifts) > 1 else 'is'}; positions outside the tensor are not written")
    rotated = value
    per_axis = []  # per moved axis: its runs as (aligned run, condition on the lanes landing there)
    for shift in access.shifts:
        lane = bind("lane", f"lax.broadcasted_iota(jnp.int32, {literal(shape)}, {shift.axis})")
        if shift.rotate:
            rotated = bind("rotated", f"pltpu.roll({rotated}, {shift.rotate}, {shift.axis})")
        dim, block = shift.dim, shift.dim.block_size
        limit = min(shift.size, dim.end + shift.offset)  # past the tile's end or the tensor: no valid lane
        begin = k.render(dim.begin_value)
        runs = [(shift.blocks, f"{lane} >= {shift.rotate}" if shift.rotate else None)]
        if shift.rotate:
            runs.append((shift.blocks + 1, f"{lane} < {shift.rotate}"))
        per_axis.append([(shift.run(blocks), " & ".join(filter(None, (
            held and f"({held})", f"({lane} + ({_plus(begin, blocks * block - shift.lead)}) >= 0)",
            f"({lane} + ({_plus(begin, blocks * block - shift.lead)}) < {limit})")))) for blocks, held in runs])
    kept = [k.range_condition(shape, m.axis, m.range) for m in access.store_masks]
    for combination in itertools.product(*per_axis):
        items = list(access.ref_index)
        for shift, (run, _) in zip(access.shifts, combination):
            items[shift.item] = run
        target = f"{access.ref_name}[{', '.join(_ref_item(k, item) for item in items)}]"
        condition = " & ".join([condition for _, condition in combination] + kept)
        k.emit(f"{target} = jnp.where({condition}, {rotated}, {target})")


def _plus(text: str, offset: int) -> str:
    """`text + offset` written as a reader would (`begin - 3`, `begin`)."""
    return text if offset == 0 else f"{text} + {offset}" if offset > 0 else f"{text} - {-offset}"


def _binder(k):
    """`bind(hint, text)`: emit a statement binding `text` to a fresh name; return the name."""
    def bind(hint: str, text: str) -> str:
        name = k.names.fresh(hint)
        k.emit(f"{name} = {text}")
        return name
    return bind


def _emit_gather(k, node: Load, access, window: str) -> None:
    """A load through an index vector: read the window, pick its rows (the plan's `Gather`)."""
    gather, value = access.gather, node.output
    bind = _binder(k)
    rows = bind(f"{node.tensor.name}_rows", window)
    index = k.render(gather.index)
    hot = bind(f"{gather.index.name or 'index'}_hot", one_hot_text(index, gather.index.shape[0], gather.rows))
    text = gather_text(gather, rows, tuple(access.ref_shape), hot, node.tensor.dtype, bind)
    shape = list(access.ref_shape)
    shape[gather.axis] = gather.index.shape[0]
    if tuple(shape) != tuple(value.shape):
        text = f"({text}).reshape({literal(tuple(value.shape))})"
    k.emit(f"{k.bind(value, node.tensor.name)} = {text}")


def emit_store(k, node: Store) -> None:
    access = k.plan.accesses[node.id]
    k.emit_index_checks(node)
    target = f"{access.ref_name}[{ref_subscript(k, access)}]"
    operand = node.args[0]  # args[1]: a scatter's lane mask (the plan's Scatter.lane_mask)
    if isinstance(operand, Value) and 0 in operand.shape:
        k.comment("an empty slice: nothing to store")
        return
    shape = tuple(access.ref_shape)
    if access.scatter is not None:  # the value has the index's lanes on the scattered axis
        shape = tuple(access.scatter.index.shape[0] if axis == access.scatter.axis else size
                      for axis, size in enumerate(shape))
    text = _stored_value(k, operand, shape, node.tensor.dtype)
    if access.shifts:
        _shifted_write(k, node, access, text)
        return
    if access.scatter is not None:
        text, shape = _scatter_window(k, access, text, shape, target, node.tensor.dtype), tuple(access.ref_shape)
    if access.store_masks:
        conditions = [k.range_condition(shape, m.axis, m.range) for m in access.store_masks]
        k.comment("keep the contents past the tile's end")
        text = f"jnp.where({' & '.join(conditions)}, {text}, {target})"
    k.emit(f"{target} = {text}", comment=access.note or None)
    if access.write_back is not None and access.write_back.partial_dim is not None:
        emit_partial_write_back(k, access.write_back)
    elif access.write_back is not None and access.write_back.direction.reads:
        frame = k.frames[access.write_back.loop_id]
        k.emit(f"{access.write_back.write_fn}({frame.step}, {frame.slot}).start()")
        k.emit(f"{access.write_back.write_fn}({frame.step}, {frame.slot}).wait()",
               comment="before the slot takes a later window in")
    elif access.write_back is not None:
        frame = k.frames[access.write_back.loop_id]
        k.emit(f"{access.write_back.copy_fn}({frame.step}, {frame.slot}).start()",
               comment="write back asynchronously")


def _stored_value(k, operand, shape: tuple, dtype: torch.dtype) -> str:
    """The stored operand cast to the tensor's dtype and shaped as the ref's window."""
    if not isinstance(operand, Value):
        if operand == 0 and shape:
            return f"jnp.zeros({literal(shape)}, {jnp_dtype(dtype)})"
        return f"jnp.full({literal(shape)}, {literal(operand)}, {jnp_dtype(dtype)})" if shape else literal(operand)
    text = k.render(operand)
    if operand.dtype != dtype:
        text = (f"({text} != 0)" if dtype == torch.bool else f"{jnp_dtype(dtype)}({text})"
                if not operand.shape else f"{text}.astype({jnp_dtype(dtype)})")
    if tuple(operand.shape) != shape:
        text = (f"{text}.reshape({literal(shape)})" if _kept_unit_axes(operand.shape, shape)
                else f"jnp.broadcast_to({text}, {literal(shape)})" if shape else f"{text}.reshape(())")
    return text


def _scatter_window(k, access, values: str, lane_shape, window: str, dtype) -> str:
    """The written window after a store through an index vector (the plan's `Scatter`)."""
    scatter = access.scatter
    valid = None if scatter.valid_lanes is None else k.range_condition(
        scatter.index.shape, 0, scatter.valid_lanes)
    if scatter.lane_mask is not None:  # hl.store(..., extra_mask=): masked-off lanes write nothing
        mask = k.render(scatter.lane_mask)
        valid = mask if valid is None else f"({valid}) & ({mask})"
    bind = _binder(k)
    if not values.isidentifier():  # a name, or an expression (placeholders are no identifiers)
        values = bind("scattered", values)
    index = k.render(scatter.index) if k.is_name(scatter.index) else bind("index", k.render(scatter.index))
    k.comment(f"scatter into '{access.ref_name}': each row takes its last lane's value")
    return scatter_text(scatter, index, valid, values, lane_shape, window, dtype, bind)


def _kept_unit_axes(value_shape, shape) -> bool:
    """The store's window keeps size-1 axes the value lacks, which broadcasting cannot add in
    the middle (an integer index into an axis the block splits off: `out[tile, h, :]` with a
    window of (rows, 1, D)): the value is reshaped into it, same elements in the same order."""
    strip = lambda dims: tuple(size for size in dims if size != 1)  # noqa: E731
    if strip(value_shape) != strip(shape) or len(value_shape) >= len(shape):
        return False
    broadcasts = all(v in (1, s) for v, s in zip(reversed(tuple(value_shape)), reversed(tuple(shape))))
    return not broadcasts
