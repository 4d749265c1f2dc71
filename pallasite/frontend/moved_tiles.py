"""`x[start + tile.index]`: a tile's positions moved by a scalar computed on the device (a
group's first row, read from offsets), Helion's grouped GEMM form

    for g in hl.grid(G):
        start = offsets[g]
        for tile_m, tile_n in hl.tile([offsets[g + 1] - start, N]):
            ... A[start + tile_m.index, tile_k] ...
            out[start + tile_m.index, tile_n] = acc

As traced, each such subscript is a gather (an index vector `start + tile_m.index`), which
reads and writes through one-hot products over the whole tensor. When every access of the
tile is moved by the same scalar, defined before its loop, the loop is the same as one over
[start, start + extent) accessed at its own tiles (`hl.tile([start, 0], [end, N])`): this
pass rebases the tile's range there and turns the accesses into tile accesses, which
stream a window at a runtime offset. Other uses of the tile's positions, begin or end (a
mask `tile_m.index < M_g - 3`, `tile_m.begin` in arithmetic, a random draw) read the moved
value minus the shift, what they were. A tile with an unmoved access (`bias[tile_m]`),
accesses moved by two scalars, or a shift computed inside its loop keeps its gathers.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any, Iterator

import torch

from ..ir import (GatherIndex, IfBlock, Load, Node, Store, TileDim, TileLoop, TileSlice, Value, operand_leaves,
                  unmoved_coordinate, walk_bodies)

# ops that may name a rebased tile: its position-free facts (shape, step, count)
_POSITION_FREE = ("full", "tile_id", "tile_count")
_NOT_OPERANDS = ("outputs", "location", "id", "op")


def rebase_moved_tiles(loop: TileLoop, jagged_dims: set[int]) -> None:
    """Rebase, in the device loop `loop`, each inner tile every access reads or writes at
    `s + tile.index` for one scalar s defined outside its loop (see the module's doc)."""
    uses = _Uses(loop)
    for body, inner in _inner_loops(loop.body):
        defined = _defined_in(inner)
        for dim in inner.dims:
            if dim.is_grid or dim.id in jagged_dims:
                continue
            move = _moved_accesses(uses, dim, defined)
            if move is not None:
                _rebase(body, inner, dim, move)


@dataclasses.dataclass
class _Move:
    """How one tile moves: its shift, the accesses that become tile accesses ((access, item
    position) pairs), the position arithmetic they no longer need, and the nodes giving the
    tile's positions, begin or end to other uses (re-expressed relative to the range's start)."""
    shift: Value
    accesses: list
    dropped: list
    relative: list


def _moved_accesses(uses: "_Uses", dim: TileDim, defined: set[int]) -> _Move | None:
    """How `dim` moves when its accesses read or write at `s + dim.index` for one scalar s and
    its other uses are arithmetic on its positions, begin or end (or position-free ops), else
    None; where some access is moved but another use keeps the gathers (an access at the tile
    itself, two shifts, a shift computed in the loop), that use is recorded on the dim
    (`TileDim.kept_gathers`, which a gather's VMEM overflow names)."""
    shifts, dropped, accesses, blockers, relative = [], [], [], [], []
    if uses.of_value(dim.begin_value):
        relative.append(dim.begin_value.producer)
    for user in uses.of_dim(dim):
        if isinstance(user, TileLoop) or getattr(user, "op", None) in _POSITION_FREE \
                or user is dim.begin_value.producer:
            continue
        if isinstance(user, Node) and not isinstance(user, (Load, Store)) and user.op == "tile_end":
            relative.append(user)
            continue
        if not isinstance(user, Node) or user.op != "tile_index" or isinstance(user, (Load, Store)):
            blockers.append(_use_text(user, f"an access at {dim.name} itself" if isinstance(user, (Load, Store))
                                      else f"another use of {dim.name}"))
            continue
        positions_used = False
        for add in uses.of_value(user.output):
            shift = _shift_of(add, user.output)
            if shift is None:  # arithmetic on the positions themselves
                positions_used = True
                continue
            shifts.append(shift)
            moved_only = True
            for access in uses.of_value(add.output):
                position = _plain_access_position(access, add.output)
                if position is None:  # a masked or other use of the moved positions: it keeps `s + index`
                    moved_only = False
                    continue
                accesses.append((access, position))
            positions_used |= not moved_only
            if moved_only:
                dropped.append(add)
        (relative if positions_used else dropped).append(user)
    if any(shift is not shifts[0] for shift in shifts):
        blockers.append("accesses moved by two different scalars")
    elif shifts and shifts[0].id in defined:
        blockers.append(f"the shift {shifts[0].name or ''} is computed inside the loop")
    if not accesses:
        return None
    if blockers:
        dim.kept_gathers = blockers[0]
        return None
    return _Move(shifts[0], accesses, dropped, relative)


def _use_text(node: Any, what: str) -> str:
    """`what` with the user's line: `another use of tile_m.index (line 22: "keep = ...")`."""
    location = getattr(node, "location", None)
    return what if location is None else f'{what} (line {location.lineno}: "{location.text.strip()}")'


def moved_tile(value: Any) -> tuple[TileDim, Any] | None:
    """(tile, s) when the device vector `value` is `s + tile.index` (either order; s an int32
    scalar Value or an int), (tile, 0) for `tile.index` itself, else None: a tile's positions,
    no two lanes alike (an atomic through them is a plain read-modify-write, `Tracer.distinct_positions`)."""
    node = value.producer if isinstance(value, Value) else None
    if node is not None and node.op == "tile_index":
        return node.args[0], 0
    if node is None or isinstance(node, (Load, Store)) or node.op != "add" or node.kwargs.get("alpha", 1) != 1 \
            or len(node.args) != 2:
        return None
    for positions, shift in (node.args, node.args[::-1]):
        inner = positions.producer if isinstance(positions, Value) else None
        scalar = type(shift) is int or isinstance(shift, Value) and shift.shape == () and shift.dtype == torch.int32
        if inner is not None and inner.op == "tile_index" and scalar:
            return inner.args[0], shift
    return None


def _shift_of(node: Any, positions: Value) -> Value | None:
    """s when `node` is `s + positions` (or `positions + s`) for an int32 scalar Value s."""
    moved = moved_tile(node.outputs[0]) if isinstance(node, Node) and len(node.outputs) == 1 else None
    if moved is None or not isinstance(moved[1], Value) or positions not in (node.args[0], node.args[1]):
        return None
    return moved[1]


def _plain_access_position(node: Any, index: Value) -> int | None:
    """The position of `index` in a plain load's or store's subscript (no lane mask, not atomic),
    where it is the whole item of its axis; else None."""
    if not isinstance(node, (Load, Store)) or node.kwargs or (isinstance(node, Load) and node.args) \
            or (isinstance(node, Store) and len(node.args) != 1) or node.op not in ("load", "store"):
        return None
    if isinstance(node, Store) and node.args[0] is index:
        return None
    positions = [i for i, item in enumerate(node.index) if isinstance(item, GatherIndex) and item.value is index]
    return positions[0] if len(positions) == 1 else None


def _rebase(body: list, inner: TileLoop, dim: TileDim, move: _Move) -> None:
    """Move `dim`'s range by the shift (nodes computing its new bounds, just before `inner`),
    make the accesses tile accesses, drop the position arithmetic they no longer use, and
    give the other uses of the tile's positions, begin and end what they were: the moved
    value minus the shift."""
    shift = move.shift
    at = body.index(inner)
    new_end = _scalar_add(shift, dim.end, f"{dim.name}_end", inner)
    new_begin = shift if isinstance(dim.begin, int) and dim.begin == 0 else \
        _scalar_add(shift, dim.begin, f"{dim.name}_start", inner)
    body[at:at] = [value.producer for value in (new_begin, new_end)
                   if value.producer is not None and value is not shift]
    dim.begin, dim.end, dim.moved_by = new_begin, new_end, shift
    for access, position in move.accesses:
        index = list(access.index)
        index[position] = TileSlice(dim)
        access.index = tuple(index)
    gone = {node.id for node in move.dropped}
    for loop_body in walk_bodies(inner.body):
        loop_body[:] = [item for item in loop_body if item.id not in gone]
    for node in move.relative:
        _unmove(inner, dim, node, shift)


def _unmove(inner: TileLoop, dim: TileDim, node: Node, shift: Value) -> None:
    """`node` (the tile's begin, positions or end) now gives the moved value, under a new name;
    its old Value, which its uses name, becomes that minus the shift (a node right after it)."""
    original = node.outputs[0]
    moved = Value(original.shape, original.dtype, f"{dim.name}_moved_{node.op.removeprefix('tile_')}")
    moved.producer, node.outputs = node, [moved]
    if dim.begin_value is original:
        dim.begin_value = moved
    original.producer = Node("sub", (moved, shift), {"alpha": 1}, [original], node.location)
    assert unmoved_coordinate(original.producer)  # what the planner recognizes it by
    for loop_body in walk_bodies(inner.body):
        at = next((i for i, item in enumerate(loop_body) if item is node), None)
        if at is not None:
            loop_body.insert(at + 1, original.producer)
            return
    raise AssertionError(f"{node.op} of {dim.name} is not in its loop")


def _scalar_add(shift: Value, operand: Any, name: str, inner: TileLoop) -> Value:
    value = Value((), torch.int32, name)
    value.producer = Node("add", (shift, operand), {"alpha": 1}, [value], inner.location)
    return value


class _Uses:
    """Who names each value and each tile dim in a device loop: nodes (their operands and
    subscripts), loops (their bounds, carried values) and ifs (conditions, merged values)."""

    def __init__(self, loop: TileLoop):
        self._values: dict[int, list] = defaultdict(list)
        self._dims: dict[int, list] = defaultdict(list)
        self._walk_loop(loop)

    def of_value(self, value: Value | None) -> list:
        return [] if value is None else self._values[value.id]

    def of_dim(self, dim: TileDim) -> list:
        return self._dims[dim.id]

    def _walk_loop(self, loop: TileLoop) -> None:
        for dim in loop.dims:
            self._dims[dim.id].append(loop)
            self._note(loop, (dim.begin, dim.end))
        self._note(loop, [(item.init, item.result) for item in loop.carried])
        self._walk_body(loop.body)

    def _walk_body(self, body: list) -> None:
        for item in body:
            if isinstance(item, TileLoop):
                self._walk_loop(item)
            elif isinstance(item, IfBlock):
                self._note(item, (item.condition, [(m.then_value, m.else_value) for m in item.outputs]))
                self._walk_body(item.then_body)
                self._walk_body(item.else_body)
            else:  # every field that may hold an operand: args, kwargs, a subscript, int64_of, a copy's refs
                fields = dataclasses.fields(item)
                self._note(item, [getattr(item, f.name) for f in fields if f.name not in _NOT_OPERANDS])

    def _note(self, user: Any, operands: Any) -> None:
        for operand in operand_leaves(operands):
            if isinstance(operand, Value):
                self._values[operand.id].append(user)
            elif isinstance(operand, TileDim):
                self._dims[operand.id].append(user)


def _inner_loops(body: list) -> Iterator[tuple[list, TileLoop]]:
    """(the body holding it, the loop) for every tile loop nested in a device loop's body."""
    for item in body:
        if isinstance(item, TileLoop):
            yield body, item
            yield from _inner_loops(item.body)
        elif isinstance(item, IfBlock):
            yield from _inner_loops(item.then_body)
            yield from _inner_loops(item.else_body)


def _defined_in(loop: TileLoop) -> set[int]:
    """The ids of the values `loop` defines: its nodes' results, carried values and merged
    values of ifs, its nested loops' included (a shift must not be one of them)."""
    ids = set()
    for body in walk_bodies([loop]):
        for item in body:
            if isinstance(item, TileLoop):
                ids |= {v.id for c in item.carried for v in (c.param, c.result, c.out) if v is not None}
            elif isinstance(item, IfBlock):
                ids |= {m.out.id for m in item.outputs}
            else:
                ids |= {v.id for v in getattr(item, "outputs", ())}
    return ids
