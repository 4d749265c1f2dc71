"""`unroll`: every tensor the loop reads stays resident in VMEM through the outer BlockSpec.

A static trip count is unrolled in Python (each tile reads its run of the
resident block with `pl.ds`; a multi-dim loop is one Python `for` per dim); a
data-dependent one is a `lax.fori_loop` over the resident block (over every
dim's tiles at once for a multi-dim loop, as `fori_loop` walks them).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import TileLoop
from ..plans import LoopPlan
from .base import LoopStrategy, static_trips


@dataclass(frozen=True)
class ResidentLoopPlan(LoopPlan):
    """A loop over resident blocks; `static_trips` None means a `lax.fori_loop`."""


class Resident(LoopStrategy):
    name = "unroll"
    default_order = 0
    streams = False
    windows_from_block_multiples = False
    steps_at_run_time = False
    streams_read_write = False
    writes_partial_windows = False

    def plan_loop(self, loop: TileLoop, names: set[str], order: tuple[int, ...]) -> ResidentLoopPlan:
        return ResidentLoopPlan(self.name, static_trips(loop), order=order)


RESIDENT = Resident()
