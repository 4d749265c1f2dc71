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


def emit_row_gather(emitter, node, access) -> None:
    gather = access.gather
    copy = gather.row_copy
    value = node.output
    table = node.tensor.name
    emitter.comment(f"'{table}' stays in HBM ({gather.reason}): one DMA per index copies its row into VMEM")
    step_lane = None  # steps are lanes, except over an index tile's valid rectangle
    if isinstance(copy.lanes, MergedPadding):  # a partial index tile: its valid lanes are no prefix
        count, step_lane = valid_steps(emitter, table, copy.lanes)
    elif copy.lanes is not None:  # a partial tile's padding lanes hold no index: copy none for them
        count = emitter.names.fresh(f"{table}_lanes")
        emitter.emit(f"{count} = {emitter.range_count(copy.lanes)}")
    else:
        count = str(gather.index.shape[0])
    if copy.staged is not None:  # lanes cannot be read as scalars: stage the vector in SMEM
        _emit_staging(emitter, copy.staged, gather)
    builder, lane = _emit_copy_builder(emitter, gather, copy, table)
    step = lane if step_lane is None else emitter.names.fresh("step")
    for verb in ("start", "wait"):
        body = emitter.names.fresh(f"{table}_{verb}_row")
        with emitter.block(f"def {body}({step}, carry):"):
            emitter.emit(f"{builder}({step if step_lane is None else step_lane(step)}).{verb}()")
            emitter.emit("return carry")
        emitter.emit(f"lax.fori_loop(0, {count}, {body}, 0)")
    text = f"{copy.buffer}[...]"
    if tuple(access.ref_shape) != tuple(value.shape):
        text = f"{text}.reshape({literal(tuple(value.shape))})"
    emitter.emit(f"{emitter.bind(value, table)} = {text}")


def _emit_staging(emitter, staged, gather) -> None:
    emitter.comment("the index vector is computed on the device: staged in SMEM for the row copies")
    emitter.emit(f"{staged.vmem}[...] = {emitter.render(gather.index)}")
    stage = emitter.names.fresh(f"{staged.smem}_copy")
    emitter.emit(f"{stage} = pltpu.make_async_copy({staged.vmem}, {staged.smem}, {staged.semaphore}.at[0])")
    emitter.emit(f"{stage}.start()")
    emitter.emit(f"{stage}.wait()")


def _emit_copy_builder(emitter, gather, copy, table: str) -> tuple[str, str]:
    """The function from a lane to the DMA of its row; returns its name and its parameter's."""
    builder = emitter.names.fresh(f"{table}_row_copy")
    lane, row = emitter.names.fresh("lane"), emitter.names.fresh("row")
    lanes = gather.index.shape[0]
    strides, stride = {}, 1  # lane -> each tile's position: row-major over the index tile's dims
    for axis in reversed(range(len(copy.index_items))):
        item = copy.index_items[axis]
        if isinstance(item, TileSlice):
            strides[axis], stride = stride, stride * item.dim.block_size
    position = ", ".join(_index_position(emitter, item, lane, strides.get(axis), lanes)
                         for axis, item in enumerate(copy.index_items)) or lane  # staged: lane i
    with emitter.block(f"def {builder}({lane}):"):
        emitter.comment("clamped: an index outside the table never copies past it (interpret mode reports it)")
        emitter.emit(f"{row} = jnp.clip({copy.index_ref}[{position}], 0, {gather.rows - 1})")
        source = ", ".join([f"pl.ds({row}, 1)", *_window_text(emitter, copy.window)])
        emitter.emit(f"return pltpu.make_async_copy({copy.table_ref}.at[{source}], "
                     f"{copy.buffer}.at[pl.ds({lane}, 1)], {copy.semaphore}.at[0])")
    return builder, lane


def _window_text(emitter, window: tuple) -> list[str]:
    """The source slices of a row copy after its row: a tile's block (its blocks divide the
    dim: the plan refuses partial ones) or, for the trailing whole dims, nothing."""
    texts = [f"pl.ds({emitter.render(item.dim.begin_value)}, {item.dim.block_size})"
             if isinstance(item, TileSlice) else ":" for item in window]
    while texts and texts[-1] == ":":
        texts.pop()
    return texts


def _index_position(emitter, item, lane: str, stride: int | None, lanes: int) -> str:
    """One axis of the lane's position in the index tensor (`stride`: lanes per step of a tile)."""
    if isinstance(item, TileSlice):
        offset = lane if stride == 1 else f"{lane} // {stride}"
        if stride * item.dim.block_size < lanes:
            offset = f"{offset} % {item.dim.block_size}"  # // and % group left to right
        return f"{emitter.render(item.dim.begin_value)} + {offset}"
    if isinstance(item, ScalarIndex):
        return emitter.render(item.index)
    raise TypeError(f"a row copy's index has no {type(item).__name__} axis")
