"""Walks over a device body: its nodes, its loops, and which nodes a device `if` guards."""
from __future__ import annotations

import dataclasses
from typing import Any, Iterator

from .nodes import IfBlock, Node, TensorSymbol, TileDim, TileLoop, Value


def walk_nodes(body: list[Node | TileLoop | IfBlock]):
    """Every node of a body, nested loops and both branches of ifs included, in program order."""
    for item in body:
        if isinstance(item, TileLoop):
            yield from walk_nodes(item.body)
        elif isinstance(item, IfBlock):
            yield from walk_nodes(item.then_body)
            yield from walk_nodes(item.else_body)
        else:
            yield item


def walk_bodies(body: list[Node | TileLoop | IfBlock]):
    """`body` and every body nested in it (loops' and both branches of ifs'), outer first: the
    lists a pass rewriting the IR edits in place."""
    yield body
    for item in body:
        if isinstance(item, TileLoop):
            yield from walk_bodies(item.body)
        elif isinstance(item, IfBlock):
            yield from walk_bodies(item.then_body)
            yield from walk_bodies(item.else_body)


def guarded_node_ids(body: list[Node | TileLoop | IfBlock], guarded: bool = False) -> set[int]:
    """The ids of the nodes of `body` that run only where a device `if` lets them (either branch,
    at any depth): an index they use may lie outside its tensor where the condition is false."""
    ids = set()
    for item in body:
        if isinstance(item, TileLoop):
            ids |= guarded_node_ids(item.body, guarded)
        elif isinstance(item, IfBlock):
            ids |= guarded_node_ids(item.then_body, True) | guarded_node_ids(item.else_body, True)
        elif guarded:
            ids.add(item.id)
    return ids


def walk_loops(body: list[Node | TileLoop | IfBlock]):
    """Every tile loop of a body, outer loops first, those under a device `if` included."""
    for item in body:
        if isinstance(item, TileLoop):
            yield item
            yield from walk_loops(item.body)
        elif isinstance(item, IfBlock):
            yield from walk_loops(item.then_body)
            yield from walk_loops(item.else_body)


def operand_leaves(item: Any) -> Iterator[Value | TileDim]:
    """The Values and tile dims an operand holds: in tuples, lists, dicts and index items (a
    subscript's `TileSlice`, `GatherIndex`, a narrowing read's `Run`, ...), not inside nodes,
    tensors or dims (a pass asking what a dim holds reads its fields)."""
    if isinstance(item, (Value, TileDim)):
        yield item
    elif isinstance(item, (tuple, list)):
        for part in item:
            yield from operand_leaves(part)
    elif isinstance(item, dict):
        yield from operand_leaves(tuple(item.values()))
    elif dataclasses.is_dataclass(item) and not isinstance(item, (type, Node, TensorSymbol)):
        yield from operand_leaves(tuple(getattr(item, field.name) for field in dataclasses.fields(item)))


def unmoved_coordinate(node: Any) -> bool:
    """Whether `node` is a moved tile's begin, positions or end minus the scalar the tile was
    moved by (frontend/moved_tiles.py): the tile's own coordinates as the user wrote them, a
    position like `tile.index`, not a value computed from the shift's tensor."""
    if not isinstance(node, Node) or node.op != "sub" or len(node.args) != 2:
        return False
    moved, shift = node.args
    producer = moved.producer if isinstance(moved, Value) else None
    return producer is not None and producer.op in ("tile_begin", "tile_index", "tile_end") \
        and isinstance(producer.args[0], TileDim) and producer.args[0].moved_by is shift
