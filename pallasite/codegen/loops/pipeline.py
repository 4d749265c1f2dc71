"""Emit an `emit_pipeline` loop: one nested Pallas pipeline per inner loop.

Streamed tensors are the pipeline's BlockSpecs (it double-buffers their
DMAs); carried values live in VMEM scratch across steps; the body reads its
step from an SMEM counter. Tiles are the user's (`begin + step * block`); the
pipeline's index maps count in blocks, which the plan allows only for loops
whose begin is a block multiple (static, or provably so: `TileDim.begin_aligned`).
A multi-dim loop's pipeline grid has one axis per dim, in the plan's order; the
body's tile counters come from its step (`steps.py`), since the pipeline walks the
last grid axis fastest.
"""
from __future__ import annotations

import contextlib

from ...ir import FullSlice, NewAxis, ScalarIndex, TileLoop, TileSlice
from ...plan import Direction
from ...plan.loops import PipelineLoopPlan
from ..frames import LoopFrame
from ..tree import Layout
from .registry import emits
from .steps import emit_counters, emit_trips, ordered_dims, read_scratch, write_scratch


@emits(PipelineLoopPlan)
def emit_pipeline_loop(k, loop: TileLoop, loop_plan: PipelineLoopPlan) -> list:
    carried = k.bind_carried(loop, copy=False)
    streams = loop_plan.streams
    dims = ordered_dims(loop, loop_plan)
    label = ", ".join(dim.name for dim in dims)
    firsts = {}
    if streams:  # the plan streams only loops whose begins are (provably) block multiples
        for dim in (dim for dim in dims if dim.begin_aligned):
            firsts[dim.id] = k.names.fresh(f"{dim.name}_first_block")
            k.emit(f"{firsts[dim.id]} = {k.render(dim.begin)} // {dim.block_size}", pure=True)
    trips = emit_trips(k, loop, loop_plan, static_literal=False)
    inputs = [s for s in streams if s.direction is Direction.IN]
    outputs = [s for s in streams if s.direction is Direction.OUT]
    names = ", ".join(s.symbol.name for s in streams)
    if not names:
        names = ("nothing (tensors stay resident: its begin may not be a block multiple)"
                 if not all(dim.begin_aligned for dim in dims) else "nothing (its tensors are also used outside it)")
    k.comment(f"inner loop '{label}': emit_pipeline over {names}; carried values in VMEM scratch")
    for (item, var), ref in zip(carried, loop_plan.carried_refs):
        write_scratch(k, ref, item, k.render(item.init))
    k.emit(f"{loop_plan.step_ref}[0] = 0")
    body_name = k.names.fresh(f"{label.replace(', ', '_')}_body")
    _emit_pipeline_body(k, loop, loop_plan, body_name, trips, carried, (*inputs, *outputs))
    grid_ids = ("j",) if len(dims) == 1 else tuple(f"j{position}" for position in range(len(dims)))
    ids = dict(zip((dim.id for dim in dims), grid_ids))
    runs = loop_plan.total_trips  # a static count runs whenever it is positive: no guard to write
    if "0" in trips.trips:  # a dim of no tile at these sizes (a pipeline's grid must be positive)
        k.comment(f"'{label}' has a dim of no tile at these sizes: the loop runs no tile")
    else:
        guard = (contextlib.nullcontext() if isinstance(runs, int) and runs > 0 else
                 k.block(f"@pl.when({trips.total} > 0)\ndef _run_{body_name}():"))
        with guard:
            call = k.emit(f"pltpu.emit_pipeline({body_name}, grid=({', '.join(trips.trips)},), "
                          f"in_specs=[{', '.join(_pipeline_spec(k, s, ids, firsts) for s in inputs)}], "
                          f"out_specs=[{', '.join(_pipeline_spec(k, s, ids, firsts) for s in outputs)}])"
                          f"({', '.join(s.hbm_ref for s in (*inputs, *outputs))})")
            call.layout[id(call.node.value.func)] = Layout(expand=True)  # one argument per line
    for (item, var), ref in zip(carried, loop_plan.carried_refs):
        k.emit(f"{var} = {read_scratch(ref, item)}")
    return carried


def _emit_pipeline_body(k, loop: TileLoop, loop_plan: PipelineLoopPlan, body_name: str, trips, carried: list,
                        streams: tuple) -> None:
    """The pipeline's body: its step from the SMEM counter, the tile counters, the loop
    body, the carried values back to scratch."""
    dims = trips.dims
    with k.block(f"def {body_name}({', '.join(s.block_ref for s in streams)}):"):
        step = k.names.fresh(f"{'_'.join(dim.name for dim in dims)}_step")
        frame = LoopFrame({}, traced=True, step=step)
        k.frames[loop.id] = frame
        k.emit(f"{step} = {loop_plan.step_ref}[0]")
        if len(dims) > 1:
            k.comment(f"the pipeline walks its grid '{dims[-1].name}' fastest; each tile's counters from the step")
        frame.counters.update(emit_counters(k, trips, step))
        for (item, var), ref in zip(carried, loop_plan.carried_refs):
            k.emit(f"{var} = {read_scratch(ref, item)}")
        k.pipeline_depth += 1
        try:
            k.emit_loop_body(loop)
        finally:
            k.pipeline_depth -= 1
        results = k.carried_results(loop, carried)
        for (item, var), ref, result in zip(carried, loop_plan.carried_refs, results):
            write_scratch(k, ref, item, result)
        k.emit(f"{loop_plan.step_ref}[0] = {step} + 1")


def _pipeline_spec(k, stream, ids: dict[int, str], firsts: dict[int, str]) -> str:
    """`ids`: the pipeline's grid index of each loop dim, by dim id. A scalar index is a
    squeezed axis whose block index is the scalar (computed before the pipeline)."""
    indices, blocks = [], []
    window = iter(stream.window_shape)
    for item in stream.index:
        if isinstance(item, NewAxis):
            continue
        if isinstance(item, ScalarIndex):
            indices.append(k.render(item.index))
            blocks.append("pl.Squeezed()")
            continue
        blocks.append(str(next(window)))
        if isinstance(item, TileSlice) and item.dim.id in ids:
            indices.append(f"{firsts[item.dim.id]} + {ids[item.dim.id]}")
        elif isinstance(item, TileSlice):  # a block-aligned grid tile (the strategy checked)
            indices.append(f"{k.render(item.dim.begin_value)} // {item.dim.block_size}")
        elif isinstance(item, FullSlice):
            indices.append("0")
        else:
            raise TypeError(f"a pipeline BlockSpec has no {type(item).__name__} axis")
    shape = f"({blocks[0]},)" if len(blocks) == 1 else f"({', '.join(blocks)})"
    index = f"({', '.join(indices)},)" if len(indices) == 1 else f"({', '.join(indices)})"
    spec = f"pl.BlockSpec({shape}, lambda {', '.join(ids.values())}: {index}"
    if stream.buffers != 2:  # `pallas_load_buffer_count`: the pipeline's buffer depth
        return f"{spec}, pipeline_mode=pl.Buffered({stream.buffers}))"
    return f"{spec})"
