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
stream a window at a runtime offset. A tile with any other use (its positions, begin or end
in arithmetic, a random draw, an unmoved access, a masked or atomic access) keeps its gathers.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any, Iterator

import torch

from ..ir import GatherIndex, IfBlock, Load, Node, Store, TileDim, TileLoop, TileSlice, Value, operand_leaves, walk_bodies

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
            moved = _moved_accesses(uses, dim, defined)
            if moved is not None:
                _rebase(body, inner, dim, *moved)


def _moved_accesses(uses: "_Uses", dim: TileDim, defined: set[int]) -> tuple | None:
    """(s, the tile_index and add nodes to drop, the (access, item position) pairs) when each
    use of `dim` is an access at `s + dim.index` (or a position-free op), else None; where some
    access is moved but another use keeps the gathers, that use is recorded on the dim
    (`TileDim.kept_gathers`, which a gather's VMEM overflow names)."""
    shifts, dropped, accesses, blockers = [], [], [], []
    blockers += [_use_text(user, f"{dim.name}.begin") for user in uses.of_value(dim.begin_value)]
    for user in uses.of_dim(dim):
        if isinstance(user, TileLoop) or getattr(user, "op", None) in _POSITION_FREE or user is dim.begin_value.producer:
            continue
        if not isinstance(user, Node) or user.op != "tile_index" or isinstance(user, (Load, Store)):
            blockers.append(_use_text(user, f"an access at {dim.name} itself" if isinstance(user, (Load, Store))
                                      else f"another use of {dim.name}"))
            continue
        dropped.append(user)
        for add in uses.of_value(user.output):
            shift = _shift_of(add, user.output)
            if shift is None:
                blockers.append(_use_text(add, f"another use of {dim.name}.index"))
                continue
            shifts.append(shift)
            dropped.append(add)
            for access in uses.of_value(add.output):
                position = _plain_access_position(access, add.output)
                if position is None:
                    blockers.append(_use_text(access, "a masked, atomic or other use of the moved positions"))
                    continue
                accesses.append((access, position))
    if any(shift is not shifts[0] for shift in shifts):
        blockers.append("accesses moved by two different scalars")
    elif shifts and shifts[0].id in defined:
        blockers.append(f"the shift {shifts[0].name or ''} is computed inside the loop")
    if not accesses:
        return None
    if blockers:
        dim.kept_gathers = blockers[0]
        return None
    return shifts[0], dropped, accesses


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


def _rebase(body: list, inner: TileLoop, dim: TileDim, shift: Value, dropped: list, accesses: list) -> None:
    """Move `dim`'s range by `shift` (nodes computing its new bounds, just before `inner`),
    make the accesses tile accesses and drop the position arithmetic they no longer use."""
    at = body.index(inner)
    new_end = _scalar_add(shift, dim.end, f"{dim.name}_end", inner)
    new_begin = shift if isinstance(dim.begin, int) and dim.begin == 0 else \
        _scalar_add(shift, dim.begin, f"{dim.name}_start", inner)
    body[at:at] = [value.producer for value in (new_begin, new_end)
                   if value.producer is not None and value is not shift]
    dim.begin, dim.end, dim.moved_by = new_begin, new_end, shift
    for access, position in accesses:
        index = list(access.index)
        index[position] = TileSlice(dim)
        access.index = tuple(index)
    gone = {node.id for node in dropped}
    for loop_body in walk_bodies(inner.body):
        loop_body[:] = [item for item in loop_body if item.id not in gone]


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
