"""One emitter per inner-loop strategy, keyed by the strategy's plan class.

An emitter writes the loop (its counters, copies, pipeline call), records the
names it made in a `LoopFrame`, and emits the body with
`KernelEmitter.emit_loop_body`; carried values go through
`KernelEmitter.carried_results`.
"""
from __future__ import annotations

from typing import Callable

from ...plan import LoopPlan
from . import pipeline, resident, streamed  # noqa: F401 - each registers its emitter
from .registry import EMITTERS


def emitter_for(loop_plan: LoopPlan) -> Callable:
    return EMITTERS[type(loop_plan)]
