"""Scalars of device code written as expressions of the grid indices.

A BlockSpec index map sees only the grid indices (`i0, i1, ...`) and the
scalar-prefetch refs, so a scalar index that chooses a block must be rebuilt
from them: tile begins, grid indices, constants, integer arithmetic, and
values read from small tensors or scalar arguments — the last two make those
tensors scalar-prefetched (`PrefetchScalarGridSpec`), read in the index map as
`name_ref[...]`.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Load, ScalarIndex, TileDim, Value

_ARITH = {"add": "+", "sub": "-", "mul": "*", "floor_divide": "//", "remainder": "%"}


class NotAGridExpression(Exception):
    """The scalar depends on something an index map cannot see."""


@dataclass(frozen=True)
class GridExpression:
    text: str  # Python source in i0, i1, ... and prefetch refs
    axes: frozenset[int]  # grid axes it depends on
    prefetch: frozenset = frozenset()  # TensorSymbols / ScalarSymbols read through prefetch refs


def grid_expression(operand, grid_axis_of: dict[int, int]) -> GridExpression:
    """The index-map expression of an int operand."""
    if isinstance(operand, bool) or not isinstance(operand, (int, Value)):
        raise NotAGridExpression(repr(operand))
    if isinstance(operand, int):
        return GridExpression(str(operand), frozenset())
    node = operand.producer
    if node is None:
        raise NotAGridExpression(repr(operand))
    if node.op == "tile_begin":
        dim: TileDim = node.args[0]
        if dim.id not in grid_axis_of:
            raise NotAGridExpression(f"{dim.name} is not a grid dimension")
        axis = grid_axis_of[dim.id]
        term = f"i{axis}" if dim.block_size == 1 else f"i{axis} * {dim.block_size}"
        text = term if dim.begin == 0 else f"{dim.begin} + {term}"
        return GridExpression(text, frozenset({axis}))
    if node.op == "tile_id":
        dim = node.args[0]
        if dim.id not in grid_axis_of:
            raise NotAGridExpression(f"{dim.name} is not a grid dimension")
        axis = grid_axis_of[dim.id]
        return GridExpression(f"i{axis}", frozenset({axis}))
    if node.op in _ARITH and node.kwargs.get("alpha", 1) == 1:
        left = grid_expression(node.args[0], grid_axis_of)
        right = grid_expression(node.args[1], grid_axis_of)
        return GridExpression(f"({left.text} {_ARITH[node.op]} {right.text})",
                              left.axes | right.axes, left.prefetch | right.prefetch)
    if node.op == "scalar_arg":
        symbol = node.args[0]
        return GridExpression(f"{symbol.name}_ref[0]", frozenset(), frozenset({symbol}))
    if isinstance(node, Load) and all(isinstance(i, ScalarIndex) for i in node.index):
        parts = [grid_expression(i.index, grid_axis_of) for i in node.index]
        text = f"{node.tensor.name}_ref[{', '.join(p.text for p in parts)}]"
        axes = frozenset().union(*(p.axes for p in parts))
        prefetch = frozenset({node.tensor}).union(*(p.prefetch for p in parts))
        return GridExpression(text, axes, prefetch)
    raise NotAGridExpression(f"{node.op} result")
