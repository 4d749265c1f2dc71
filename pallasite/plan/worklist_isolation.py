"""Isolated item stores: a flattened worklist's item axis runs `parallel`.

Items of a worklist (plan/worklists.py) write rows of a shared output. Under a
resident output block they must run in order (`arbitrary`): the block is one
buffer, written back once. When every store of an output is `out[tile_q, :, ...]`
(the q tile on the first axis, whole other axes), nothing reads it in the loop,
and the segments are disjoint rows (consecutive offsets), each item can own its
rows instead: the output stays in HBM (`pl.ANY`, aliased to its initial
contents), the item's tiles are stored into a VMEM scratch of `rows_per_item`
rows at `tile_q.begin - start`, and when the item ends its `extent` valid rows
are copied to `out[start:start + extent]` by DMA — one copy per set bit of the
extent (2^b rows at the offset of the higher bits), since a copy's length is
static. No item writes outside its own rows, so the item axis is `parallel`
and a two-core chip splits the items. Decreasing offsets would make rows of two
items overlap: interpret mode checks the segments end after they begin.

Anything else (an output read or accumulated in the loop, stored with another
index, overlapping ranges, a head grid axis the store does not index) keeps the
ordered `arbitrary` scheme; the `Isolation` records why.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..ir import FullSlice, IfBlock, Load, Node, Store, TileLoop, TileSlice, TensorSymbol, Value, walk_nodes


@dataclass(frozen=True)
class ItemWriteBack:
    """One output whose item rows are written from a VMEM scratch by DMA."""

    symbol: TensorSymbol
    hbm_ref: str  # the output ref, in HBM (pl.ANY)
    scratch: str  # VMEM scratch of `rows` rows: the item's tiles at tile.begin - start
    semaphore: str  # its DMA semaphore
    rows: int  # rows_per_item
    bits: int  # copies: one per bit of the extent (extent <= rows)


@dataclass(frozen=True)
class Isolation:
    """Which outputs the items write by DMA (so the item axis can be `parallel`), or why not."""

    outputs: tuple[TensorSymbol, ...] = ()
    reason: str = ""  # why the ordered scheme is kept ("" when isolated)


def decide_isolation(body: list, tile_dim, disjoint: bool, heads: tuple[str, ...]) -> Isolation:
    """Whether every output of the loop can be written by its items' own DMAs."""
    if heads:
        return Isolation(reason="a head grid axis walks the items; items stay ordered per head")
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
    for key, symbol in stored.items():
        if not all(type(size) is int for size in symbol.shape):
            return Isolation(reason=f"'{symbol.name}' has a symbolic shape (static_shapes=False)")
        if 0 in tuple(symbol.shape):
            return Isolation(reason=f"'{symbol.name}' is empty (nothing to copy)")
        if key in loaded:
            return Isolation(reason=f"'{symbol.name}' is read in the loop (items would see each other's rows)")
        for node in walk_nodes(body):
            if not isinstance(node, Store) or node.tensor is not symbol:
                continue
            if node.kwargs.get("atomic"):
                return Isolation(reason=f"'{symbol.name}' is accumulated atomically")
            if id(node) not in q_body or not _rows_of_tile(node, tile_dim):
                return Isolation(reason=f"'{symbol.name}' is not stored as {symbol.name}[{tile_dim.name}, :, ...] "
                                        "in the q loop")
    return Isolation(outputs=tuple(stored.values()))


def _q_loop_nodes(body: list, tile_dim) -> set[int]:
    for entry in walk_loops(body):
        if tile_dim in entry.dims:
            return {id(node) for node in walk_nodes(entry.body)}
    return set()


def walk_loops(body: list):
    """Every tile loop in `body`, nested ones too."""
    for entry in body:
        if isinstance(entry, TileLoop):
            yield entry
            yield from walk_loops(entry.body)
        elif isinstance(entry, IfBlock):
            yield from walk_loops(entry.then_body)
            yield from walk_loops(entry.else_body)


def _rows_of_tile(node: Store, tile_dim) -> bool:
    index = tuple(node.index)
    return (len(index) == len(node.tensor.shape) and isinstance(index[0], TileSlice) and index[0].dim is tile_dim
            and all(isinstance(item, FullSlice) for item in index[1:]))


def write_back(symbol: TensorSymbol, rows: int) -> ItemWriteBack:
    """The refs of one output the items write by DMA: `rows` = rows_per_item."""
    return ItemWriteBack(symbol, f"{symbol.name}_hbm", f"{symbol.name}_item_rows", f"{symbol.name}_item_sem",
                         rows, rows.bit_length())


def scratch_offset(tile_begin: Value, start: Value, location):
    """The node `tile.begin - start`: a q tile's first row in its item's scratch."""
    offset = Value((), torch.int32, "item_row")
    node = Node("sub", (tile_begin, start), {"alpha": 1}, [offset], location)
    offset.producer = node
    return node
