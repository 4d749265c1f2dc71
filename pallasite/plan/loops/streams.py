"""Which tensors a streaming loop moves tile by tile from HBM, and their HBM operands.

A tensor is streamed by inner loop L (whose strategy streams) when every
access of it in the whole device loop sits directly in L's body (not under
a device `if`), all with one
index form that walks one of L's tile dims and whose scalar indices are known
before L starts (its copies are built there), it has no empty dim, and it is
not bool (Mosaic's DMA refuses bool refs; JAX passes a BlockSpec's bools as
int32 itself), and it is
only read (an input stream), only written (an output stream, which walks
every dim of a multi-dim loop, so no two steps write back one window; where its
partial last tile may end inside the tensor, along one dim other than the lane
axis, a strategy that `writes_partial_windows` writes back only the tile's rows
inside its range: `Stream.partial_dim`), or read and written at one window form where
the strategy `streams_read_write` and the tensor holds contents before the call
(`out[start + tile.index, tn] += v`: each step's window is copied in, updated in
its buffer and written back before the buffer is reused, so no later read misses
a write); the strategy may
refuse an index form (`LoopStrategy.accepts_stream`). Anything else stays resident in VMEM,
as with `unroll` (so does a gathered table: any row may be picked). Streamed tensors are pl.ANY operands that the host pads so
every window is in bounds.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from ...ir.sizes import SymbolicSize, same_size, size_max

from ...ir import (
    GatherIndex, IfBlock, NewAxis, ScalarIndex, ShiftedTile, StaticSlice, TileLoop, TileSlice, Value, cdiv, walk_nodes,
)
from ..grid_exprs import NotAGridExpression, grid_expression
from ..index_expr import grid_axes
from ..memory import TensorUse
from ..plans import Direction, LoopPlan, Memory, Operand, Stream


def plan_streams(body: list, plans: dict[int, LoopPlan], strategy_of, uses: list[TensorUse],
                 grid_axis_of: dict[int, int], buffer_counts: Mapping[int, int],
                 defined: frozenset[int] = frozenset()) -> dict[int, Stream]:
    """Streams by tensor symbol id, for the inner loops whose strategy (`strategy_of` a
    loop's plan) streams; each
    rotates through the strategy's depth for its loop's entry of `buffer_counts`
    (`pallas_load_buffer_count`, by TileLoop id: `plan/loops:buffer_counts`); `defined`: the ids
    of the tensors holding contents before the call (only such a tensor streams read and written)."""
    owner: dict[int, TileLoop] = {}
    _direct_parents(body, owner)
    streams: dict[int, Stream] = {}
    for use in uses:
        loops = {owner.get(node.id) for node in use.nodes}
        if len(loops) != 1:
            continue
        (loop,) = loops
        if loop is None:
            continue
        strategy = strategy_of(plans[loop.id])
        read_write = bool(use.loads and use.stores)
        if not strategy.streams or read_write and not (strategy.streams_read_write and id(use.symbol) in defined):
            continue
        first = use.nodes[0].index
        if any(node.index != first for node in use.nodes):
            continue
        loop_dims = {dim.id for dim in loop.dims}
        if not any(isinstance(i, TileSlice) and i.dim.id in loop_dims for i in first):
            continue
        if not strategy.accepts_stream(first, loop_dims, grid_axis_of):
            continue
        spilling = _spilling_dims(first, use.symbol.shape) if use.stores else []
        if spilling and not _writes_partial_window(strategy, first, spilling):
            continue
        if use.stores and not loop_dims <= {i.dim.id for i in first if isinstance(i, TileSlice)}:
            continue  # each step writes its window back: no two steps may share one
        if 0 in use.symbol.shape or _computed_inside(first, loop):
            continue
        if use.symbol.dtype == torch.bool:  # Mosaic copies no bool ref by DMA: resident (a BlockSpec block)
            continue
        if any(isinstance(item, GatherIndex) for item in first):  # gathered: whole in VMEM
            continue
        if any(isinstance(item, (StaticSlice, ShiftedTile)) for item in first):  # read from the resident axis
            continue
        window = tuple(item.dim.block_size if isinstance(item, TileSlice) else size
                       for item, size in zip(tensor_axes(first), use.symbol.shape)
                       if not isinstance(item, ScalarIndex))
        direction = Direction.IN_OUT if read_write else Direction.OUT if use.stores else Direction.IN
        streams[use.symbol.id] = Stream(use.symbol, loop.id, direction, first, window,
                                        strategy.stream_buffers(direction, buffer_counts[loop.id]),
                                        partial_dim=spilling[0] if spilling else None)
    return streams


def _spilling_dims(index: tuple, shape: tuple[int, ...]) -> list:
    """The tile dims whose window can pass the tile's range inside the tensor: a partial
    last tile whose range may end before the tensor does (a range read from data, or a
    static one shorter than the tensor)."""
    return [item.dim for item, size in zip(tensor_axes(index), shape)
            if isinstance(item, TileSlice) and item.dim.has_partial_tail
            and (not isinstance(item.dim.end, int) or item.dim.end < size)]


def _writes_partial_window(strategy, index: tuple, spilling: list) -> bool:
    """Whether an output whose windows pass the range along `spilling` can stream: the
    strategy writes back only a tile's rows inside its range, along one dim, which is not
    the window's last (lane) axis. Otherwise it stays resident, where stores keep the
    contents past the range."""
    if not strategy.writes_partial_windows or len(spilling) != 1:
        return False
    window = [item for item in tensor_axes(index) if not isinstance(item, ScalarIndex)]
    return not (isinstance(window[-1], TileSlice) and window[-1].dim is spilling[0])


def _computed_inside(index: tuple, loop: TileLoop) -> bool:
    """Whether a scalar index is computed in the loop's body (after its copies are built)."""
    inside = {id(output) for node in walk_nodes(loop.body) for output in getattr(node, "outputs", ())}
    return any(isinstance(item, ScalarIndex) and isinstance(item.index, Value) and id(item.index) in inside
               for item in index)


def _direct_parents(body: list, owner: dict, loop: TileLoop | None = None) -> None:
    """The loop each node sits directly in. Nodes under a device `if` have none: a window
    copied in or written back every step would be wrong for an access that may not run
    (an output window written back whole), so such tensors stay resident. A loop inside
    the `if` runs whole or not at all: its own nodes are its own."""
    for item in body:
        if isinstance(item, TileLoop):
            _direct_parents(item.body, owner, item)
        elif isinstance(item, IfBlock):
            for branch in item.bodies:
                _direct_parents(branch, owner, None)
        elif loop is not None:
            owner[item.id] = loop


def tensor_axes(index: tuple) -> list:
    """The index items that consume a tensor axis (NewAxis does not)."""
    return [item for item in index if not isinstance(item, NewAxis)]


def stream_operand(stream: Stream, grid_axis_of: dict[int, int],
                   from_block_multiples: bool) -> tuple[Operand, frozenset[int]]:
    """The pl.ANY operand of a streamed tensor (padded so every window is in bounds),
    and the grid axes its windows follow."""
    symbol = stream.symbol
    padded = []
    used: set[int] = set()
    for item, size in zip(tensor_axes(stream.index), symbol.shape):
        if isinstance(item, TileSlice):
            dim = item.dim
            if dim.id in grid_axis_of:
                used.add(grid_axis_of[dim.id])
            aligned = from_block_multiples and dim.id not in grid_axis_of
            if dim is stream.partial_dim and not stream.direction.reads:  # rows inside the range only
                padded.append(size)
                continue
            padded.append(_covering(size, _window_end(dim, size, aligned), dim))
        elif isinstance(item, ScalarIndex):
            try:
                used |= grid_axes(grid_expression(item.index, grid_axis_of))
            except NotAGridExpression:
                pass
            padded.append(size)
        else:
            padded.append(size)
    changed = any(not same_size(p, d) and (isinstance(p, SymbolicSize) or p != d)
                  for p, d in zip(padded, symbol.shape))
    padded_shape = tuple(padded) if changed else None
    return Operand(symbol, stream.hbm_ref, Memory.HBM, (), padded_shape), frozenset(used)


def _covering(size: int, window_end: int, dim) -> int:
    """The padded length of an axis: the array or the last window's end, whichever is longer.
    Windows of a loop over the whole of a dynamic size end at or past it for every size, so
    that case needs no comparison (a comparison would tie the variant to one side); other
    dynamic cases stay a `max` the host function computes."""
    if isinstance(window_end, SymbolicSize) and dim.begin == 0 and same_size(dim.end, size):
        return window_end  # pads by zero elements when the size is a whole number of blocks
    return size_max(size, window_end)


def _window_end(dim, array_dim: int, from_block_multiple: bool) -> int:
    """How far the last window of `dim` reaches."""
    block = dim.block_size
    if isinstance(dim.begin, int) and isinstance(dim.end, int):
        first = (dim.begin // block) * block if from_block_multiple else dim.begin
        return first + cdiv(dim.end - first, block) * block
    if from_block_multiple or dim.begin_aligned:
        # windows start at block multiples (the loop's range lies in the array, a checked
        # range), so they end by the array's rounded-up end; a constant begin past it (a
        # range empty at these sizes, whose loop never runs) still names one whole window
        rounded = cdiv(array_dim, block) * block
        if isinstance(dim.begin, int) and dim.begin >= rounded:
            return size_max(rounded, (dim.begin // block + 1) * block)
        return rounded
    return array_dim + block  # a data-dependent start can be anywhere in the array
