"""`fori_loop`: a `lax.fori_loop` whose tensors stay in HBM and are copied tile by tile.

Each stream gets a VMEM buffer of n windows and n DMA semaphores (n =
`Stream.buffers`, `pallas_load_buffer_count`, 2 by default): an input's copy
for step j+n-1 starts before step j computes; an output's copy of step j
starts right after its store and is waited for when its slot is reused (step
j+n) or after the loop. One builder function per stream makes each
descriptor, for its start and its wait.

A loop over several dims (`hl.tile([m, n])`) is one `lax.fori_loop` over the
product of their trip counts; each dim's tile counter is the step's digit in
mixed radix (the plan's `order`: outermost first, the last dim fastest).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import TileLoop
from ..plans import Access, LoopPlan, Scratch, ScratchKind, Stream, StreamSlot
from .base import LoopStrategy, static_trips, value_shape, window_value_axes


@dataclass(frozen=True)
class StreamedLoopPlan(LoopPlan):
    """A fori_loop streaming `streams` through double-buffered VMEM scratch."""


class StreamedFori(LoopStrategy):
    name = "fori_loop"
    default_order = 1
    streams = True
    windows_from_block_multiples = False
    steps_at_run_time = True
    streams_read_write = True
    writes_partial_windows = True

    def plan_loop(self, loop: TileLoop, names: set[str], order: tuple[int, ...]) -> StreamedLoopPlan:
        return StreamedLoopPlan(self.name, static_trips(loop), order=order)

    def stream_access(self, node, stream: Stream) -> Access:
        write_back = stream if stream.direction.writes else None
        return Access(stream.buffer, (StreamSlot(stream.loop_id),), stream.window_shape,
                      value_shape(node, stream), (), write_back, value_axes=window_value_axes(node))

    def scratch(self, loop: TileLoop, plan: LoopPlan) -> tuple[Scratch, ...]:
        scratch = []
        for stream in plan.streams:
            n = stream.buffers
            scratch.append(Scratch(stream.buffer, ScratchKind.VMEM, (n, *stream.window_shape), stream.symbol.dtype))
            scratch.append(Scratch(stream.semaphores, ScratchKind.DMA_SEMAPHORES, (n,), None))
        return tuple(scratch)


STREAMED_FORI = StreamedFori()
