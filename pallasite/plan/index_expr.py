"""Index expressions of BlockSpec index maps, as small trees.

A block index is a function of the grid indices and of scalar-prefetched
tables: `i0`, `i0 + 1`, `i0 // 3`, `offsets[i0] // 64`. The plan builds these
trees; codegen renders them to Python once (`codegen/index_text.py`); the
schedule metrics evaluate them for concrete grid steps. Nothing parses or
`eval`s text.
"""
from __future__ import annotations

import enum
import operator
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Union

import numpy as np

from ..ir import ScalarSymbol, TensorSymbol


class BinaryOp(enum.Enum):
    """Integer arithmetic an index map can do; the value is its Python spelling."""

    ADD = "+"
    SUB = "-"
    MUL = "*"
    FLOORDIV = "//"
    MOD = "%"
    MIN = "min"
    MAX = "max"


_EVALUATE: dict[BinaryOp, Callable[[int, int], int]] = {
    BinaryOp.ADD: operator.add, BinaryOp.SUB: operator.sub, BinaryOp.MUL: operator.mul,
    BinaryOp.FLOORDIV: operator.floordiv, BinaryOp.MOD: operator.mod,
    BinaryOp.MIN: min, BinaryOp.MAX: max,
}


@dataclass(frozen=True)
class GridIndex:
    """The index of grid axis `axis` (the index map's parameter)."""

    axis: int


@dataclass(frozen=True)
class Const:
    value: int


@dataclass(frozen=True)
class TableRead:
    """`table[index...]` of a scalar-prefetched tensor, or a prefetched runtime scalar
    (`index` empty: its single element)."""

    symbol: TensorSymbol | ScalarSymbol
    index: tuple[IndexExpr, ...] = ()


@dataclass(frozen=True)
class Binary:
    op: BinaryOp
    left: IndexExpr
    right: IndexExpr


IndexExpr = Union[GridIndex, Const, TableRead, Binary]

ZERO = Const(0)


def binary(op: BinaryOp, left: IndexExpr, right: IndexExpr) -> IndexExpr:
    """`left op right`, folded when both are constants or one is the identity."""
    if isinstance(left, Const) and isinstance(right, Const):
        return Const(_EVALUATE[op](left.value, right.value))
    if op in (BinaryOp.ADD, BinaryOp.SUB) and right == ZERO:
        return left
    if op is BinaryOp.ADD and left == ZERO:
        return right
    if op in (BinaryOp.MUL, BinaryOp.FLOORDIV) and right == Const(1):
        return left
    return Binary(op, left, right)


def grid_axes(expr: IndexExpr) -> frozenset[int]:
    """The grid axes an expression depends on."""
    if isinstance(expr, GridIndex):
        return frozenset({expr.axis})
    if isinstance(expr, Binary):
        return grid_axes(expr.left) | grid_axes(expr.right)
    if isinstance(expr, TableRead):
        return frozenset().union(*(grid_axes(i) for i in expr.index))
    return frozenset()


def distinct_per_step(expr: IndexExpr) -> bool:
    """Whether steps that differ along the grid axis `expr` reads get different values: a
    grid index times a nonzero constant plus a constant, or a constant. A written block
    chosen so is revisited only along the axes it does not read; `g % 3`, `g // 2` or a
    prefetched `seg[g]` choose one block at steps that need not be consecutive."""
    if isinstance(expr, (GridIndex, Const)):
        return True
    if not isinstance(expr, Binary):
        return False
    left, right = expr.left, expr.right
    if expr.op in (BinaryOp.ADD, BinaryOp.SUB):
        return (isinstance(right, Const) and distinct_per_step(left)) or \
            (isinstance(left, Const) and distinct_per_step(right))
    if expr.op is BinaryOp.MUL:
        return (isinstance(right, Const) and right.value != 0 and distinct_per_step(left)) or \
            (isinstance(left, Const) and left.value != 0 and distinct_per_step(right))
    return False


def prefetched(expr: IndexExpr) -> frozenset:
    """The symbols an expression reads through scalar prefetch."""
    if isinstance(expr, TableRead):
        return frozenset({expr.symbol}).union(*(prefetched(i) for i in expr.index))
    if isinstance(expr, Binary):
        return prefetched(expr.left) | prefetched(expr.right)
    return frozenset()


class DataDependent(Exception):
    """The expression reads a table whose values were not given."""


_EVALUATE_ARRAYS: dict[BinaryOp, Callable] = {
    **_EVALUATE, BinaryOp.FLOORDIV: np.floor_divide, BinaryOp.MOD: np.mod,  # floor semantics, as Python's
    BinaryOp.MIN: np.minimum, BinaryOp.MAX: np.maximum,
}


def evaluate_grid(expr: IndexExpr, shape: tuple[int, ...], tables: Mapping[Any, Any] | None = None) -> np.ndarray:
    """`evaluate` at every step of a grid of `shape` at once: an int64 array of that shape
    (a step's value at its grid indices), for the metrics of grids of many steps."""
    return np.broadcast_to(_on_grid(expr, shape, tables), shape)


def _on_grid(expr: IndexExpr, shape: tuple[int, ...], tables) -> np.ndarray | int:
    if isinstance(expr, Const):
        return expr.value
    if isinstance(expr, GridIndex):  # the axis's indices, broadcast along the others
        return np.arange(shape[expr.axis], dtype=np.int64).reshape(
            [-1 if axis == expr.axis else 1 for axis in range(len(shape))])
    if isinstance(expr, Binary):
        return _EVALUATE_ARRAYS[expr.op](_on_grid(expr.left, shape, tables), _on_grid(expr.right, shape, tables))
    if tables is None or expr.symbol not in tables:
        raise DataDependent(expr.symbol.name)
    value = np.asarray(tables[expr.symbol])
    if not expr.index:
        return np.int64(value.item())
    index = tuple(np.broadcast_to(_on_grid(i, shape, tables), shape) for i in expr.index)
    return value[index].astype(np.int64)


def evaluate(expr: IndexExpr, grid: tuple[int, ...], tables: Mapping[Any, Any] | None = None) -> int:
    """The value of `expr` at grid step `grid`; `tables` maps prefetched symbols to values."""
    if isinstance(expr, Const):
        return expr.value
    if isinstance(expr, GridIndex):
        return grid[expr.axis]
    if isinstance(expr, Binary):
        return _EVALUATE[expr.op](evaluate(expr.left, grid, tables), evaluate(expr.right, grid, tables))
    if tables is None or expr.symbol not in tables:
        raise DataDependent(expr.symbol.name)
    value = tables[expr.symbol]
    for index in expr.index:
        value = value[evaluate(index, grid, tables)]
    return int(value)
