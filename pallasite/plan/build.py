"""Build the `KernelPlan` of a traced kernel: one `PallasCallPlan` per device loop."""
from __future__ import annotations

import dataclasses
import itertools

from .. import exc
from ..ir import Allocate, DeviceLoopCall, HostOp, HostStore, KernelIR, Load, Store, walk_nodes
from ..ir import FullSlice, cdiv
from .broadcasts import plan_pre_broadcasts
from .reduction_loops import plan_reduction_loops
from .bounds import DataDependentRange, check_access_bounds, indexed_bounds
from .index_expr import grid_axes
from .grid_order import RevisitedBlock, plan_in_order
from .host_indices import plan_host_index_checks
from .loops import STRATEGIES, attach_streams, loop_strategies, multi_dim_loops, plan_inner_loops, plan_scratch
from .loops.streams import plan_streams, stream_operand
from .gathers import IndirectAccessMode, choose_table_lowering, gather_vmem_threshold
from .scatters import check_scattered_output, is_scatter, scatter_grid_reason, with_scatter_lanes
from .masks import plan_masks
from .subviews import plan_subviews
from .row_gathers import plan_row_gather
from .remote_copies import (check_whole_operand, plan_remote, remote_device_checks, remote_index_checks,
                            remote_symbols)
from .memory import check_block_legality, collect_uses, plan_access, plan_operand
from .plans import (
    Access, BlockKind, Direction, GridAxis, InPlaceUpdate, KernelPlan, Memory, Operand, PallasCallPlan, PlanTarget,
    RangeCheck, RefOffset, Scratch, ScratchKind, Semantics,
)
from .vmem import default_vmem_limit, estimate_vmem_bytes, overflow_advice
from .worklists import (
    WORKLISTS, flatten_call, with_isolation, worklist_check, worklist_end_check, worklist_overlap_check,
)


def build_plan(ir: KernelIR, target: PlanTarget) -> KernelPlan:
    """Plan every device loop of `ir` (traced with `target.config`'s block sizes)."""
    config = target.knobs
    vmem_capacity, vmem_limit = target.vmem_capacity_bytes, config.vmem_limit_bytes
    # `pallas_loop_type`: one strategy per inner loop (a single name: the same for all), by loop id
    strategies = loop_strategies(ir, config.pallas_loop_type)
    mode = IndirectAccessMode(config.pallas_indirect_access_mode)
    defined = {id(s) for s in ir.arguments if hasattr(s, "shape")}
    view_bases = {}  # id of a host view -> the tensor it views
    calls = []
    check_ids = itertools.count()  # range checks are numbered across the kernel's module
    # `loop_orders`: one permutation per multi-dim hl.tile loop (device or inner), by loop id
    loop_orders = {loop.id: tuple(order)
                   for loop, order in zip(multi_dim_loops(ir), config.loop_orders)}
    for step in ir.steps:
        if isinstance(step, Allocate) and step.symbol.fill is not None:
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
            plan_with = lambda order: _plan_call(  # noqa: E731
                ir, step, defined, vmem_capacity, vmem_limit, strategies, check_ids, order, loop_orders, mode,
                config, str(target.tpu.chip_version), view_bases)
            calls.append(plan_in_order(step, loop_orders.get(step.loop.id), plan_with))
            for use in collect_uses(step):
                if use.stores:
                    defined.add(id(use.symbol))
    return KernelPlan(ir, tuple(calls), target, plan_host_index_checks(ir, check_ids))


def _plan_call(ir: KernelIR, call: DeviceLoopCall, defined: set[int], vmem_capacity: int,
               vmem_limit: int | None, strategies, check_ids, order: tuple[int, ...],
               loop_orders: dict[int, tuple[int, ...]], mode: IndirectAccessMode, config,
               chip_key: str, view_bases: dict | None = None) -> PallasCallPlan:
    decision = WORKLISTS.decide(call, config)
    worklist = decision.worklist
    if worklist is not None:  # a grid over segments becomes a grid over (segment, q-tile) items
        call, worklist = flatten_call(call, worklist)
        order = tuple(range(len(call.loop.dims)))  # the worklist orders its grid: heads, then items
    loop = call.loop
    grid_dims = [loop.dims[i] for i in order]  # `loop_orders`: grid axis a walks dim order[a]
    grid_axis_of = {dim.id: axis for axis, dim in enumerate(grid_dims)}
    scalar_inputs = tuple(Operand(s, f"{s.name}_ref", Memory.SMEM) for s in call.scalars)
    inputs: list[Operand] = []
    outputs: list[Operand] = []
    updates: list[InPlaceUpdate] = []
    aliases: dict[int, int] = {}
    accesses = {}
    output_axes: list[tuple[Operand, frozenset[int]]] = []
    uses = collect_uses(call)
    looped = plan_reduction_loops(ir, loop.body, config.reduction_loops)
    inner_loops = plan_inner_loops(loop.body, strategies, loop_orders)
    unstreamable = (looped.unstreamable() | remote_symbols(loop.body)  # items' own rows: written by DMA
                    | {w.symbol.id for w in (worklist.write_backs if worklist else ())})
    remote_refs: dict[int, str] = {}
    streams = plan_streams(loop.body, inner_loops, STRATEGIES, [u for u in uses if u.symbol.id not in unstreamable],
                           grid_axis_of, config.pallas_load_buffer_count)
    inner_loops = attach_streams(inner_loops, streams)
    data_dependent: list[DataDependentRange] = []
    padded: dict = {}
    masks, carried_masks, gather_lanes = plan_masks(loop.body, padded)
    remote_ids = remote_symbols(loop.body)
    index_operands: dict = {}  # per-row DMA gathers: SMEM copies of their index tensors
    gather_scratch: list = []
    scratch_names: set[str] = set()
    for use in uses:
        for node in use.nodes:
            data_dependent += check_access_bounds(node)
        stream = streams.get(use.symbol.id)
        if stream is not None:
            _add_stream(stream, inner_loops[stream.loop_id], use, grid_axis_of, defined,
                        inputs, outputs, aliases, output_axes, accesses)
            continue
        operand, used_axes = plan_operand(use, grid_axis_of)
        operand = looped.pad_operand(operand)
        try:
            check_block_legality(operand)
        except exc.PallasiteError as err:
            raise err.with_location(use.nodes[0].location)
        if use.symbol.id in remote_ids:
            check_whole_operand(operand, use.nodes[0].location)
            remote_refs[use.symbol.id] = operand.ref_name
        check_scattered_output(operand, use.stores, vmem_capacity)
        lowering = choose_table_lowering(operand, use.nodes, mode, vmem_capacity, vmem_limit)
        if lowering is not None and lowering.row_dma:  # the table stays in HBM
            operand = Operand(use.symbol, f"{use.symbol.name}_hbm", Memory.HBM)
            inputs.append(operand)
            threshold = gather_vmem_threshold(vmem_capacity, vmem_limit)
            for node in use.loads:
                accesses[node.id], scratch = plan_row_gather(
                    node, operand, lowering.reason, index_operands, gather_lanes.get(node.id), threshold,
                    scratch_names)
                gather_scratch += scratch
            continue
        name = use.symbol.name
        written_back = {w.symbol.id: w for w in (worklist.write_backs if worklist else ())}.get(use.symbol.id)
        if written_back is not None:  # the items' rows go to HBM by DMA (plan/worklist_isolation.py)
            _add_item_write_back(written_back, worklist, use, defined, inputs, outputs, aliases, accesses,
                                 gather_scratch)
            continue
        if not use.stores:
            inputs.append(operand)
        elif not use.loads and id(use.symbol) not in defined:
            _first_visit_axes(operand, used_axes, len(loop.dims), use.nodes[0].location, use.stores,
                              reorderable=worklist is None)
            outputs.append(operand)
            output_axes.append((operand, used_axes))
        else:
            in_operand = dataclasses.replace(operand, ref_name=f"{name}_in_ref")
            aliases[id(in_operand)] = len(outputs)
            inputs.append(in_operand)
            outputs.append(operand)
            output_axes.append((operand, used_axes))
            updates.append(InPlaceUpdate(
                use.symbol, in_operand.ref_name, operand.ref_name,
                _first_visit_axes(operand, used_axes, len(loop.dims), use.nodes[0].location, use.stores,
                                  "is updated in place" if use.loads else "is written", worklist is None),
            ))
        for node in use.nodes:
            accesses[node.id] = plan_access(node, operand)
            if lowering is not None and accesses[node.id].gather is not None:
                accesses[node.id] = dataclasses.replace(accesses[node.id], gather=dataclasses.replace(
                    accesses[node.id].gather, reason=lowering.reason))
    data_dependent += indexed_bounds(loop.body)
    inputs += index_operands.values()
    taken = scratch_names | {op.ref_name for op in (*inputs, *outputs)} | {a.ref_name for a in accesses.values()}
    subviews, block_copies, copy_scratch = _plan_subviews(loop.body, uses, accesses, padded, view_bases or {},
                                                          looped.skipped, taken)
    scattered = {use.symbol.id for use in uses if any(is_scatter(node) for node in use.stores)}
    remote = plan_remote(ir, call, remote_refs)
    grid = []
    for axis, dim in enumerate(grid_dims):
        extent = dim.static_extent
        reason = ""
        for operand, used in output_axes:
            if axis not in used:
                reason = (scatter_grid_reason(operand.symbol.name) if operand.symbol.id in scattered else
                          f"output '{operand.symbol.name}' keeps one block across this axis")
                break
            chosen_by = _tables_choosing_blocks(operand, axis)
            if chosen_by:
                reason = (f"'{chosen_by}' chooses which block of output '{operand.symbol.name}' a program "
                          "writes, so two programs may write one block (the last one wins)")
                break
        if remote is not None and not reason:
            reason = "remote copies: every device walks the grid in the same order, so steps pair up"
        if grid and grid[-1].semantics is Semantics.ARBITRARY and not reason:
            reason = "an outer axis is arbitrary (parallel axes must come first)"
        semantics = Semantics.ARBITRARY if reason else Semantics.PARALLEL
        grid.append(GridAxis(dim, cdiv(extent, dim.block_size), semantics, reason))
    if worklist is not None:
        axis = grid[worklist.item_axis]
        worklist = with_isolation(worklist, axis.semantics.value, axis.reason)
    prefetch, scalar_inputs, inputs = _split_scalar_prefetch(scalar_inputs, inputs, outputs, loop.location)
    if worklist is not None:
        updates = _first_items_copy_in(updates, outputs, worklist, (*prefetch, *scalar_inputs, *inputs))
    all_inputs = [*prefetch, *scalar_inputs, *inputs]
    aliases = {position: aliases[id(op)] for position, op in enumerate(all_inputs) if id(op) in aliases}
    accesses = with_scatter_lanes(accesses, gather_lanes)
    plan = PallasCallPlan(
        call=call,
        kernel_name=f"{ir.name}_kernel" if len(ir.device_loops) == 1 else f"{ir.name}_kernel_{call.index}",
        grid=tuple(grid),
        scalar_prefetch=tuple(prefetch),
        scalar_inputs=tuple(scalar_inputs),
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        aliases=aliases,
        updates=tuple(updates),
        accesses=accesses,
        masks=masks,
        carried_masks=carried_masks,
        grid_axis_of=grid_axis_of,
        inner_loops=inner_loops,
        scratch=(*plan_scratch(loop.body, inner_loops), *gather_scratch, *copy_scratch,
                 *(remote.scratch if remote else ())),
        remote=remote,
        vmem_bytes=0,
        vmem_limit_bytes=None,
        range_checks=(*_range_checks(data_dependent, check_ids, (*inputs, *outputs), gather_lanes, padded),
                      *([worklist_end_check(worklist, next(check_ids), loop.location),
                         worklist_check(worklist, next(check_ids), loop.location)] if worklist else []),
                      *(remote_index_checks(loop.body, check_ids) if remote else ()),
                      *(remote_device_checks(loop.body, check_ids) if remote else ()),
                      *([worklist_overlap_check(worklist, next(check_ids), loop.location)]
                        if worklist and grid[worklist.item_axis].semantics is Semantics.PARALLEL else [])),
        looped_reductions=looped.finish(accesses),
        skipped_nodes=looped.skipped,
        pre_broadcasts=plan_pre_broadcasts(loop.body, config.pallas_pre_broadcast, masks,
                                           looped.skipped),
        subviews=subviews,
        block_copies=block_copies,
        worklist=worklist,
        worklist_reason=decision.reason,
    )
    vmem = estimate_vmem_bytes(plan)
    if vmem > vmem_capacity:
        raise exc.VmemOverflow(
            f"The VMEM working set of this config is estimated at {vmem / 2**20:.1f} MiB, over "
            f"the chip's {vmem_capacity / 2**20:.0f} MiB VMEM; {overflow_advice(plan)}.",
            loop.location,
        )
    limit = vmem_limit
    if limit is not None and limit > vmem_capacity:
        raise exc.VmemOverflow(
            f"vmem_limit_bytes={limit} ({limit / 2**20:.0f} MiB) is over the {vmem_capacity / 2**20:.0f} MiB "
            f"of VMEM TPU {chip_key} has; lower the limit (or leave it out: the plan sets one when needed).",
            loop.location,
        )
    if limit is not None and limit < vmem:
        raise exc.VmemOverflow(
            f"vmem_limit_bytes={limit} is below this config's estimated VMEM working set of "
            f"{vmem} bytes ({vmem / 2**20:.2f} MiB); raise the limit or use smaller block sizes.",
            loop.location,
        )
    if limit is None:
        limit = default_vmem_limit(vmem, chip_key, vmem_capacity)
    return dataclasses.replace(plan, vmem_bytes=vmem, vmem_limit_bytes=limit)


def _plan_subviews(body, uses, accesses, padded, view_bases: dict, skipped, names: set[str]):
    """Narrowing reads (plan/subviews.py), told which storage the loop writes: a view's
    writes reach its base."""
    def root_of(symbol):
        while id(symbol) in view_bases:
            symbol = view_bases[id(symbol)]
        return symbol

    written = {id(root_of(use.symbol)) for use in uses if use.stores}
    return plan_subviews(body, accesses, padded, written, root_of, skipped, names)


def _add_item_write_back(write_back, worklist, use, defined, inputs, outputs, aliases, accesses,
                         scratch) -> None:
    """An output the items write by DMA: in HBM, aliased to its initial contents when it has
    any (the rows no item writes keep them), each store into the item's scratch (its rows by
    the axes no head grid index selects: `out[tile_q, h, :]` stores a [block, D] tile)."""
    symbol = use.symbol
    operand = Operand(symbol, write_back.hbm_ref, Memory.HBM)
    if id(symbol) in defined:
        in_operand = Operand(symbol, f"{symbol.name}_in_hbm", Memory.HBM)
        aliases[id(in_operand)] = len(outputs)
        inputs.append(in_operand)
    outputs.append(operand)
    rest = write_back.scratch_shape[1:]
    offset = worklist.row_offset
    for node in use.stores:
        shape = (worklist.tile_dim.block_size, *rest)
        accesses[node.id] = Access(write_back.scratch, (RefOffset((offset,), shape[0]), *(FullSlice(),) * len(rest)),
                                   shape, shape)
    scratch.append(Scratch(write_back.scratch, ScratchKind.VMEM, write_back.scratch_shape, symbol.dtype))
    scratch.append(Scratch(write_back.semaphore, ScratchKind.DMA_SEMAPHORES, (1,), None))


def _first_items_copy_in(updates, outputs, worklist, inputs) -> list[InPlaceUpdate]:
    """In-place updates whose block the worklist's owner table chooses copy in on the first
    item of each owner only (consecutive items of a segment revisit the block)."""
    (owner_ref,) = [op.ref_name for op in inputs if op.symbol is worklist.owner] or [None]
    chosen = {op.ref_name for op in outputs if any(worklist.owner in axis.prefetch for axis in op.axes)}
    return [dataclasses.replace(update, first_item_of_owner=owner_ref)
            if update.output_ref in chosen and owner_ref is not None else update for update in updates]


def _range_checks(ranges: list[DataDependentRange], check_ids, operands,
                  gather_lanes: dict, padded: dict) -> tuple[RangeCheck, ...]:
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
            block = _table_chosen_block(rng, operands) if isinstance(rng.node, (Load, Store)) else None
            if block is not None:
                checks.append(RangeCheck(next(check_ids), rng.limit, rng.message, rng.node.location,
                                         block_index=block.index))
            else:
                indexed = not isinstance(rng.node, (Load, Store))
                checks.append(RangeCheck(next(check_ids), rng.limit, rng.message, rng.node.location,
                                         value=rng.value, node_id=rng.node.id,
                                         valid_lanes=None if indexed else gather_lanes.get(rng.node.id),
                                         valid_axes=tuple(sorted(padded.get(rng.value.id, {}).items()))
                                         if indexed else ()))
        elif rng.dim.id not in tightest or rng.limit < tightest[rng.dim.id].limit:
            tightest[rng.dim.id] = rng
    for rng in tightest.values():
        checks.append(RangeCheck(next(check_ids), rng.limit, rng.message, rng.node.location, dim=rng.dim))
    return tuple(checks)


def _tables_choosing_blocks(operand: Operand, axis: int) -> str:
    """The table whose values pick `operand`'s block along grid axis `axis` ('' if none)."""
    for block in operand.axes:
        if block.prefetch and axis in grid_axes(block.index):
            return ", ".join(sorted(symbol.name for symbol in block.prefetch))
    return ""


def _table_chosen_block(rng: DataDependentRange, operands):
    """The squeezed block axis whose index map picks `rng`'s row, if one does."""
    for op in operands:
        if op.symbol is not rng.node.tensor or op.memory is not Memory.VMEM_BLOCK:
            continue
        axes = [a for a in op.axes if a.kind is not BlockKind.UNIT]
        block = axes[rng.axis]
        if block.kind is BlockKind.SQUEEZED and block.prefetch:
            return block
    return None


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


def _add_stream(stream, loop_plan, use, grid_axis_of, defined, inputs, outputs,
                aliases, output_axes, accesses) -> None:
    """A streamed tensor is a pl.ANY operand; an output that already holds data is aliased
    (its HBM buffer is written window by window, so the rest keeps its contents)."""
    strategy = STRATEGIES[loop_plan.strategy]
    operand, used_axes = stream_operand(stream, grid_axis_of, strategy.windows_from_block_multiples)
    if stream.direction is Direction.IN:
        inputs.append(operand)
    else:
        if id(use.symbol) in defined:
            in_operand = dataclasses.replace(operand, ref_name=f"{use.symbol.name}_in_hbm")
            aliases[id(in_operand)] = len(outputs)
            inputs.append(in_operand)
        outputs.append(operand)
        output_axes.append((operand, used_axes))
    for node in use.nodes:
        accesses[node.id] = strategy.stream_access(node, stream)


def _first_visit_axes(operand: Operand, used_axes: frozenset[int], rank: int, location, stores: list,
                      how: str = "is written", reorderable: bool = True) -> tuple[int, ...]:
    """Grid axes along which a written tensor's block stays the same.

    Its block is revisited on consecutive steps only if those axes are the
    innermost ones; otherwise the block would be written back and fetched
    again between visits, racing with itself (an output's revisit would even
    start from a stale buffer and overwrite what the earlier visit wrote).
    (`stores`: the tensor's stores; `reorderable`: whether plan/grid_order.py may
    reorder the grid to fix it — a worklist orders its own.)
    """
    unused = [a for a in range(rank) if a not in used_axes]
    if unused and unused != list(range(rank - len(unused), rank)):
        name = operand.symbol.name
        whole = "".join(f" Its axis {axis} is one whole block: {block.reason}."
                        for axis, block in enumerate(operand.axes) if block.reason)
        raise RevisitedBlock(
            f"'{name}' {how} with a block that does not change along grid "
            f"axis {unused[0]}, which is not innermost, so programs would overwrite each "
            f"other's writes.{whole} Index '{name}' by every outer tile (a tile, or a row "
            "chosen by tile.id / tile.begin // block_size on a leading or second-to-last "
            "axis), or make that tile the last dimension of the loop.",
            location, operand, unused, stores, reorderable,
        )
    return tuple(unused)


__all__ = ["build_plan", "Load", "Store", "walk_nodes"]
