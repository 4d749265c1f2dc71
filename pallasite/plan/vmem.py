"""Estimate the VMEM working set of one pallas_call plan."""
from __future__ import annotations

from ..ir import cdiv, walk_nodes
from .plans import Memory, PallasCallPlan, ScratchKind
from .tpu_tiling import LANES, SUBLANES


def padded_bytes(shape, dtype) -> int:
    """Bytes of a VMEM buffer of `shape`, with the (8, 128) tile padding of the last two dims."""
    dims = [1 if d is None else d for d in shape] or [1]
    dims[-1] = cdiv(dims[-1], LANES) * LANES
    if len(dims) >= 2:
        dims[-2] = cdiv(dims[-2], SUBLANES) * SUBLANES
    total = dtype.itemsize
    for d in dims:
        total *= d
    return total


def estimate_vmem_bytes(plan: PallasCallPlan) -> int:
    """Double-buffered blocks of every operand, n-buffered streams, scratch, plus the
    largest live values of the body."""
    blocks = sum(
        2 * padded_bytes(op.block_shape, op.symbol.dtype)
        for op in (*plan.inputs, *plan.outputs)
        if op.memory is Memory.VMEM_BLOCK
    )
    for loop_plan in plan.inner_loops.values():
        for stream in loop_plan.streams:  # n-buffered: DMA scratch or pipeline buffers
            blocks += stream.buffers * padded_bytes(stream.window_shape, stream.symbol.dtype)
    for scratch in plan.scratch:
        if scratch.kind is ScratchKind.VMEM and not any(
                scratch.name == s.buffer for p in plan.inner_loops.values() for s in p.streams):
            blocks += padded_bytes(scratch.shape, scratch.dtype)
    # Ordered by value (`int`): with static_shapes=False the largest values are picked at the
    # traced sizes, with no guard; an estimate, not a decision about the code.
    values = sorted(  # a value only looped reductions read exists chunk by chunk, never whole
        (padded_bytes(v.shape, v.dtype) for node in walk_nodes(plan.call.loop.body)
         if node.id not in plan.skipped_nodes for v in node.outputs),
        key=int, reverse=True,
    )
    return blocks + sum(values[:3])
