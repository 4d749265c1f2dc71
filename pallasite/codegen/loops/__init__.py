"""One emitter per inner-loop strategy, keyed by the strategy's plan class.

An emitter writes the loop (its counters, copies, pipeline call), records the
names it made in a `LoopFrame`, and emits the body with
`KernelEmitter.emit_loop_body`; carried values go through
`KernelEmitter.carried_results`.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

from ...plan import LoopPlan
from .registry import EMITTERS

# Every module of this package registers its emitter when imported: a new strategy's
# emitter is one new module here, with no line to add.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def emitter_for(loop_plan: LoopPlan) -> Callable:
    return EMITTERS[type(loop_plan)]
