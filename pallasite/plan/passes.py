"""The planning passes of one device loop, in the order plan/build.py runs them
(`CALL_PASSES`). Each takes the frozen `CallDraft` and returns it with its own
decisions added; memory placement, the largest, is in plan/placement.py."""
from __future__ import annotations

import dataclasses

from .. import exc
from ..ir import FoldedSteps, Load, Store
from .bounds import DataDependentRange
from .broadcasts import plan_pre_broadcasts
from .divisors import divisor_checks
from .int64_values import int64_checks
from .draft import CallDraft
from .index_expr import grid_axes
from .loops import attach_streams, loop_types, plan_inner_loops, plan_scratch, strategy_of
from .loops.streams import plan_streams
from .masks import plan_masks
from .extents import check_extents
from .memory import collect_uses
from .plans import BlockKind, GridAxis, Memory, Operand, PallasCallPlan, RangeCheck, Semantics
from .reduction_loops import plan_reduction_loops
from .remote_copies import plan_remote, remote_device_checks, remote_index_checks, remote_symbols
from .scatters import is_scatter, scatter_grid_reason, with_scatter_lanes
from .subviews import plan_subviews
from .vmem import estimate_vmem_bytes, vmem_limit_for
from .worklists import (
    WORKLISTS, check_compact_worklist, flatten_call, with_isolation, worklist_check, worklist_end_check, worklist_overlap_check,
)


def decide_worklist(draft: CallDraft) -> CallDraft:
    """A grid over segments becomes a grid over (segment, q-tile) items (plan/worklists.py)."""
    decision = WORKLISTS.decide(draft.call, draft.kernel.knobs)
    check_compact_worklist(draft.kernel, draft.call, decision)
    if decision.worklist is None:
        return dataclasses.replace(draft, worklist_reason=decision.reason)
    call, worklist = flatten_call(draft.call, decision.worklist)
    return dataclasses.replace(draft, call=call, worklist=worklist, worklist_reason=decision.reason,
                               order=tuple(range(len(call.loop.dims))))  # the worklist orders its grid


def order_grid(draft: CallDraft) -> CallDraft:
    """`loop_orders`: grid axis a walks dim order[a] (plan/grid_order.py retries other orders)."""
    grid_dims = tuple(draft.loop.dims[i] for i in draft.order)
    return dataclasses.replace(draft, grid_dims=grid_dims,
                               grid_axis_of={dim.id: axis for axis, dim in enumerate(grid_dims)})


def plan_loops(draft: CallDraft) -> CallDraft:
    """Looped reductions (`reduction_loops`), inner-loop strategies and the tensors they stream."""
    kernel, body = draft.kernel, draft.loop.body
    uses = tuple(collect_uses(draft.call))
    looped = plan_reduction_loops(kernel.ir, body, kernel.knobs.reduction_loops)
    inner_loops = plan_inner_loops(body, kernel.strategies, kernel.loop_orders)
    unstreamable = (looped.unstreamable() | remote_symbols(body)  # items' own rows: written by DMA
                    | {w.symbol.id for w in (draft.worklist.write_backs if draft.worklist else ())})
    streams = plan_streams(body, inner_loops, strategy_of, [u for u in uses if u.symbol.id not in unstreamable],
                           draft.grid_axis_of, kernel.buffer_counts, draft.defined)
    return dataclasses.replace(draft, uses=uses, looped=looped, inner_loops=attach_streams(inner_loops, streams),
                               streams=streams)


def plan_padding(draft: CallDraft) -> CallDraft:
    """Masks of partial tiles (plan/masks.py), the valid lanes of each gather's index, and
    the partial tiles' extents where they meet other axes (plan/extents.py)."""
    padded: dict = {}
    masks, carried_masks, gather_lanes = plan_masks(draft.loop.body, padded)
    agreements = check_extents(draft.loop.body, padded, draft.loop.dims)
    return dataclasses.replace(draft, masks=masks, carried_masks=carried_masks, gather_lanes=gather_lanes,
                               padded=padded, extent_agreements=agreements)


def plan_narrowing_reads(draft: CallDraft) -> CallDraft:
    """Narrowing reads (plan/subviews.py), told which storage the loop writes: a view's
    writes reach its base."""
    placement, view_bases = draft.placement, draft.view_bases

    def root_of(symbol):
        while id(symbol) in view_bases:
            symbol = view_bases[id(symbol)]
        return symbol

    taken = (placement.scratch_names | {op.ref_name for op in (*placement.inputs, *placement.outputs)}
             | {a.ref_name for a in placement.accesses.values()})
    written = {id(root_of(use.symbol)) for use in draft.uses if use.stores}
    subviews, block_copies, copy_scratch = plan_subviews(draft.loop.body, placement.accesses, draft.padded,
                                                         written, root_of, draft.looped.skipped, set(taken))
    return dataclasses.replace(draft, subviews=subviews, block_copies=block_copies, copy_scratch=copy_scratch)


def plan_remote_copies(draft: CallDraft) -> CallDraft:
    """Remote copies between devices (plan/remote_copies.py), None when there are none."""
    return dataclasses.replace(draft, remote=plan_remote(draft.kernel.ir, draft.call, draft.placement.remote_refs))


def choose_grid_semantics(draft: CallDraft) -> CallDraft:
    """Each grid axis `parallel`, or `arbitrary` with the reason; parallel axes form a prefix."""
    scattered = {use.symbol.id for use in draft.uses if any(is_scatter(node) for node in use.stores)}
    carried = _carried_across_steps(draft.loop.body)
    grid: list[GridAxis] = []
    for axis, dim in enumerate(draft.grid_dims):
        reason = (carried.get(dim.id) or _revisited_by_skipped_steps(dim, draft)
                  or _arbitrary_reason(axis, draft.placement.output_axes, scattered))
        if draft.remote is not None and not reason:
            reason = "remote copies: every device walks the grid in the same order, so steps pair up"
        if grid and grid[-1].semantics is Semantics.ARBITRARY and not reason:
            reason = "an outer axis is arbitrary (parallel axes must come first)"
        semantics = Semantics.ARBITRARY if reason else Semantics.PARALLEL
        grid.append(GridAxis(dim, draft.call.grid_blocks(dim), semantics, reason))
    worklist = draft.worklist
    if worklist is not None:
        axis = grid[worklist.item_axis]
        worklist = with_isolation(worklist, axis.semantics.value, axis.reason)
    return dataclasses.replace(draft, grid=tuple(grid), worklist=worklist)


def _carried_across_steps(body: list) -> dict[int, str]:
    """The folded dims (`outer_pipeline`) whose steps carry values in VMEM scratch, with why
    they run in sequence."""
    reasons = {}
    for item in body:
        if isinstance(item, FoldedSteps) and item.carried:
            names = ", ".join(f"'{carried.name}'" for carried in item.carried)
            reasons.update({dim.id: f"{names} carried from step to step in VMEM scratch" for dim in item.folded})
    return reasons


def _revisited_by_skipped_steps(dim, draft: CallDraft) -> str:
    """Why the axis of a folded range (`DeviceLoopCall.folded_trips`) runs in sequence when an
    output's block follows it: its steps past a program's range revisit the block before them
    (a core that ran only those would write back a block it never computed)."""
    if dim.id not in draft.call.folded_trips:
        return ""
    axis = draft.grid_axis_of[dim.id]
    names = [operand.symbol.name for operand, used in draft.placement.output_axes if axis in used]
    if not names:
        return ""
    return (f"the steps of '{dim.name}' past a program's range revisit the block of output '{names[0]}' "
            "before them")


def _arbitrary_reason(axis: int, output_axes, scattered: set[int]) -> str:
    """Why grid axis `axis` must run in sequence for the outputs ('' if it need not)."""
    for operand, used in output_axes:
        if axis not in used:
            if operand.symbol.id in scattered:
                return scatter_grid_reason(operand.symbol.name)
            if operand.memory is Memory.HBM:  # streamed: each program's inner loop writes windows of it
                return (f"every program writes windows of output '{operand.symbol.name}' that its inner loop "
                        "chooses, so the steps run in order (the last one to write a row wins)")
            return f"output '{operand.symbol.name}' keeps one block across this axis"
        chosen_by = _tables_choosing_blocks(operand, axis)
        if chosen_by:
            return (f"'{chosen_by}' chooses which block of output '{operand.symbol.name}' a program "
                    "writes, so two programs may write one block (the last one wins)")
        if any(block.repeats and axis in grid_axes(block.index) for block in operand.axes):
            return (f"the row index of output '{operand.symbol.name}' may choose one block at steps that are "
                    "not consecutive, so the steps run in order (the last one to write a block wins)")
    return ""


def _tables_choosing_blocks(operand: Operand, axis: int) -> str:
    """The table whose values pick `operand`'s block along grid axis `axis` ('' if none)."""
    for block in operand.axes:
        if block.prefetch and axis in grid_axes(block.index):
            return ", ".join(sorted(symbol.name for symbol in block.prefetch))
    return ""


def split_scalar_prefetch(draft: CallDraft) -> CallDraft:
    """The kernel's parameters in order: scalar-prefetched tables and scalars, SMEM scalars,
    inputs; aliases by position; scatters told their valid lanes."""
    placement, worklist = draft.placement, draft.worklist
    scalar_inputs = tuple(Operand(s, f"{s.name}_ref", Memory.SMEM) for s in draft.call.scalars)
    prefetch, scalar_inputs, inputs = _split_scalar_prefetch(scalar_inputs, placement.inputs, placement.outputs,
                                                             draft.loop.location)
    updates = list(placement.updates)
    if worklist is not None:
        updates = _first_items_copy_in(updates, placement.outputs, worklist, (*prefetch, *scalar_inputs, *inputs))
    all_inputs = [*prefetch, *scalar_inputs, *inputs]
    aliases = {position: placement.input_aliases[id(op)] for position, op in enumerate(all_inputs)
               if id(op) in placement.input_aliases}
    return dataclasses.replace(draft, scalar_prefetch=tuple(prefetch), scalar_inputs=tuple(scalar_inputs),
                               inputs=tuple(inputs), aliases=aliases, updates=tuple(updates),
                               accesses=with_scatter_lanes(placement.accesses, draft.gather_lanes))


def _split_scalar_prefetch(scalar_inputs, inputs, outputs, location):
    """Move the SMEM operands that BlockSpec index maps read into the scalar-prefetch group.

    With any prefetch, every runtime scalar is prefetched too (they are SMEM anyway).
    """
    needed = set()
    for op in (*inputs, *outputs):
        for axis in op.axes:
            needed |= axis.prefetch
    if not needed:
        return [], list(scalar_inputs), list(inputs)
    tables = [op for op in inputs if op.symbol in needed]
    for op in tables:
        if op.memory is not Memory.SMEM:
            raise exc.IndexingError(
                f"'{op.symbol.name}' chooses which block a BlockSpec loads, so it must be small "
                "(scalar prefetch into SMEM) and read only at scalar indices.", location)
    return [*scalar_inputs, *tables], [], [op for op in inputs if op.symbol not in needed]


def _first_items_copy_in(updates, outputs, worklist, inputs) -> list:
    """In-place updates whose block the worklist's owner table chooses copy in on the first
    item of each owner only (consecutive items of a segment revisit the block)."""
    (owner_ref,) = [op.ref_name for op in inputs if op.symbol is worklist.owner] or [None]
    chosen = {op.ref_name for op in outputs if any(worklist.owner in axis.prefetch for axis in op.axes)}
    return [dataclasses.replace(update, first_item_of_owner=owner_ref)
            if update.output_ref in chosen and owner_ref is not None else update for update in updates]


def number_range_checks(draft: CallDraft) -> CallDraft:
    """Every data-dependent range of the call, numbered in the kernel's sequence."""
    check_ids, worklist, location = draft.kernel.check_ids, draft.worklist, draft.loop.location
    body, remote = draft.loop.body, draft.remote
    # a folded range was checked against its tensors at every program when planning folded it
    ranges = [rng for rng in draft.placement.data_dependent
              if rng.dim is None or rng.dim.id not in draft.call.folded_trips]
    checks = (*_range_checks(ranges, check_ids, (*draft.inputs, *draft.placement.outputs),
                             draft.gather_lanes, draft.padded),
              *(RangeCheck(next(check_ids), 0, agreement.message, agreement.location, dim=agreement.checked_at,
                           extents=(agreement.dim, agreement.other)) for agreement in draft.extent_agreements),
              *([worklist_end_check(worklist, next(check_ids), location)] if worklist and worklist.end_checked else []),
              *([worklist_check(worklist, next(check_ids), location)] if worklist else []),
              *(remote_index_checks(body, check_ids) if remote else ()),
              *(remote_device_checks(body, check_ids) if remote else ()),
              *divisor_checks(body, check_ids, draft.padded),
              *int64_checks(body, check_ids, draft.padded),
              *([worklist_overlap_check(worklist, next(check_ids), location)]
                if worklist and draft.grid[worklist.item_axis].semantics is Semantics.PARALLEL else []))
    return dataclasses.replace(draft, range_checks=checks)


def _range_checks(ranges, check_ids, operands, gather_lanes, padded) -> tuple[RangeCheck, ...]:
    """One check per data-dependent loop (against the tightest tensor its tiles index),
    one per scalar index read from data: before its access, or on the host when an
    index map reads it (the row is chosen before the kernel body runs); one per
    gather's index vector, on its valid lanes (`gather_lanes`: a partial tile's
    padding holds no index), and one per torch.gather's index, on its valid positions
    (`padded`: the mask planner's padded axes of each value)."""
    tightest: dict[int, DataDependentRange] = {}
    checks = []
    for rng in ranges:
        if rng.dim is None:
            # a guarded access's row is checked under its `if`, in the kernel, not at every step
            block = (_table_chosen_block(rng, operands)
                     if isinstance(rng.node, (Load, Store)) and not rng.guarded else None)
            if block is not None:
                checks.append(RangeCheck(next(check_ids), rng.limit, rng.message, rng.node.location,
                                         block_index=block.chosen_row))
            else:
                indexed = not isinstance(rng.node, (Load, Store))
                checks.append(RangeCheck(next(check_ids), rng.limit, rng.message, rng.node.location,
                                         value=rng.value, node_id=rng.node.id,
                                         valid_lanes=None if indexed else gather_lanes.get(rng.node.id),
                                         lane_mask=rng.node.args[1] if isinstance(rng.node, Store)
                                         and len(rng.node.args) > 1 else None, guarded=rng.guarded,
                                         valid_axes=tuple(sorted(padded.get(rng.value.id, {}).items()))
                                         if indexed else ()))
        elif rng.dim.id not in tightest or rng.limit < tightest[rng.dim.id].limit:
            tightest[rng.dim.id] = rng
    for rng in tightest.values():
        checks.append(RangeCheck(next(check_ids), rng.limit, rng.message, rng.node.location, dim=rng.dim))
    return tuple(checks)


def _table_chosen_block(rng: DataDependentRange, operands):
    """The squeezed block axis whose index map picks `rng`'s row, if one does."""
    for op in operands:
        if op.symbol is not rng.node.tensor or op.memory is not Memory.VMEM_BLOCK:
            continue
        axes = [a for a in op.axes if a.kind is not BlockKind.UNIT]
        block = axes[rng.axis]
        if block.chosen_row is not None and block.prefetch:
            return block
    return None


def assemble_call(draft: CallDraft) -> CallDraft:
    """The `PallasCallPlan` of the decisions so far (its VMEM figures come next)."""
    ir, call, looped, body = draft.kernel.ir, draft.call, draft.looped, draft.loop.body
    plan = PallasCallPlan(
        call=call,
        kernel_name=f"{ir.name}_kernel" if len(ir.device_loops) == 1 else f"{ir.name}_kernel_{call.index}",
        grid=draft.grid, scalar_prefetch=draft.scalar_prefetch, scalar_inputs=draft.scalar_inputs,
        inputs=draft.inputs, outputs=draft.placement.outputs, aliases=draft.aliases, updates=draft.updates,
        accesses=draft.accesses, masks=draft.masks, carried_masks=draft.carried_masks,
        grid_axis_of=draft.grid_axis_of, inner_loops=draft.inner_loops,
        scratch=(*plan_scratch(body, draft.inner_loops), *draft.placement.scratch, *draft.copy_scratch,
                 *(draft.remote.scratch if draft.remote else ())),
        remote=draft.remote, vmem_bytes=0, vmem_limit_bytes=None, range_checks=draft.range_checks,
        looped_reductions=looped.finish(draft.accesses), skipped_nodes=looped.skipped,
        pre_broadcasts=plan_pre_broadcasts(body, draft.kernel.knobs.pallas_pre_broadcast, draft.masks,
                                           looped.skipped),
        subviews=draft.subviews, block_copies=draft.block_copies,
        worklist=draft.worklist, worklist_reason=draft.worklist_reason,
        dot_precision=draft.kernel.target.dot_precision,
    )
    return dataclasses.replace(draft, plan=plan)


def budget_vmem(draft: CallDraft) -> CallDraft:
    """The VMEM estimate, checked against the chip and the config's limit (plan/vmem.py)."""
    kernel, plan = draft.kernel, draft.plan
    vmem = estimate_vmem_bytes(plan)
    limit = vmem_limit_for(plan, vmem, kernel.target.vmem_capacity_bytes, kernel.knobs.vmem_limit_bytes,
                           kernel.chip_key, loop_types(copies_unaligned_windows=True))
    return dataclasses.replace(draft, plan=dataclasses.replace(plan, vmem_bytes=vmem, vmem_limit_bytes=limit))
