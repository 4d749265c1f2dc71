"""Scalars of device code rebuilt as index-map expressions of the grid indices.

A BlockSpec index map sees only the grid indices and the scalar-prefetch
refs, so a scalar index that chooses a block must be rebuilt from them: tile
begins and ids, grid indices, constants, integer arithmetic, `min`/`max`, and
values read from small tensors or scalar arguments — the last two make those
tensors scalar-prefetched (`PrefetchScalarGridSpec`). The result is an
`IndexExpr` tree (index_expr.py).
"""
from __future__ import annotations

from ..ir import Load, ScalarIndex, TileDim, Value
from ..ir.ops import scalar_arithmetic
from .index_expr import BinaryOp, Const, GridIndex, IndexExpr, TableRead, binary

class NotAGridExpression(Exception):
    """The scalar depends on something an index map cannot see."""


def grid_expression(operand, grid_axis_of: dict[int, int]) -> IndexExpr:
    """The index-map expression of an int operand."""
    if isinstance(operand, bool) or not isinstance(operand, (int, Value)):
        raise NotAGridExpression(repr(operand))
    if isinstance(operand, int):
        return Const(operand)
    node = operand.producer
    if node is None:
        raise NotAGridExpression(repr(operand))
    if node.op in ("tile_begin", "tile_id"):
        dim: TileDim = node.args[0]
        if dim.id not in grid_axis_of:
            raise NotAGridExpression(f"{dim.name} is not a grid dimension")
        step = GridIndex(grid_axis_of[dim.id])
        if node.op == "tile_id":
            return step
        return binary(BinaryOp.ADD, Const(dim.begin), binary(BinaryOp.MUL, step, Const(dim.block_size)))
    if node.op == "tile_end":  # min(begin + (step + 1) * block, end), of a dim with static bounds
        dim = node.args[0]
        if dim.id not in grid_axis_of or not isinstance(dim.begin, int) or type(dim.end) is not int:
            raise NotAGridExpression(f"{dim.name}.end")
        step = binary(BinaryOp.ADD, GridIndex(grid_axis_of[dim.id]), Const(1))
        last = binary(BinaryOp.ADD, Const(dim.begin), binary(BinaryOp.MUL, step, Const(dim.block_size)))
        return binary(BinaryOp.MIN, last, Const(dim.end))
    arithmetic = scalar_arithmetic(node.op)
    if arithmetic is not None and node.kwargs.get("alpha", 1) == 1:
        left = grid_expression(node.args[0], grid_axis_of)
        right = grid_expression(node.args[1], grid_axis_of)
        return binary(BinaryOp(arithmetic.spelling), left, right)
    if node.op == "scalar_arg":
        return TableRead(node.args[0])
    if isinstance(node, Load) and all(isinstance(i, ScalarIndex) for i in node.index):
        return TableRead(node.tensor, tuple(grid_expression(i.index, grid_axis_of) for i in node.index))
    raise NotAGridExpression(f"{node.op} result")


def clamped_tile_block(dim: TileDim, grid_axis_of: dict[int, int]) -> IndexExpr:
    """The block index of a folded grid dim whose end is a value of the outer tiles (plan/
    folded_loops.py): the step's own block, clamped to the blocks of [begin, end) this
    program needs. A step past the end (which skips its body) repeats the last needed block,
    so Pallas copies nothing for it and writes back no block it did not compute."""
    first = dim.begin // dim.block_size
    block = binary(BinaryOp.ADD, GridIndex(grid_axis_of[dim.id]), Const(first))
    end = grid_expression(dim.end, grid_axis_of)
    last = binary(BinaryOp.FLOORDIV, binary(BinaryOp.SUB, end, Const(1)), Const(dim.block_size))
    return binary(BinaryOp.MAX, binary(BinaryOp.MIN, block, last), Const(first))
