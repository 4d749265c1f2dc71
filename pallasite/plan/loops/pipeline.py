"""`emit_pipeline`: `pltpu.emit_pipeline` over the loop's tiles, the streams its BlockSpecs.

Carried values live in VMEM scratch across pipeline steps and the body reads
its step from an SMEM counter. A pipeline's index maps count in blocks, so a
loop whose begin is not a block multiple runs over the block-aligned tiles
that cover [begin, end) (`retiled`), and masks clip them to the range.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import ScalarIndex, TileLoop, TileSlice
from ..plans import Access, LoopPlan, Scratch, ScratchKind, Stream
from .base import LoopStrategy, one_dim, static_trips, unique_name, value_shape
from .streams import tensor_axes


@dataclass(frozen=True)
class PipelineLoopPlan(LoopPlan):
    retiled: bool = False  # tiles are block-aligned and start below an unaligned begin
    carried_refs: tuple[str, ...] = ()  # VMEM scratch per carried value
    step_ref: str = ""  # SMEM step counter the body reads


class Pipeline(LoopStrategy):
    name = "emit_pipeline"
    streams = True
    windows_from_block_multiples = True

    def plan_loop(self, loop: TileLoop, names: set[str]) -> PipelineLoopPlan:
        one_dim(loop, self.name)
        (dim,) = loop.dims
        prefix = unique_name(dim.name, names)
        return PipelineLoopPlan(
            self.name, static_trips(loop), retiled=not dim.begin_aligned,
            carried_refs=tuple(f"{prefix}_{item.name}_ref" for item in loop.carried),
            step_ref=f"{prefix}_step_ref")

    def accepts_stream(self, index: tuple, loop_dims: set[int], grid_axis_of: dict[int, int]) -> bool:
        """Index maps count in blocks: every other tile must be a block-aligned grid tile."""
        for item in tensor_axes(index):
            if isinstance(item, ScalarIndex):
                return False
            if isinstance(item, TileSlice) and item.dim.id not in loop_dims:
                if item.dim.id not in grid_axis_of or not item.dim.begin_aligned:
                    return False
        return True

    def stream_access(self, node, stream: Stream) -> Access:
        return Access(stream.block_ref, (), stream.window_shape, value_shape(node, stream))

    def scratch(self, loop: TileLoop, plan: PipelineLoopPlan) -> tuple[Scratch, ...]:
        scratch = [Scratch(name, ScratchKind.VMEM, item.init.shape or (1,), item.init.dtype)
                   for item, name in zip(loop.carried, plan.carried_refs)]
        scratch.append(Scratch(plan.step_ref, ScratchKind.SMEM, (1,), None))
        return tuple(scratch)

    def range_lower(self, loop: TileLoop, plan: PipelineLoopPlan) -> dict[int, object]:
        (dim,) = loop.dims
        return {dim.id: dim.begin} if plan.retiled else {}


PIPELINE = Pipeline()
