"""Build the `KernelPlan` of a traced kernel: one `PallasCallPlan` per device loop.

Each device loop, its `outer_pipeline` loop folded into its grid first (folded_loops.py),
is planned by the passes of `CALL_PASSES`, in order, each a function
from the frozen `CallDraft` (plan/draft.py) to the draft with its decisions added:

    decide_worklist         a grid over segments flattened into work items (worklists.py)
    order_grid              the grid's axes in `loop_orders`' order
    plan_loops              looped reductions, inner-loop strategies, streamed tensors
    plan_padding            masks of partial tiles, gathers' valid lanes (masks.py)
    place_operands          memory placement: every operand, role and ref access (placement.py)
    plan_narrowing_reads    residency of narrowed blocks (subviews.py)
    plan_remote_copies      copies between devices (remote_copies.py)
    choose_grid_semantics   parallel / arbitrary per grid axis, with the reason
    split_scalar_prefetch   the kernel's parameter groups and aliases
    number_range_checks     the data-dependent ranges interpret mode checks (bounds.py)
    assemble_call           the PallasCallPlan
    budget_vmem             the VMEM estimate and limit (vmem.py)

`plan/grid_order.py` runs them again in another grid order when a revisited output
block needs its axes innermost and the user gave no order.
"""
from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping

from ..ir import Allocate, DeviceLoopCall, HostOp, HostStore, KernelIR, Load, Store, walk_nodes
from .draft import CallDraft, KernelContext
from .folded_loops import fold, folded_order, refused_fold
from .grid_order import RevisitedBlock, plan_in_order
from .bounds import scalar_dependent_arithmetic
from .host_indices import plan_host_index_checks
from .memory import collect_uses
from .narrowed_arguments import plan_narrowed_arguments
from .widened_outputs import plan_widened_outputs
from .passes import (
    assemble_call, budget_vmem, choose_grid_semantics, decide_worklist, number_range_checks, order_grid,
    plan_loops, plan_narrowing_reads, plan_padding, plan_remote_copies, split_scalar_prefetch,
)
from .placement import place_operands
from .plans import KernelPlan, PallasCallPlan, PlanTarget

CALL_PASSES = (
    decide_worklist,
    order_grid,
    plan_loops,
    plan_padding,
    place_operands,
    plan_narrowing_reads,
    plan_remote_copies,
    choose_grid_semantics,
    split_scalar_prefetch,
    number_range_checks,
    assemble_call,
    budget_vmem,
)


def build_plan(ir: KernelIR, target: PlanTarget) -> KernelPlan:
    """Plan every device loop of `ir` (traced with `target.config`'s block sizes)."""
    narrowed = plan_narrowed_arguments(ir)  # first: an int64 tensor used as data is the error to see
    widened = plan_widened_outputs(ir)
    kernel = KernelContext.of(ir, target)
    calls = []
    for written, defined, view_bases in _device_loop_calls(ir):
        call = fold(written, kernel.folded, kernel.loop_orders)  # an outer_pipeline loop's dims join the grid
        plan_with = functools.partial(plan_call, kernel, call, defined, view_bases)
        order = folded_order(written, kernel.loop_orders.get(written.loop.id), call)
        try:
            calls.append(plan_in_order(call, order, plan_with))
        except RevisitedBlock as err:
            if call is written:
                raise
            raise refused_fold(call, err) from None
    arithmetic = tuple(node for call in calls for node in scalar_dependent_arithmetic(call.call.loop.body))
    return KernelPlan(ir, tuple(calls), target, plan_host_index_checks(ir, kernel.check_ids), narrowed, widened,
                      arithmetic)


def plan_call(kernel: KernelContext, call: DeviceLoopCall, defined: frozenset[int], view_bases: Mapping,
              order: tuple[int, ...]) -> PallasCallPlan:
    """One device loop planned in grid order `order`: every pass of `CALL_PASSES`, in order."""
    draft = CallDraft(kernel, call, order, defined, view_bases)
    for planning_pass in CALL_PASSES:
        draft = planning_pass(draft)
    return draft.plan


def _device_loop_calls(ir: KernelIR) -> Iterator[tuple[DeviceLoopCall, frozenset[int], dict]]:
    """Each device loop of the host program, with the ids of the tensors holding defined
    contents when it runs (arguments, filled allocations, host op results, tensors a
    `HostStore` wrote and the tensors they view) and the host views' bases so far."""
    defined = {id(s) for s in ir.arguments if hasattr(s, "shape")}
    view_bases = {}  # id of a host view -> the tensor it views
    for step in ir.steps:
        if isinstance(step, Allocate) and step.defines_values:
            defined.add(id(step.symbol))
        elif isinstance(step, HostOp):
            results = step.result if isinstance(step.result, tuple) else (step.result,)
            defined.update(id(r) for r in results)
            if step.view_of is not None:
                view_bases[id(results[0])] = step.view_of
        elif isinstance(step, HostStore):  # the tensor, and what it views, now hold data
            symbol = step.tensor
            while symbol is not None:
                defined.add(id(symbol))
                symbol = view_bases.get(id(symbol))
        elif isinstance(step, DeviceLoopCall):
            yield step, frozenset(defined), dict(view_bases)
            for use in collect_uses(step):
                if use.stores:
                    defined.add(id(use.symbol))


__all__ = ["CALL_PASSES", "build_plan", "plan_call", "Load", "Store", "walk_nodes"]
