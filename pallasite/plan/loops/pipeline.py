"""`emit_pipeline`: `pltpu.emit_pipeline` over the loop's tiles, the streams its BlockSpecs.

Carried values live in VMEM scratch across pipeline steps and the body reads
its step from an SMEM counter. Tiles are the user's (`begin + j * block`). A
pipeline's index maps count in blocks, so only a loop whose begin is a block
multiple streams through it; a loop with an unaligned or data-dependent begin
(`offsets[g]`) reads resident blocks with `pl.ds` at the real tile, like
`unroll` (the plan's `streams` are empty and say so in the generated code).
A loop over several dims is one pipeline over a grid of their trip counts,
in the plan's `order` (the pipeline walks the last grid axis fastest).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import TileLoop, TileSlice
from ..plans import Access, Direction, LoopPlan, Scratch, ScratchKind, Stream
from .base import LoopStrategy, carried_scratch, static_trips, unique_name, value_shape, window_value_axes
from .streams import tensor_axes


@dataclass(frozen=True)
class PipelineLoopPlan(LoopPlan):
    carried_refs: tuple[str, ...] = ()  # VMEM scratch per carried value
    step_ref: str = ""  # SMEM step counter the body reads


class Pipeline(LoopStrategy):
    name = "emit_pipeline"
    default_order = None
    streams = True
    windows_from_block_multiples = True
    steps_at_run_time = True
    streams_read_write = False
    writes_partial_windows = False

    def plan_loop(self, loop: TileLoop, names: set[str], order: tuple[int, ...]) -> PipelineLoopPlan:
        prefix = unique_name("_".join(dim.name for dim in loop.dims), names)
        return PipelineLoopPlan(
            self.name, static_trips(loop), order=order,
            carried_refs=tuple(f"{prefix}_{item.name}_ref" for item in loop.carried),
            step_ref=f"{prefix}_step_ref")

    def accepts_stream(self, index: tuple, loop_dims: set[int], grid_axis_of: dict[int, int]) -> bool:
        """Index maps count in blocks: the loop's tiles and every other tile must start at
        block multiples (the others being grid tiles). A scalar index is a squeezed axis,
        whose block index is the element index (`plan_streams` checked it is known before
        the loop starts: the index maps close over it)."""
        for item in tensor_axes(index):
            if isinstance(item, TileSlice) and not item.dim.begin_aligned:
                return False
            if isinstance(item, TileSlice) and item.dim.id not in loop_dims and item.dim.id not in grid_axis_of:
                return False
        return True

    def stream_buffers(self, direction, requested: int) -> int:
        """Inputs take any depth (`pl.Buffered(n)` on their BlockSpec); JAX's pipeline
        writes outputs back with two buffers at most, so outputs stay double-buffered."""
        return requested if direction is Direction.IN else min(requested, 2)

    def stream_access(self, node, stream: Stream) -> Access:
        return Access(stream.block_ref, (), stream.window_shape, value_shape(node, stream),
                      value_axes=window_value_axes(node))

    def scratch(self, loop: TileLoop, plan: PipelineLoopPlan) -> tuple[Scratch, ...]:
        scratch = carried_scratch(loop, plan.carried_refs)
        scratch.append(Scratch(plan.step_ref, ScratchKind.SMEM, (1,), None))
        return tuple(scratch)



PIPELINE = Pipeline()
