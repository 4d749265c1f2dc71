"""What a schedule costs, read off its plan: HBM traffic and exposed DMA waits.

Used by benchmarks and (later) the autotuner's cost model. The model:
- a BlockSpec operand's block is copied whenever its block index changes
  between consecutive grid steps (Pallas skips the copy otherwise); edge
  blocks count only their in-bounds part;
- a streamed tensor (fori_loop / emit_pipeline) copies one window per inner
  step, every time its loop runs (one read and written, two: in, then back);
  a write-back waited for at once (a stream read too, or written back in
  pieces, `Stream.partial_dim`) is an exposed wait per step;
- the host pads streamed tensors whose windows overrun them (one extra read
  and write of the padded array);
- a DMA wait is exposed (not overlapped with compute) at the start of every
  pipeline — the first block of each input — and at its end — the last
  write-back of each output. The grid's BlockSpec pipeline counts once; a
  streamed inner loop counts once per run.

Without argument values, a block index that reads a prefetched table or a
data-dependent trip count makes the traffic unknown (`None`).
`schedule_report` (`pallasite.testing`) passes `tables` (the symbols' values)
and `counts` (each call's `CallCounts`, plan/schedule.py: how often each inner
loop runs and its tiles, evaluated from the arguments), and gets the traffic
of those arguments.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..ir import FoldedSteps, IfBlock, TileLoop
from .index_expr import DataDependent, evaluate_grid, grid_axes
from .plans import BlockKind, KernelPlan, Memory, Operand, PallasCallPlan
from .schedule import CallCounts, LoopCount


@dataclass(frozen=True)
class ScheduleMetrics:
    hbm_bytes: int | None  # None when a trip count depends on data
    min_hbm_bytes: int  # each input read once, each output written once
    host_padding_bytes: int
    exposed_dma_waits: int | None
    row_gather_bytes: int | None = 0  # per-row DMA gathers: started and waited in their step


def schedule_metrics(plan: KernelPlan, tables: Mapping[Any, Any] | None = None,
                     counts: Sequence[CallCounts] | None = None, estimate: bool = False) -> ScheduleMetrics:
    """The plan's metrics; with `tables` and `counts` (one per call), those of the
    arguments they were evaluated from. `estimate` (the cost model's): a block index read
    from a table no argument holds (values an earlier loop of the kernel wrote) counts a
    whole block copied at every step where the grid indices it reads change."""
    total, minimum, padding, waits, rows = 0, 0, 0, 0, 0
    for position, call in enumerate(plan.calls):
        loops = static_loop_counts(call) if counts is None else counts[position].loops
        m = _call_metrics(call, tables, loops, estimate)
        minimum += m.min_hbm_bytes
        padding += m.host_padding_bytes
        total = None if total is None or m.hbm_bytes is None else total + m.hbm_bytes
        waits = None if waits is None or m.exposed_dma_waits is None else waits + m.exposed_dma_waits
        rows = None if rows is None or m.row_gather_bytes is None else rows + m.row_gather_bytes
    return ScheduleMetrics(total, minimum, padding, waits, rows)


def _symbol_bytes(symbol) -> int:
    """The bytes of a tensor or a scalar argument (a scalar read by an index map is prefetched)."""
    return _nbytes(getattr(symbol, "shape", ()), symbol.dtype)


def _nbytes(shape, dtype) -> int:
    count = dtype.itemsize
    for d in shape:
        count *= d
    return count


def _call_metrics(call: PallasCallPlan, tables, loops: dict[int, LoopCount | None],
                  estimate: bool = False) -> ScheduleMetrics:
    operands = [*call.scalar_prefetch, *call.inputs, *call.outputs]  # prefetched tables: one SMEM copy
    distinct = {id(op.symbol): op for op in operands}
    # the user's tensors: a worklist's item tables are the schedule's, built on the host
    internal = {id(symbol) for symbol in (call.worklist.tables if call.worklist is not None else ())}
    minimum = sum(_symbol_bytes(op.symbol) for key, op in distinct.items() if key not in internal)
    grid = tuple(axis.num_blocks for axis in call.grid)
    traffic = 0
    exposed = 0
    for op in operands:
        if op.memory is Memory.SMEM:
            traffic += _symbol_bytes(op.symbol)
        elif op.memory is Memory.VMEM_BLOCK:
            blocks = _block_traffic(op, grid, tables)
            if blocks is None and estimate:
                blocks = _estimated_block_traffic(op, grid)
            if blocks is None:
                return ScheduleMetrics(None, minimum, _host_padding(call), None, None)
            traffic += blocks
            exposed += 1
    written = _item_write_back_traffic(call, tables)
    if written is None:
        return ScheduleMetrics(None, minimum, _host_padding(call), None, None)
    traffic += written[0]
    exposed += written[1]
    padding = _host_padding(call)
    rows = _row_gather_traffic(call.call.loop.body, call, math.prod(grid), loops)
    if rows is None:
        return ScheduleMetrics(None, minimum, padding, None, None)
    traffic += rows
    for loop_id, loop_plan in call.inner_loops.items():
        if not loop_plan.streams:
            continue
        count = loops.get(loop_id)
        if count is None:
            return ScheduleMetrics(None, minimum, padding, None, None)
        for stream in loop_plan.streams:
            ways = 2 if stream.direction.reads and stream.direction.writes else 1  # copied in, then back
            traffic += ways * count.tiles * _nbytes(stream.window_shape, stream.symbol.dtype)
            waited_at_once = stream.direction.writes and (ways == 2 or stream.partial_dim is not None)
            exposed += count.busy_runs + (count.tiles if waited_at_once else 0)  # each write-back's wait
    return ScheduleMetrics(traffic, minimum, padding, exposed, rows)


def _block_traffic(op: Operand, grid: tuple[int, ...], tables=None) -> int | None:
    """Bytes copied for a BlockSpec operand over a grid of shape `grid`, steps in grid order
    (a copy per change of block index); None when a block index depends on table values."""
    steps = math.prod(grid)
    if not steps:
        return 0
    try:  # per axis, the block index at every step (numpy: grids run to millions of steps)
        indices = [evaluate_grid(axis.index, grid, tables).reshape(-1) for axis in op.axes]
    except DataDependent:
        return None
    copied = np.zeros(steps, dtype=bool)
    copied[0] = True
    for index in indices:
        copied[1:] |= index[1:] != index[:-1]
    count = np.full(steps, op.symbol.dtype.itemsize, dtype=np.int64)
    for axis, index, size in zip(op.axes, indices, op.call_shape):  # each copy's in-bounds part
        extent = 1 if axis.kind is BlockKind.SQUEEZED else axis.size
        start = index * extent
        count *= np.maximum(0, np.minimum(size, start + extent) - start)
    return int(count[copied].sum())


def _estimated_block_traffic(op: Operand, grid: tuple[int, ...]) -> int:
    """A whole block copied at every step where a grid index its block index reads changes
    (steps in grid order): the traffic when each table entry names another block."""
    steps = math.prod(grid)
    if not steps:
        return 0
    axes = frozenset().union(*(grid_axes(axis.index) for axis in op.axes))
    positions = np.indices(grid).reshape(len(grid), -1)
    copied = np.zeros(steps, dtype=bool)
    copied[0] = True
    for axis in axes:
        copied[1:] |= positions[axis][1:] != positions[axis][:-1]
    block = op.symbol.dtype.itemsize * math.prod(
        1 if axis.kind is BlockKind.SQUEEZED else min(axis.size, size) for axis, size in zip(op.axes, op.call_shape))
    return int(copied.sum()) * block


def _item_write_back_traffic(call: PallasCallPlan, tables) -> tuple[int, int] | None:
    """(bytes, waits) of a parallel worklist's write-backs (plan/worklist_isolation.py):
    each real item copies its `extent` rows of each such output to HBM and waits for it,
    once per head program (each copies its head's window: the axes no head selects);
    None without the item tables (the extents are data)."""
    worklist = call.worklist
    if worklist is None or not worklist.write_backs:
        return 0, 0
    extents = None if tables is None else tables.get(worklist.extent)
    if extents is None:
        return None
    rows = sum(int(extent) for extent in extents)
    items = sum(1 for extent in extents if extent > 0)
    heads = math.prod(axis.num_blocks for position, axis in enumerate(call.grid) if position != worklist.item_axis)
    row_bytes = sum(_nbytes(w.scratch_shape[1:], w.symbol.dtype) for w in worklist.write_backs)
    return rows * row_bytes * heads, items * len(worklist.write_backs) * heads


def _host_padding(call: PallasCallPlan) -> int:
    """Bytes the host copies to pad streamed inputs (read the array, write the padded one)."""
    return sum(
        _nbytes(op.symbol.shape, op.symbol.dtype) + _nbytes(op.padded_shape, op.symbol.dtype)
        for op in call.inputs if op.padded_shape is not None
    )


def _row_gather_traffic(body: list, call: PallasCallPlan, factor: int | None,
                        loops: dict[int, LoopCount | None]) -> int | None:
    """Bytes per-row DMA gathers copy (every lane of each index tile, an upper bound for a
    partial one) when the body runs `factor` times (an inner loop's body: its `tiles`);
    None if a count is unknown."""
    total = 0
    for item in body:
        if isinstance(item, TileLoop):
            count = loops.get(item.id)
            inner = _row_gather_traffic(item.body, call, None if count is None else count.tiles, loops)
            if inner is None:
                return None
            total += inner
            continue
        if isinstance(item, IfBlock):  # both branches: an upper bound
            for branch in (item.then_body, item.else_body):
                inner = _row_gather_traffic(branch, call, factor, loops)
                if inner is None:
                    return None
                total += inner
            continue
        access = call.accesses.get(getattr(item, "id", None))
        if access is not None and access.gather is not None and access.gather.row_copy is not None:
            if factor is None:
                return None
            total += factor * _nbytes(access.ref_shape, item.tensor.dtype)
    return total


def static_loop_counts(call: PallasCallPlan) -> dict[int, LoopCount | None]:
    """Each inner loop's runs and tiles over the call from static trip counts alone
    (None for a loop whose count, or an enclosing loop's, depends on data)."""
    programs = 1
    for axis in call.grid:
        programs *= axis.num_blocks
    counts: dict[int, LoopCount | None] = {}

    def walk(body: list, runs: int | None) -> None:
        for item in body:
            if isinstance(item, FoldedSteps):  # one step per program (steps that skip counted: a bound)
                counts[item.id] = None if runs is None else LoopCount(runs, runs, runs)
                walk(item.body, runs)
            elif isinstance(item, TileLoop):
                trips = call.inner_loops[item.id].static_trips
                tiles = None if runs is None or trips is None else runs * math.prod(trips)
                counts[item.id] = None if tiles is None else LoopCount(runs, tiles, runs if tiles else 0)
                walk(item.body, tiles)
            elif isinstance(item, IfBlock):  # whether a branch runs depends on data
                for branch in item.bodies:
                    walk(branch, None)

    walk(call.call.loop.body, programs)
    return counts
