"""`unroll`: every tensor the loop reads stays resident in VMEM through the outer BlockSpec.

A static trip count is unrolled in Python (each tile reads its run of the
resident block with `pl.ds`); a data-dependent one is a `lax.fori_loop` over
the resident block.
"""
from __future__ import annotations

from dataclasses import dataclass

from ... import exc
from ...ir import TileLoop
from ..plans import LoopPlan
from .base import LoopStrategy, static_trips


@dataclass(frozen=True)
class ResidentLoopPlan(LoopPlan):
    """A loop over resident blocks; `static_trips` None means a `lax.fori_loop`."""


class Resident(LoopStrategy):
    name = "unroll"
    default_order = 0

    def plan_loop(self, loop: TileLoop, names: set[str]) -> ResidentLoopPlan:
        trips = static_trips(loop)
        if trips is None and len(loop.dims) > 1:
            raise exc.UnsupportedOperation(
                "An inner hl.tile over several dims with data-dependent bounds is not supported; "
                "write one nested loop per dim.", loop.location)
        return ResidentLoopPlan(self.name, trips)


RESIDENT = Resident()
