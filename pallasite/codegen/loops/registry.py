"""The table from a strategy's plan class to its emitter."""
from __future__ import annotations

from typing import Callable

# plan class -> emit(kernel_emitter, loop, loop_plan) -> [(Carried, variable)]
EMITTERS: dict[type, Callable] = {}


def emits(plan_class: type):
    """Register the decorated function as the emitter of loops planned as `plan_class`."""
    def register(fn: Callable) -> Callable:
        EMITTERS[plan_class] = fn
        return fn
    return register
