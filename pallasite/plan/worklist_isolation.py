"""Isolated item stores: a flattened worklist's item axis runs `parallel`.

Items of a worklist (plan/worklists.py) write rows of a shared output. Under a
resident output block they must run in order (`arbitrary`): the block is one
buffer, written back once. When every store of an output is `out[tile_q, :, ...]`
(the q tile on the first axis, whole other axes) — or, under head grid axes
(`for seq, h in hl.grid([n, H])`), `out[tile_q, h, :]` / `out[tile_q, h1, h2, :]`
with every head grid dim indexing one axis (not the last: a lane window) and the
other axes whole — nothing
reads it in the loop, and the segments are disjoint rows (consecutive offsets),
each item can own its rows instead: the output stays in HBM (`pl.ANY`, aliased to
its initial contents), the item's tiles are stored into a VMEM scratch of
`rows_per_item` rows (without the head axes) at `tile_q.begin - start`, and when
the item ends its `extent` valid rows are copied to `out[start:start + extent]`
(at the program's heads: the strided window `out.at[rows, h, :]`) by DMA — one
copy per set bit of the extent (2^b rows at the offset of the higher bits), since
a copy's length is static. No (head, item) program writes outside its own rows
of its own heads, so the item axis is `parallel` (and the head axes too) and a
two-core chip splits them. Decreasing offsets would make rows of two items
overlap: interpret mode checks the segments end after they begin.

Anything else (an output read or accumulated in the loop, stored with another
index, overlapping ranges, a head grid axis the store does not index) keeps the
ordered `arbitrary` scheme; the `Isolation` records why.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..ir import FullSlice, IfBlock, Load, Node, ScalarIndex, Store, TileDim, TileLoop, TileSlice, TensorSymbol, Value
from ..ir import walk_loops, walk_nodes

# per axis of an output after its rows: the head grid dim whose index selects it, or None (whole)
HeadAxes = tuple["TileDim | None", ...]


@dataclass(frozen=True)
class ItemWriteBack:
    """One output whose item rows are written from a VMEM scratch by DMA."""

    symbol: TensorSymbol
    hbm_ref: str  # the output ref, in HBM (pl.ANY)
    scratch: str  # VMEM scratch of `rows` rows: the item's tiles at tile.begin - start
    semaphore: str  # its DMA semaphore
    rows: int  # rows_per_item
    bits: int  # copies: one per bit of the extent (extent <= rows)
    # per axis after the rows: the head grid dim indexing it (the window `out.at[rows, h, :]`
    # each program copies to), or None for a whole axis (also in the scratch)
    head_axes: HeadAxes = ()

    @property
    def scratch_shape(self) -> tuple[int, ...]:
        """The scratch: the item's rows by the axes no head selects."""
        rest = self.symbol.shape[1:]
        return (self.rows, *(size for size, head in zip(rest, self.head_axes) if head is None))


@dataclass(frozen=True)
class Isolation:
    """Which outputs the items write by DMA (so the item axis can be `parallel`), or why not."""

    outputs: tuple[TensorSymbol, ...] = ()
    head_axes: tuple[HeadAxes, ...] = ()  # per output: which head grid dim indexes each later axis
    reason: str = ""  # why the ordered scheme is kept ("" when isolated)


def decide_isolation(body: list, tile_dim, disjoint: bool, heads: tuple[TileDim, ...]) -> Isolation:
    """Whether every output of the loop can be written by its items' own DMAs (`heads`: the
    grid dims besides the segments, each a program's own head)."""
    if not disjoint:
        return Isolation(reason="the q ranges are not consecutive offsets, so two segments may cover one row")
    stored: dict[int, TensorSymbol] = {}
    loaded: set[int] = set()
    for node in walk_nodes(body):
        if isinstance(node, Store):
            stored[id(node.tensor)] = node.tensor
        elif isinstance(node, Load):
            loaded.add(id(node.tensor))
    if not stored:
        return Isolation(reason="the loop stores nothing")
    q_body = _q_loop_nodes(body, tile_dim)
    all_head_axes = []
    for key, symbol in stored.items():
        if not all(type(size) is int for size in symbol.shape):
            return Isolation(reason=f"'{symbol.name}' has a symbolic shape (static_shapes=False)")
        if 0 in tuple(symbol.shape):
            return Isolation(reason=f"'{symbol.name}' is empty (nothing to copy)")
        if symbol.dtype == torch.bool:
            return Isolation(reason=f"'{symbol.name}' is bool, which Mosaic copies by no DMA")
        if key in loaded:
            return Isolation(reason=f"'{symbol.name}' is read in the loop (items would see each other's rows)")
        found: set[HeadAxes] = set()
        for node in walk_nodes(body):
            if not isinstance(node, Store) or node.tensor is not symbol:
                continue
            if node.kwargs.get("atomic"):
                return Isolation(reason=f"'{symbol.name}' is accumulated atomically")
            head_axes = _rows_of_tile(node, tile_dim, heads)
            if id(node) not in q_body or head_axes is None:
                return Isolation(reason=f"'{symbol.name}' is not stored as {symbol.name}[{tile_dim.name}, :, ...] "
                                        f"{_with_heads(heads)}in the q loop")
            found.add(head_axes)
        if len(found) != 1:
            return Isolation(reason=f"'{symbol.name}' is stored at different head axes")
        (head_axes,) = found
        if head_axes and head_axes[-1] is not None:
            return Isolation(reason=f"'{symbol.name}' is indexed by a head on its last axis (each row's copy "
                                    "would be one strided lane)")
        for head in heads:
            if head not in head_axes:
                return Isolation(reason=f"'{symbol.name}' is not indexed by the head grid axis '{head.name}' (the "
                                        f"programs of every '{head.name}' would write the same rows)")
        all_head_axes.append(head_axes)
    return Isolation(outputs=tuple(stored.values()), head_axes=tuple(all_head_axes))


def _with_heads(heads: tuple[TileDim, ...]) -> str:
    if not heads:
        return ""
    return f"(or with the head grid indices {', '.join(repr(h.name) for h in heads)} on other axes) "


def _q_loop_nodes(body: list, tile_dim) -> set[int]:
    for entry in walk_loops(body):
        if tile_dim in entry.dims:
            return {id(node) for node in walk_nodes(entry.body)}
    return set()


def _rows_of_tile(node: Store, tile_dim, heads: tuple[TileDim, ...]) -> HeadAxes | None:
    """The head axes of `out[tile_q, h, :]` (the q tile first, then whole axes or head grid
    indices), or None for any other index."""
    index = tuple(node.index)
    if len(index) != len(node.tensor.shape) or not (isinstance(index[0], TileSlice) and index[0].dim is tile_dim):
        return None
    by_value = {id(head.begin_value): head for head in heads if head.begin_value is not None}
    axes = []
    for item in index[1:]:
        if isinstance(item, FullSlice):
            axes.append(None)
        elif isinstance(item, ScalarIndex) and id(item.index) in by_value:
            axes.append(by_value[id(item.index)])
        else:
            return None
    return tuple(axes)


def write_backs(isolation: Isolation, rows: int) -> tuple[ItemWriteBack, ...]:
    """The refs of each output the items write by DMA: `rows` = rows_per_item."""
    return tuple(ItemWriteBack(symbol, f"{symbol.name}_hbm", f"{symbol.name}_item_rows", f"{symbol.name}_item_sem",
                               rows, rows.bit_length(), head_axes)
                 for symbol, head_axes in zip(isolation.outputs, isolation.head_axes))


def scratch_offset(tile_begin: Value, start: Value, location):
    """The node `tile.begin - start`: a q tile's first row in its item's scratch."""
    offset = Value((), torch.int32, "item_row")
    node = Node("sub", (tile_begin, start), {"alpha": 1}, [offset], location)
    offset.producer = node
    return node
