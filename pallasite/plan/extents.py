"""Torch's shape agreement on partial tiles: an axis a tile sizes meets an axis it does not.

Device values carry their block sizes as shapes (`x[tm, tn]` is `[bm, bn]` on every tile),
so two axes of one block size look alike to shape checks. In eager PyTorch the last tile
of a dim the block does not divide is shorter, and reference mode runs it so: storing
`x[tm, tn]` (100 wide on the last tile) into `out[tm, :]` (128 wide) raises there.
Compiled, the block's padded tail would be stored as if it were data.

The mask planner knows which axes of every value hold a partial tile's padding and whose
(`padded`, plan/masks.py). Checked here:
- a store of an axis padded by a tile's range into a target axis sized otherwise (a fixed
  number of positions, or another tile);
- an elementwise op over two axes padded by different tiles' ranges (one range per axis,
  all a mask knows, cannot say which lanes hold data), and a matmul contracting them;
- a tile's axis beside (or stored into by) an axis a load's ':' or static slice sizes
  (`x[tm, :64] + y[tm, tn]`): a fixed part of a tensor (`FixedAxes`).
Where both ranges are static, or computed from the device loop's tiles (`hl.tile(0,
tm.end + 16)`: evaluated at every program, as folded loops are), the tiles' extents are
known: at every program they must all be one and the same (two tiles of one range of a
single tile are), else `ShapeMismatch` at the user's line. Where a range comes from data
(`hl.tile(start, end)` of offsets read from a tensor) they are an `ExtentAgreement`:
interpret mode checks at run time, where the inner of the loops the data bounds starts,
that each range's tiles have one extent and the two agree (`RangeChecks.extents`), as a
data-dependent bound is checked.
A value of the block's size beside, or stored into, a partial tile is cut to the tile's
extent, in reference mode too (`reference/extents.py`): not refused. A scatter's target
axis is its index vector's lanes (`out[idx[ta]] = x[tb]` compares ta with tb); a merged
axis (`MergedPadding`) is not compared.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir import (
    FullSlice, GatherIndex, IfBlock, Load, NewAxis, ScalarIndex, ShiftedTile, StaticSlice, Store, TileDim, TileLoop,
    TileSlice, Value, ops, walk_nodes,
)
from ..ir.ops import OpKind
from .. import exc
from .access_plans import MergedPadding, TileRange
from .grid_exprs import NotAGridExpression, grid_expression
from .index_expr import DataDependent, evaluate_grid


@dataclass(frozen=True)
class ExtentAgreement:
    """Tiles of `dim` (a range read from data) meet `other` — another tile dim, or a fixed
    number of positions — on one axis: interpret mode checks where `checked_at`'s loop
    starts that every tile of both has the same extent (number_range_checks makes it a
    `RangeCheck`, codegen a `CHECKS.extents` call)."""

    dim: TileDim
    other: Any  # TileDim | int
    checked_at: TileDim  # the inner loop whose range the data decides: both are known where it starts
    message: str
    location: Any


def check_extents(body: list, padded: dict, grid_dims: tuple = ()) -> tuple[ExtentAgreement, ...]:
    """Raise `ShapeMismatch` where a stored value's partial tile meets a target axis sized
    otherwise, or an elementwise op meets two partial tiles' ranges on one axis, and the
    ranges show the extents differ (`padded`: value id -> axis -> range, from plan_masks;
    `grid_dims`: the device loop's, whose programs a range may be computed from); the
    agreements only the data decides, to check at run time."""
    depth = _loop_depths(body)
    grid, fixed = _Grid(grid_dims), FixedAxes(padded)
    found: dict = {}
    for node in walk_nodes(body):
        if isinstance(node, Store):
            pairs = _store_pairs(node, padded, fixed)
        elif node.op in ops.OPS and ops.OPS[node.op].kind is OpKind.ELEMENTWISE:
            pairs = _elementwise_pairs(node, padded, fixed)
        elif node.op in ops.OPS and ops.OPS[node.op].kind is OpKind.CONTRACTION:
            pairs = _contraction_pairs(node, ops.OPS[node.op].contraction, padded)
        else:
            continue
        for rng, other, text in pairs:
            agreement = _agreement(rng.dim, other, grid, depth, node, text)
            if agreement is not None:
                found.setdefault((agreement.dim.id, getattr(other, "id", other)), agreement)
    return tuple(found.values())


class _Grid:
    """The device loop's programs, at which a range computed from its tiles is evaluated."""

    def __init__(self, dims: tuple) -> None:
        static = [dim for dim in dims if isinstance(dim.static_trips, int)]
        self.axes = {dim.id: axis for axis, dim in enumerate(static)}
        self.shape = tuple(dim.static_trips for dim in static)

    def lengths(self, dim: TileDim) -> np.ndarray | None:
        """The length of `dim`'s range at every program (None: the data decides it)."""
        if isinstance(dim.static_extent, int):
            return np.asarray(dim.static_extent)
        try:
            begin, end = (evaluate_grid(grid_expression(bound, self.axes), self.shape)
                          for bound in (dim.begin, dim.end))
        except (NotAGridExpression, DataDependent):
            return None
        return end - begin


def _loop_depths(body: list, depth: int = 1) -> dict[int, int]:
    """Each inner loop dim's nesting depth (a dim of the device loop's grid has none)."""
    depths: dict[int, int] = {}
    for node in body:
        if isinstance(node, TileLoop):
            depths.update({dim.id: depth for dim in node.dims})
            depths.update(_loop_depths(node.body, depth + 1))
        elif isinstance(node, IfBlock):
            for branch in node.bodies:
                depths.update(_loop_depths(branch, depth))
    return depths


def _agreement(dim: TileDim, other, grid: _Grid, depth: dict, node, text: str) -> ExtentAgreement | None:
    """None where the extents agree at every program; `ShapeMismatch` where the ranges, static
    or computed from the grid's tiles, show they differ; else the agreement to check."""
    mine = grid.lengths(dim)
    theirs = grid.lengths(other) if isinstance(other, TileDim) else np.asarray(other)
    if mine is not None and theirs is not None:
        if np.all(extents_agree(mine, dim.block_size, theirs,
                                other.block_size if isinstance(other, TileDim) else other)):
            return None
        raise exc.ShapeMismatch(f"{text}. {_CONSEQUENCE}", node.location)
    # where the inner of the ranges the data decides starts, both are known (a static one anywhere)
    unknown = [d for d in (dim, other) if isinstance(d, TileDim) and grid.lengths(d) is None]
    inner = max(unknown, key=lambda d: depth.get(d.id, 0))
    if depth.get(inner.id, 0) == 0:
        return None  # a grid dim: its programs' ranges are not checked at run time
    message = (f"{text}; the ranges hold {{lo}} and {{hi}} positions, and some of their tiles' extents differ "
               f"(eager PyTorch raises there). {_REMEDY}")
    return ExtentAgreement(dim, other, inner, message, node.location)


def extents_agree(length_a, block_a: int, length_b, block_b: int) -> np.ndarray:
    """Whether every tile of a range of `length_a` positions in blocks of `block_a` has the
    extent of every tile of one of `length_b` in `block_b` (a range of no tile agrees with
    anything). Lengths are ints or arrays (one per program); planning and interpret mode's
    run-time check (runtime/checks.py:RangeChecks.extents) both decide by it."""
    length_a, length_b = np.asarray(length_a), np.asarray(length_b)
    one_a, one_b = _one_extent(length_a, block_a), _one_extent(length_b, block_b)
    return (length_a <= 0) | (length_b <= 0) | ((one_a > 0) & (one_a == one_b))


def _one_extent(length: np.ndarray, block: int) -> np.ndarray:
    """The one extent every tile of a range of `length` positions has, or -1 where its tiles
    are a full block and a shorter last one."""
    return np.where(length % block == 0, block, np.where(length < block, length, -1))


def _store_pairs(node: Store, padded: dict, fixed: FixedAxes) -> list:
    value = node.args[0] if node.args else None
    if not isinstance(value, Value) or not value.shape:
        return []
    target = [_target_range(item, padded) for item in node.index if not isinstance(item, ScalarIndex)]
    if len(value.shape) > len(target):
        return []  # a shape error the frontend reports
    target = target[len(target) - len(value.shape):]
    pads, pairs = padded.get(value.id, {}), []
    where = f"{node.tensor.name}[...] = ..." if node.tensor is not None else "the store"
    for axis, size in enumerate(value.shape):
        expected, rng = target[axis], pads.get(axis)
        if isinstance(expected, TileRange) and rng is None and axis in fixed(value) and size != 1:
            # a fixed part of a tensor into a partial tile: its short tile is narrower
            pairs.append((expected, size, f"{where}: axis {axis} of the stored value is a fixed number of "
                                          f"positions read by a slice, the target's is {_what(expected)}"))
            continue
        if size == 1 or expected is _UNCHECKED or not isinstance(rng, TileRange) or rng == expected:
            continue  # a block-sized value is cut to a partial target tile, as in reference mode
        other = expected.dim if isinstance(expected, TileRange) else size
        pairs.append((rng, other, f"{where}: axis {axis} of the stored value is {_what(rng)}, the target's is "
                                  f"{_what(expected)}"))
    return pairs


_UNCHECKED = object()  # a target axis of one position (anything broadcasts), or a merged axis's


def _target_range(item, padded: dict):
    if isinstance(item, NewAxis):
        return _UNCHECKED
    if isinstance(item, (TileSlice, ShiftedTile)):
        return TileRange(item.dim) if item.dim.has_partial_tail else None
    if isinstance(item, GatherIndex):  # a scatter's target axis: its index vector's lanes
        lanes = padded.get(item.value.id, {}).get(0)
        return _UNCHECKED if isinstance(lanes, MergedPadding) else lanes
    return None  # ':' or a static slice: a fixed number of positions


def _elementwise_pairs(node, padded: dict, fixed_axes: FixedAxes) -> list:
    rank = len(node.outputs[0].shape) if node.outputs else 0
    seen: dict[int, tuple] = {}  # output axis -> (range, operand) of the first operand a tile sizes
    fixed: dict[int, Value] = {}  # output axis -> an operand whose axis a load's ':' or static slice sizes
    pairs = []
    for operand in node.args:
        if not isinstance(operand, Value) or not operand.shape:
            continue
        shift = rank - len(operand.shape)
        pads, loaded = padded.get(operand.id, {}), fixed_axes(operand)
        for axis, size in enumerate(operand.shape):
            if size == 1:
                continue
            rng = pads.get(axis)
            if axis in loaded:
                fixed.setdefault(axis + shift, operand)
            if not isinstance(rng, TileRange):
                continue  # the block's size beside a partial tile: cut to its extent
            first = seen.setdefault(axis + shift, (rng, operand))
            if first[0] != rng:
                pairs.append((first[0], rng.dim, f"{node.op}: operands {_name(first[1])} and {_name(operand)} meet "
                                                 f"on axis {axis + shift}, where the first is {_what(first[0])} "
                                                 f"and the second {_what(rng)}"))
    for axis, (rng, operand) in seen.items():  # a tile beside the part of a tensor a slice reads
        if axis in fixed:
            pairs.append((rng, node.outputs[0].shape[axis],
                          f"{node.op}: operands {_name(operand)} and {_name(fixed[axis])} meet on axis {axis}, "
                          f"where the first is {_what(rng)} and the second a fixed number of positions"))
    return pairs


class FixedAxes:
    """The axes of each value a load's ':' or static slice sizes (a fixed part of a tensor, not
    a value built from a block size), through lane-by-lane ops; memoized (values feed many ops)."""

    def __init__(self, padded: dict) -> None:
        self.padded = padded
        self.memo: dict[int, frozenset[int]] = {}

    def __call__(self, value: Value) -> frozenset[int]:
        if value.id not in self.memo:
            self.memo[value.id] = self._of(value)
        return self.memo[value.id]

    def _of(self, value: Value) -> frozenset[int]:
        node = value.producer
        if isinstance(node, Load):
            axes, axis = set(), 0
            for item in node.index:
                if isinstance(item, ScalarIndex):
                    continue
                if isinstance(item, (FullSlice, StaticSlice)):
                    axes.add(axis)
                axis += 1
            return frozenset(axes)
        if node is None or node.op not in ops.OPS or ops.OPS[node.op].kind is not OpKind.ELEMENTWISE:
            return frozenset()
        pads, axes = self.padded.get(value.id, {}), set()
        for operand in node.args:
            if isinstance(operand, Value) and operand.shape:
                shift = len(value.shape) - len(operand.shape)
                axes |= {a + shift for a in self(operand) if operand.shape[a] != 1}
        return frozenset(a for a in axes if a not in pads)


def _contraction_pairs(node, contraction, padded: dict) -> list:
    """A matmul's contracted axes, sized by two tiles (`x[tm, ta] @ y[tb, tn]`)."""
    a, b = node.args[contraction.lhs], node.args[contraction.rhs]
    if not isinstance(a, Value) or not isinstance(b, Value):
        return []
    lhs_axis, rhs_axis = contraction.contracted_axes(len(a.shape), len(b.shape))
    left = padded.get(a.id, {}).get(lhs_axis)
    right = padded.get(b.id, {}).get(rhs_axis)
    if not isinstance(left, TileRange) or not isinstance(right, TileRange) or left == right:
        return []  # a block-sized operand against a tile: contracted over the tile's extent
    return [(left, right.dim, f"{node.op}: the contracted axes of {_name(a)} and {_name(b)} are {_what(left)} "
                              f"and {_what(right)}")]


def _what(rng) -> str:
    if rng is None:
        return "a fixed number of positions"
    if isinstance(rng, MergedPadding):
        return f"merged from the partially filled tiles {rng.names}"
    dim = rng.dim
    last = dim.static_extent - (dim.static_trips - 1) * dim.block_size if dim.static_trips else None
    holds = f"holds {last}" if last is not None else "may hold fewer"
    return f"tile '{dim.name}', whose last tile {holds} of its block's {dim.block_size} positions"


_REMEDY = "Index both sides with the same tile, or choose a block size that divides the dim."
_CONSEQUENCE = ("The shapes agree only where the tiles are full; on a short tile eager PyTorch raises (a shape "
                f"mismatch). {_REMEDY}")


def _name(value: Value) -> str:
    if value.name:
        return f"'{value.name}'"
    producer = value.producer
    tensor = getattr(producer, "tensor", None)
    return f"{tensor.name}[...]" if tensor is not None else "(a computed value)"
