"""`outer_pipeline`: the loop planning folded into the grid (`ir.FoldedSteps`).

Not a strategy a loop runs by (`config.LOOP_TYPES` lists those): its tiles are grid
steps, so the loop runs its body once per program. What it plans is where its carried
values live between steps: one VMEM scratch buffer each, set from the value before the
loop at the first step of each outer tile, read at every step's start and written at
its end. Every stream of its tensors is the grid's BlockSpec pipeline, none its own.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...config import FOLDED_LOOP_TYPE
from ...ir import FoldedSteps
from ..plans import LoopPlan, Scratch
from .base import LoopStrategy, carried_scratch, unique_name


@dataclass(frozen=True)
class FoldedStepsPlan(LoopPlan):
    """`static_trips`: the tiles of each folded dim (grid steps now)."""

    carried_refs: tuple[str, ...] = ()  # VMEM scratch per carried value


class FoldedGridSteps(LoopStrategy):
    name = FOLDED_LOOP_TYPE
    default_order = None
    streams = False
    windows_from_block_multiples = False
    steps_at_run_time = False  # a step is a grid step, which the cost model charges as such
    streams_read_write = False
    writes_partial_windows = False

    def plan_loop(self, loop: FoldedSteps, names: set[str], order: tuple[int, ...]) -> FoldedStepsPlan:
        prefix = unique_name("_".join(dim.name for dim in loop.folded), names)
        refs = tuple(f"{prefix}_{item.name}_ref" for item in loop.carried) if loop.folded else ()
        return FoldedStepsPlan(self.name, tuple(dim.static_trips for dim in loop.folded), order=(),
                               carried_refs=refs)

    def scratch(self, loop: FoldedSteps, plan: FoldedStepsPlan) -> tuple[Scratch, ...]:
        if not loop.folded:  # no tile: nothing is carried from step to step
            return ()
        return tuple(carried_scratch(loop, plan.carried_refs))


FOLDED_STEPS = FoldedGridSteps()
