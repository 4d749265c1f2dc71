"""The `fori_loop` strategy: which tensors an inner loop streams from HBM by DMA.

A tensor is streamed by inner loop L when every access of it in the whole
device loop sits directly in L's body, all with one index form that walks one
of L's tile dims, and it is only read (an input stream) or only written (an
output stream). Anything else stays resident in VMEM, as with `unroll`.
"""
from __future__ import annotations

from ..ir import Load, NewAxis, ScalarIndex, Store, TileLoop, TileSlice
from .grid_exprs import NotAGridExpression, grid_expression
from .memory import TensorUse
from .plans import Access, Operand, Stream, StreamSlot


def plan_streams(body: list, strategies: dict[int, str], uses: list[TensorUse]) -> dict[int, Stream]:
    """Streams by tensor symbol id, for the inner loops whose strategy is fori_loop."""
    owner: dict[int, TileLoop] = {}
    _direct_parents(body, owner)
    streams: dict[int, Stream] = {}
    for use in uses:
        loops = {owner.get(node.id) for node in use.nodes}
        if len(loops) != 1:
            continue
        (loop,) = loops
        if loop is None or strategies.get(loop.id) != "fori_loop":
            continue
        if use.loads and use.stores:
            continue
        first = use.nodes[0].index
        if any(node.index != first for node in use.nodes):
            continue
        loop_dims = {dim.id for dim in loop.dims}
        if not any(isinstance(i, TileSlice) and i.dim.id in loop_dims for i in first):
            continue
        name = use.symbol.name
        window = tuple(_window_extent(item, size) for item, size in zip(_axes(first), use.symbol.shape)
                       if not isinstance(item, ScalarIndex))
        streams[use.symbol.id] = Stream(
            symbol=use.symbol, loop_id=loop.id, direction="out" if use.stores else "in",
            hbm_ref=f"{name}_hbm", buffer=f"{name}_buf", semaphores=f"{name}_sem",
            copy_fn=f"{name}_copy", index=first, window_shape=window,
        )
    return streams


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


def stream_operand(stream: Stream, grid_axis_of: dict[int, int]) -> tuple[Operand, frozenset[int]]:
    """The pl.ANY operand of a streamed tensor (padded so every window is in bounds)."""
    symbol = stream.symbol
    padded = []
    used: set[int] = set()
    for item, size in zip(_axes(stream.index), symbol.shape):
        if isinstance(item, TileSlice):
            dim = item.dim
            if dim.id in grid_axis_of:
                used.add(grid_axis_of[dim.id])
            padded.append(max(size, _window_end(dim, size)))
        elif isinstance(item, ScalarIndex):
            try:
                used |= grid_expression(item.index, grid_axis_of)[1]
            except NotAGridExpression:
                pass
            padded.append(size)
        else:
            padded.append(size)
    padded_shape = tuple(padded) if tuple(padded) != tuple(symbol.shape) else None
    return Operand(symbol, stream.hbm_ref, "hbm", (), padded_shape), frozenset(used)


def _window_end(dim, array_dim: int) -> int:
    """How far the last window of `dim` reaches."""
    if isinstance(dim.begin, int) and isinstance(dim.end, int):
        trips = -(-(dim.end - dim.begin) // dim.block_size)
        return dim.begin + trips * dim.block_size
    return array_dim + dim.block_size  # a data-dependent start can be anywhere in the array


def stream_access(node, stream: Stream) -> Access:
    window = stream.window_shape
    value_shape = node.outputs[0].shape if isinstance(node, Load) else window
    return Access(stream.buffer, (StreamSlot(stream.loop_id),), window, tuple(value_shape),
                  (), stream)


__all__ = ["plan_streams", "stream_operand", "stream_access", "Store"]
