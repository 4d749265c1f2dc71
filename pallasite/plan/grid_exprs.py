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
from .index_expr import BinaryOp, Const, GridIndex, IndexExpr, TableRead, binary, grid_axes
from .plans import AxisBlock, BlockKind

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
        # a folded dim's begin may be a value of the outer tiles (plan/folded_loops.py)
        begin = grid_expression(dim.begin, grid_axis_of)
        return binary(BinaryOp.ADD, begin, binary(BinaryOp.MUL, step, Const(dim.block_size)))
    if node.op == "tile_end":  # min(begin + (step + 1) * block, end)
        dim = node.args[0]
        if dim.id not in grid_axis_of:
            raise NotAGridExpression(f"{dim.name}.end")
        step = binary(BinaryOp.ADD, GridIndex(grid_axis_of[dim.id]), Const(1))
        last = binary(BinaryOp.ADD, grid_expression(dim.begin, grid_axis_of),
                      binary(BinaryOp.MUL, step, Const(dim.block_size)))
        return binary(BinaryOp.MIN, last, grid_expression(dim.end, grid_axis_of))
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


def clamped_tile_block(dim: TileDim, grid_axis_of: dict[int, int], blocks: int) -> IndexExpr:
    """The block index of a folded grid dim whose bounds are values of the outer tiles (plan/
    folded_loops.py), its begin a block multiple: the step's own block, clamped to the blocks
    of [begin, end) this program needs, and to the array's `blocks`. A step past the end
    (which skips its body) repeats the last needed block, so Pallas copies nothing for it and
    writes back no block it did not compute; a program whose range is empty stays on the
    block at its begin (the array's last, past its end)."""
    first = binary(BinaryOp.FLOORDIV, grid_expression(dim.begin, grid_axis_of), Const(dim.block_size))
    block = binary(BinaryOp.ADD, GridIndex(grid_axis_of[dim.id]), first)
    end = grid_expression(dim.end, grid_axis_of)
    last = binary(BinaryOp.FLOORDIV, binary(BinaryOp.SUB, end, Const(1)), Const(dim.block_size))
    needed = binary(BinaryOp.MAX, binary(BinaryOp.MIN, block, last), first)
    return binary(BinaryOp.MIN, needed, Const(blocks - 1))


def folded_range(block: AxisBlock, grid_axis_of: dict[int, int]) -> bool:
    """Whether `block` is a tile of a folded dim whose range comes from the outer tiles (its
    index clamped to each program's range: grid_exprs.py:clamped_tile_block)."""
    dim = block.dim
    return (block.kind is BlockKind.TILE and dim is not None and dim.id in grid_axis_of
            and (isinstance(dim.begin, Value) or isinstance(dim.end, Value)))


def distinguishing_axes(block: AxisBlock, grid_axis_of: dict[int, int]) -> frozenset[int]:
    """The grid axes along which `block`'s index tells programs' blocks apart. A folded range's
    clamp reads the outer axes, but the blocks it picks are the folded axis's: two outer
    programs reach the same block through it (`out[tn]` under `hl.tile(0, tm.end)`)."""
    if folded_range(block, grid_axis_of):
        return frozenset({grid_axis_of[block.dim.id]})
    return grid_axes(block.index)
