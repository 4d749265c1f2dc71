"""The text of a per-row DMA gather (`plan.RowCopy`): rows copied from HBM into VMEM.

The plan chose the lowering and its names; this writes one copy builder per
gather (lane -> the DMA of that lane's row), a loop starting every valid
lane's copy, a loop waiting for each of them, and the read of the buffer. The valid
lanes of a partial index tile's flat vector are a rectangle, not a prefix:
`lanes.valid_steps` maps the loops' steps onto them, so a padding lane never reads an
index nor copies a row.
"""
from __future__ import annotations

from ..ir import ScalarIndex, TileSlice
from ..plan.plans import MergedPadding
from .lanes import valid_steps
from .lowering import literal


def emit_row_gather(emitter, node, access, indent: int) -> None:
    gather = access.gather
    copy = gather.row_copy
    value = node.output
    table = node.tensor.name
    lanes = gather.index.shape[0]
    emitter.emit(f"# '{table}' stays in HBM ({gather.reason}): one DMA per index copies its row into VMEM",
                 indent)
    step_lane = None  # steps are lanes, except over an index tile's valid rectangle
    if isinstance(copy.lanes, MergedPadding):  # a partial index tile: its valid lanes are no prefix
        count, step_lane = valid_steps(emitter, table, copy.lanes, indent)
    elif copy.lanes is not None:  # a partial tile's padding lanes hold no index: copy none for them
        count = emitter.names.fresh(f"{table}_lanes")
        emitter.emit(f"{count} = {emitter.range_count(copy.lanes)}", indent)
    else:
        count = str(lanes)
    if copy.staged is not None:  # lanes cannot be read as scalars: stage the vector in SMEM
        staged = copy.staged
        emitter.emit(f"# the index vector is computed on the device: staged in SMEM for the row copies", indent)
        emitter.emit(f"{staged.vmem}[...] = {emitter.render(gather.index)}", indent)
        stage = emitter.names.fresh(f"{staged.smem}_copy")
        emitter.emit(f"{stage} = pltpu.make_async_copy({staged.vmem}, {staged.smem}, {staged.semaphore}.at[0])",
                     indent)
        emitter.emit(f"{stage}.start()", indent)
        emitter.emit(f"{stage}.wait()", indent)
    builder = emitter.names.fresh(f"{table}_row_copy")
    lane = emitter.names.fresh("lane")
    row = emitter.names.fresh("row")
    strides, stride = {}, 1  # lane -> each tile's position: row-major over the index tile's dims
    for axis in reversed(range(len(copy.index_items))):
        item = copy.index_items[axis]
        if isinstance(item, TileSlice):
            strides[axis], stride = stride, stride * item.dim.block_size
    position = ", ".join(_index_position(emitter, item, lane, strides.get(axis), lanes)
                         for axis, item in enumerate(copy.index_items)) or lane  # staged: lane i
    emitter.emit(f"def {builder}({lane}):", indent)
    emitter.emit(f"# clamped: an index outside the table never copies past it (interpret mode reports it)",
                 indent + 1)
    emitter.emit(f"{row} = jnp.clip({copy.index_ref}[{position}], 0, {gather.rows - 1})", indent + 1)
    emitter.emit(f"return pltpu.make_async_copy({copy.table_ref}.at[pl.ds({row}, 1)], "
                 f"{copy.buffer}.at[pl.ds({lane}, 1)], {copy.semaphore}.at[0])", indent + 1)
    step = lane if step_lane is None else emitter.names.fresh("step")
    for verb in ("start", "wait"):
        body = emitter.names.fresh(f"{table}_{verb}_row")
        emitter.emit(f"def {body}({step}, carry):", indent)
        emitter.emit(f"{builder}({step if step_lane is None else step_lane(step)}).{verb}()", indent + 1)
        emitter.emit("return carry", indent + 1)
        emitter.emit(f"lax.fori_loop(0, {count}, {body}, 0)", indent)
    text = f"{copy.buffer}[...]"
    if tuple(access.ref_shape) != tuple(value.shape):
        text = f"{text}.reshape({literal(tuple(value.shape))})"
    emitter.emit(f"{emitter.bind(value, table)} = {text}", indent)


def _index_position(emitter, item, lane: str, stride: int | None, lanes: int) -> str:
    """One axis of the lane's position in the index tensor (`stride`: lanes per step of a tile)."""
    if isinstance(item, TileSlice):
        offset = lane if stride == 1 else f"{lane} // {stride}"
        if stride * item.dim.block_size < lanes:
            offset = f"{offset} % {item.dim.block_size}"  # // and % group left to right
        return f"{emitter.env[item.dim.begin_value.id]} + {offset}"
    assert isinstance(item, ScalarIndex)
    return emitter.render(item.index)
