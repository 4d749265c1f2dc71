"""Which config knobs a plan used: configs that differ only in knobs their plan left
unused plan the same kernel, so the tuner scores one of them (`canonical_config`).

Decided from the plan's own records, never from generated text:
- `pallas_loop_type`: unused when the plan has no inner loop;
- `pallas_load_buffer_count`: unused when no stream's depth (`Stream.buffers`) differs
  from what the implicit 2 gives (nothing streamed, or only pipeline outputs, which
  stay double-buffered);
- `pallas_pre_broadcast`: unused when no call records a `PreBroadcast` (no operand
  qualifies, or the knob is off);
- `pallas_worklist_grouping`: unused when no call flattens a worklist.
"""
from __future__ import annotations

from ..config import Config
from .loops import STRATEGIES
from .plans import KernelPlan

DEFAULT_BUFFER_COUNT = 2  # what a config without `pallas_load_buffer_count` means


def unused_knobs(plan: KernelPlan) -> frozenset[str]:
    """The config keys whose value made no difference to `plan`."""
    loops = [loop_plan for call in plan.calls for loop_plan in call.inner_loops.values()]
    unused = set()
    if not loops:
        unused.add("pallas_loop_type")
    if not any(stream.buffers != STRATEGIES[loop_plan.strategy].stream_buffers(stream.direction,
                                                                               DEFAULT_BUFFER_COUNT)
               for loop_plan in loops for stream in loop_plan.streams):
        unused.add("pallas_load_buffer_count")
    if not any(call.pre_broadcasts for call in plan.calls):
        unused.add("pallas_pre_broadcast")
    if not any(call.worklist is not None for call in plan.calls):
        unused.add("pallas_worklist_grouping")
    return frozenset(unused)


def canonical_config(plan: KernelPlan, config: Config | None = None) -> Config:
    """`config` (default: the plan's) without the knobs `plan` left unused: one config per
    distinct kernel."""
    config = plan.config if config is None else config
    unused = unused_knobs(plan)
    return Config({key: value for key, value in config.items() if key not in unused})
