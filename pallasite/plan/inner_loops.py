"""Inner-loop strategies: one `InnerLoopPlan` per inner tile loop, and the scratch they need."""
from __future__ import annotations

import dataclasses

from .. import exc
from ..ir import TileLoop
from .plans import InnerLoopPlan, Scratch, Stream



def plan_inner_loops(body: list, loop_type: str | None) -> dict[int, InnerLoopPlan]:
    """The strategy of every inner loop in `body` (the config's loop type, default unroll)."""
    strategy = loop_type or "unroll"
    plans: dict[int, InnerLoopPlan] = {}
    names: set[str] = set()
    for loop in _inner_loops(body):
        trips = []
        for dim in loop.dims:
            extent = dim.static_extent
            trips.append(None if extent is None else -(-extent // dim.block_size))
        static = None if any(t is None for t in trips) else tuple(trips)
        if static is None and len(loop.dims) > 1:
            raise exc.UnsupportedOperation(
                "An inner hl.tile over several dims with data-dependent bounds is not supported; "
                "write one nested loop per dim.", loop.location)
        if strategy != "unroll" and len(loop.dims) > 1:
            raise exc.UnsupportedOperation(
                f"pallas_loop_type {strategy!r} walks one dim per loop; write one nested "
                "hl.tile loop per dim.", loop.location)
        plan = InnerLoopPlan(strategy, static)
        if strategy == "emit_pipeline":
            (dim,) = loop.dims
            prefix = _unique(dim.name, names)
            aligned = not (isinstance(dim.begin, int) and dim.begin % dim.block_size == 0)
            plan = dataclasses.replace(
                plan, aligned_begin=aligned, step_ref=f"{prefix}_step_ref",
                carried_refs=tuple(f"{prefix}_{item.name}_ref" for item in loop.carried))
        plans[loop.id] = plan
    return plans


def attach_streams(plans: dict[int, InnerLoopPlan], streams: dict[int, Stream]) -> dict[int, InnerLoopPlan]:
    return {
        loop_id: dataclasses.replace(plan, streams=tuple(s for s in streams.values() if s.loop_id == loop_id))
        for loop_id, plan in plans.items()
    }


def plan_scratch(body: list, plans: dict[int, InnerLoopPlan]) -> tuple[Scratch, ...]:
    """Scratch buffers, in kernel-parameter order: per loop, its streams' DMA buffers
    and semaphores (fori_loop), or its carried values and step counter (emit_pipeline)."""
    scratch: list[Scratch] = []
    for loop in _inner_loops(body):
        plan = plans[loop.id]
        if plan.strategy == "fori_loop":
            for stream in plan.streams:
                scratch.append(Scratch(stream.buffer, "vmem", (2, *stream.window_shape), stream.symbol.dtype))
                scratch.append(Scratch(stream.semaphores, "dma_semaphores", (2,), None))
        elif plan.strategy == "emit_pipeline":
            for item, name in zip(loop.carried, plan.carried_refs):
                scratch.append(Scratch(name, "vmem", item.init.shape or (1,), item.init.dtype))
            scratch.append(Scratch(plan.step_ref, "smem", (1,), None))
    return tuple(scratch)


def retiled_dims(body: list, plans: dict[int, InnerLoopPlan]) -> frozenset[int]:
    """Dims whose tiles start below the loop's begin (emit_pipeline, unaligned begin)."""
    return frozenset(loop.dims[0].id for loop in _inner_loops(body) if plans[loop.id].aligned_begin)


def _inner_loops(body: list):
    for item in body:
        if isinstance(item, TileLoop):
            yield item
            yield from _inner_loops(item.body)
        

def _unique(base: str, used: set[str]) -> str:
    name, count = base, 1
    while name in used:
        name = f"{base}_{count}"
        count += 1
    used.add(name)
    return name
