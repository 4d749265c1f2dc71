"""Streaming strategies: which tensors an inner loop moves tile by tile from HBM.

A tensor is streamed by inner loop L (strategy fori_loop or emit_pipeline)
when every access of it in the whole device loop sits directly in L's body,
all with one index form that walks one of L's tile dims, and it is only read
(an input stream) or only written (an output stream). emit_pipeline also needs
every other tile of the index to be a block-aligned grid tile (its BlockSpec
index map counts in blocks). Anything else stays resident in VMEM, as with
`unroll`. Streamed tensors are pl.ANY operands that the host pads so every
window is in bounds.
"""
from __future__ import annotations

from ..ir import Load, NewAxis, ScalarIndex, TileLoop, TileSlice
from .grid_exprs import NotAGridExpression, grid_expression
from .memory import TensorUse
from .plans import Access, Operand, Stream, StreamSlot

STREAMING = ("fori_loop", "emit_pipeline")


def plan_streams(body: list, strategies: dict[int, str], uses: list[TensorUse],
                 grid_axis_of: dict[int, int]) -> dict[int, Stream]:
    """Streams by tensor symbol id, for the inner loops whose strategy streams."""
    owner: dict[int, TileLoop] = {}
    _direct_parents(body, owner)
    streams: dict[int, Stream] = {}
    for use in uses:
        loops = {owner.get(node.id) for node in use.nodes}
        if len(loops) != 1:
            continue
        (loop,) = loops
        if loop is None or strategies.get(loop.id) not in STREAMING:
            continue
        if use.loads and use.stores:
            continue
        first = use.nodes[0].index
        if any(node.index != first for node in use.nodes):
            continue
        loop_dims = {dim.id for dim in loop.dims}
        if not any(isinstance(i, TileSlice) and i.dim.id in loop_dims for i in first):
            continue
        if strategies[loop.id] == "emit_pipeline" and not _block_aligned(first, loop_dims, grid_axis_of):
            continue
        window = tuple(_window_extent(item, size) for item, size in zip(_axes(first), use.symbol.shape)
                       if not isinstance(item, ScalarIndex))
        streams[use.symbol.id] = Stream(use.symbol, loop.id, "out" if use.stores else "in", first, window)
    return streams


def _block_aligned(index: tuple, loop_dims: set[int], grid_axis_of: dict[int, int]) -> bool:
    for item in _axes(index):
        if isinstance(item, ScalarIndex):
            return False
        if isinstance(item, TileSlice) and item.dim.id not in loop_dims:
            dim = item.dim
            if dim.id not in grid_axis_of or not isinstance(dim.begin, int) or dim.begin % dim.block_size:
                return False
    return True


def _direct_parents(body: list, owner: dict, loop: TileLoop | None = None) -> None:
    for item in body:
        if isinstance(item, TileLoop):
            _direct_parents(item.body, owner, item)
        elif loop is not None:
            owner[item.id] = loop


def _axes(index: tuple) -> list:
    return [item for item in index if not isinstance(item, NewAxis)]


def _window_extent(item, size: int) -> int:
    return item.dim.block_size if isinstance(item, TileSlice) else size


def stream_operand(stream: Stream, grid_axis_of: dict[int, int], aligned: bool) -> tuple[Operand, frozenset[int]]:
    """The pl.ANY operand of a streamed tensor (padded so every window is in bounds)."""
    symbol = stream.symbol
    padded = []
    used: set[int] = set()
    for item, size in zip(_axes(stream.index), symbol.shape):
        if isinstance(item, TileSlice):
            dim = item.dim
            if dim.id in grid_axis_of:
                used.add(grid_axis_of[dim.id])
            padded.append(max(size, _window_end(dim, size, aligned and dim.id not in grid_axis_of)))
        elif isinstance(item, ScalarIndex):
            try:
                used |= grid_expression(item.index, grid_axis_of).axes
            except NotAGridExpression:
                pass
            padded.append(size)
        else:
            padded.append(size)
    padded_shape = tuple(padded) if tuple(padded) != tuple(symbol.shape) else None
    return Operand(symbol, stream.hbm_ref, "hbm", (), padded_shape), frozenset(used)


def _window_end(dim, array_dim: int, aligned: bool) -> int:
    """How far the last window of `dim` reaches."""
    block = dim.block_size
    if isinstance(dim.begin, int) and isinstance(dim.end, int):
        first = (dim.begin // block) * block if aligned else dim.begin
        return first + -(-(dim.end - first) // block) * block
    if aligned:  # windows start at a block multiple and end by the array's rounded-up end
        return -(-array_dim // block) * block
    return array_dim + block  # a data-dependent start can be anywhere in the array


def stream_access(node, stream: Stream, strategy: str) -> Access:
    window = stream.window_shape
    value_shape = node.outputs[0].shape if isinstance(node, Load) else window
    if strategy == "emit_pipeline":
        return Access(stream.block_ref, ("...",), window, tuple(value_shape))
    write_back = stream if stream.direction == "out" else None
    return Access(stream.buffer, (StreamSlot(stream.loop_id),), window, tuple(value_shape), (), write_back)
