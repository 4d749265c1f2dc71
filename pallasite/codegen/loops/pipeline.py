"""Emit an `emit_pipeline` loop: one nested Pallas pipeline per inner loop.

Streamed tensors are the pipeline's BlockSpecs (it double-buffers their
DMAs); carried values live in VMEM scratch across steps; the body reads its
step from an SMEM counter. Tiles are the user's (`begin + step * block`); the
pipeline's index maps count in blocks, which the plan allows only for loops
whose begin is a block multiple (static, or provably so: `TileDim.begin_aligned`).
"""
from __future__ import annotations

from ...ir import FullSlice, NewAxis, TileLoop, TileSlice
from ...plan import Direction
from ...plan.loops import PipelineLoopPlan
from .registry import emits


@emits(PipelineLoopPlan)
def emit_pipeline_loop(k, loop: TileLoop, loop_plan: PipelineLoopPlan, indent: int) -> list:
    from ..kernel import LoopFrame

    (dim,) = loop.dims  # the plan admits one dim here
    block = dim.block_size
    carried = k.bind_carried(loop, indent, copy=False)
    trips = k.names.fresh(f"{dim.name}_trips")
    streams = loop_plan.streams
    first = None
    if streams:  # the plan streams only loops whose begin is (provably) a block multiple
        first = k.names.fresh(f"{dim.name}_first_block")
        begin = dim.begin // block if isinstance(dim.begin, int) else f"{k.render(dim.begin)} // {block}"
        k.emit(f"{first} = {begin}", indent)
    k.emit(f"{trips} = ({k.render(dim.end)} - {k.render(dim.begin)} + {block - 1}) // {block}", indent)
    k.emit_loop_checks(loop, trips, indent)
    inputs = [s for s in streams if s.direction is Direction.IN]
    outputs = [s for s in streams if s.direction is Direction.OUT]
    names = ", ".join(s.symbol.name for s in streams)
    if not names:
        names = ("nothing (tensors stay resident: its begin may not be a block multiple)"
                 if not dim.begin_aligned else "nothing (its tensors are also used outside it)")
    k.emit(f"# inner loop '{dim.name}': emit_pipeline over {names}; carried values in VMEM scratch", indent)
    for (item, var), ref in zip(carried, loop_plan.carried_refs):
        init = k.render(item.init)
        k.emit(f"{ref}[...] = {init if item.init.shape else f'jnp.reshape({init}, (1,))'}", indent)
    k.emit(f"{loop_plan.step_ref}[0] = 0", indent)
    body_name = k.names.fresh(f"{dim.name}_body")
    k.emit(f"def {body_name}({', '.join(s.block_ref for s in (*inputs, *outputs))}):", indent)
    step = k.names.fresh(f"{dim.name}_step")
    k.frames[loop.id] = LoopFrame({dim.id: step}, traced=True, step=step)
    k.emit(f"{step} = {loop_plan.step_ref}[0]", indent + 1)
    for (item, var), ref in zip(carried, loop_plan.carried_refs):
        k.emit(f"{var} = {_read_scratch(ref, item)}", indent + 1)
    k.pipeline_depth += 1
    try:
        k.emit_loop_body(loop, indent + 1)
    finally:
        k.pipeline_depth -= 1
    results = k.carried_results(loop, carried, indent + 1)
    for (item, var), ref, result in zip(carried, loop_plan.carried_refs, results):
        k.emit(f"{ref}[...] = {result if item.init.shape else f'jnp.reshape({result}, (1,))'}", indent + 1)
    k.emit(f"{loop_plan.step_ref}[0] = {step} + 1", indent + 1)
    k.emit(f"@pl.when({trips} > 0)", indent)
    k.emit(f"def _run_{body_name}():", indent)
    k.emit("pltpu.emit_pipeline(", indent + 1)
    k.emit(f"{body_name},", indent + 2)
    k.emit(f"grid=({trips},),", indent + 2)
    k.emit(f"in_specs=[{', '.join(_pipeline_spec(k, s, dim, first) for s in inputs)}],", indent + 2)
    k.emit(f"out_specs=[{', '.join(_pipeline_spec(k, s, dim, first) for s in outputs)}],", indent + 2)
    k.emit(f")({', '.join(s.hbm_ref for s in (*inputs, *outputs))})", indent + 1)
    for (item, var), ref in zip(carried, loop_plan.carried_refs):
        k.emit(f"{var} = {_read_scratch(ref, item)}", indent)
    return carried


def _read_scratch(ref: str, item) -> str:
    return f"{ref}[...]" if item.init.shape else f"{ref}[...].reshape(())"


def _pipeline_spec(k, stream, dim, first: str) -> str:
    indices = []
    for item in stream.index:
        if isinstance(item, NewAxis):
            continue
        if isinstance(item, TileSlice) and item.dim is dim:
            indices.append(f"{first} + j")
        elif isinstance(item, TileSlice):  # a block-aligned grid tile (the strategy checked)
            indices.append(f"{k.env[item.dim.begin_value.id]} // {item.dim.block_size}")
        elif isinstance(item, FullSlice):
            indices.append("0")
    shape = ", ".join(map(str, stream.window_shape))
    shape = f"({shape},)" if len(stream.window_shape) == 1 else f"({shape})"
    index = f"({', '.join(indices)},)" if len(indices) == 1 else f"({', '.join(indices)})"
    return f"pl.BlockSpec({shape}, lambda j: {index})"
