"""Scalars of device code written as expressions of the grid indices.

A BlockSpec index map sees only the grid indices (`i0, i1, ...`), so a scalar
index that chooses a block must be rebuilt from them: tile begins, grid
indices, constants and integer arithmetic on those. Anything else (a scalar
argument, a value read from a tensor) needs scalar prefetch.
"""
from __future__ import annotations

from ..ir import TileDim, Value

_ARITH = {"add": "+", "sub": "-", "mul": "*", "floor_divide": "//", "remainder": "%"}


class NotAGridExpression(Exception):
    """The scalar depends on something other than grid indices and constants."""


def grid_expression(operand, grid_axis_of: dict[int, int]) -> tuple[str, frozenset[int]]:
    """(expression text, grid axes it uses) of an int operand."""
    if isinstance(operand, bool) or not isinstance(operand, (int, Value)):
        raise NotAGridExpression(repr(operand))
    if isinstance(operand, int):
        return str(operand), frozenset()
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
        return text, frozenset({axis})
    if node.op in _ARITH and not node.kwargs.get("alpha", 1) != 1:
        left, left_axes = grid_expression(node.args[0], grid_axis_of)
        right, right_axes = grid_expression(node.args[1], grid_axis_of)
        return f"({left} {_ARITH[node.op]} {right})", left_axes | right_axes
    raise NotAGridExpression(f"{node.op} result")
