"""Which config knobs a plan used: configs that differ only in knobs their plan left
unused plan the same kernel, so the tuner scores one of them (`canonical_config`).

Decided from the plan's own records, never from generated text:
- `pallas_loop_type`: unused when the plan has no inner loop;
- `pallas_load_buffer_count`: unused when no stream's depth (`Stream.buffers`) differs
  from what the implicit 2 gives (nothing streamed, or only pipeline outputs, which
  stay double-buffered);
- `pallas_pre_broadcast`: unused when no call records a `PreBroadcast` (no operand
  qualifies, or the knob is off);
- `pallas_worklist_grouping`: unused when no call flattens a worklist;
- `pallas_flatten_worklist`: unused when no call flattens a worklist and none was
  refused only by the flag (`worklists.FLATTEN_OFF`): the structure ruled it out;
- a `loop_orders` entry: unused when at most one of its loop's dims takes more than one
  step (every order walks the same blocks in the same sequence). `canonical_config`
  resets such entries to the identity (the key goes when all are); the caller
  (`ConfigSpec.canonical`) keeps the original if the reset config does not plan.
"""
from __future__ import annotations

from ..config import KNOB_DEFAULTS, Config
from .loops import strategy_of
from .plans import KernelPlan
from .worklists import FLATTEN_OFF


def unused_knobs(plan: KernelPlan) -> frozenset[str]:
    """The config keys whose value made no difference to `plan`."""
    loops = [loop_plan for call in plan.calls for loop_plan in call.inner_loops.values()]
    unused = set()
    if not loops:
        unused.add("pallas_loop_type")
    if not any(stream.buffers != strategy_of(loop_plan).stream_buffers(stream.direction,
                                                                       KNOB_DEFAULTS["pallas_load_buffer_count"])
               for loop_plan in loops for stream in loop_plan.streams):
        unused.add("pallas_load_buffer_count")
    if not any(call.pre_broadcasts for call in plan.calls):
        unused.add("pallas_pre_broadcast")
    if not any(call.worklist is not None for call in plan.calls):
        unused.add("pallas_worklist_grouping")
        if not any(call.worklist_reason == FLATTEN_OFF for call in plan.calls):
            unused.add("pallas_flatten_worklist")
    return frozenset(unused)


def canonical_config(plan: KernelPlan, config: Config | None = None) -> Config:
    """`config` (default: the plan's) without the knobs `plan` left unused: one config per
    distinct kernel."""
    config = plan.config if config is None else config
    unused = unused_knobs(plan)
    out = {key: value for key, value in config.items() if key not in unused}
    if out.get("loop_orders"):
        orders = [list(order) for order in out["loop_orders"]]
        for i, steps in enumerate(loop_steps(plan)):
            if i < len(orders) and steps is not None and sum(n != 1 for n in steps) <= 1:
                orders[i] = list(range(len(orders[i])))
        if all(order == sorted(order) for order in orders):
            out.pop("loop_orders")
        else:
            out["loop_orders"] = orders
    return Config(out)


def loop_steps(plan: KernelPlan) -> list[tuple[int, ...] | None]:
    """Per multi-dim hl.tile loop (the `loop_orders` entries, in order): the steps each of
    its dims takes, or None when any is unknown (data-dependent)."""
    from .loops import multi_dim_loops

    out: list[tuple[int, ...] | None] = []
    for loop in multi_dim_loops(plan.ir):
        steps = None
        for call in plan.calls:
            if loop.id in call.inner_loops:
                steps = call.inner_loops[loop.id].static_trips
                break
            if call.worklist is None and all(dim.id in call.grid_axis_of for dim in loop.dims):
                found = [call.grid[call.grid_axis_of[dim.id]].num_blocks for dim in loop.dims]
                steps = tuple(found) if all(type(n) is int for n in found) else None
                break
        out.append(tuple(steps) if steps is not None else None)
    return out
