"""Render the plan's index-expression trees as the Python of BlockSpec index maps: `ast`
nodes built from the tree (precedence decides the parentheses when they are unparsed)."""
from __future__ import annotations

import ast
from typing import Mapping, Sequence

from ..plan.index_expr import Binary, BinaryOp, Const, GridIndex, IndexExpr, TableRead

_OPERATORS = {BinaryOp.ADD: ast.Add, BinaryOp.SUB: ast.Sub, BinaryOp.MUL: ast.Mult,
              BinaryOp.FLOORDIV: ast.FloorDiv, BinaryOp.MOD: ast.Mod}


def grid_parameter(axis: int) -> str:
    """The index map's parameter for grid axis `axis`."""
    return f"i{axis}"


def index_node(expr: IndexExpr, prefetch_refs: Mapping, grid_names: Sequence[str] | None = None) -> ast.expr:
    """`expr` as an expression node; `prefetch_refs` maps prefetched symbols to their ref names;
    `grid_names`: the text of each grid index (default: the index map's parameters)."""
    if isinstance(expr, Const):
        return ast.parse(repr(expr.value), mode="eval").body
    if isinstance(expr, GridIndex):
        return ast.Name(grid_parameter(expr.axis) if grid_names is None else grid_names[expr.axis], ast.Load())
    if isinstance(expr, TableRead):
        index = [index_node(i, prefetch_refs, grid_names) for i in expr.index] or [ast.Constant(0)]
        key = index[0] if len(index) == 1 else ast.Tuple(index, ast.Load())
        return ast.Subscript(ast.Name(prefetch_refs[expr.symbol], ast.Load()), key, ast.Load())
    if not isinstance(expr, Binary):
        raise TypeError(f"no index map for a {type(expr).__name__}")
    left, right = index_node(expr.left, prefetch_refs, grid_names), index_node(expr.right, prefetch_refs, grid_names)
    if expr.op in (BinaryOp.MIN, BinaryOp.MAX):
        function = ast.Attribute(ast.Name("jnp", ast.Load()), "minimum" if expr.op is BinaryOp.MIN else "maximum",
                                 ast.Load())
        return ast.Call(function, [left, right], [])
    return ast.BinOp(left, _OPERATORS[expr.op](), right)


def index_text(expr: IndexExpr, prefetch_refs: Mapping, grid_names: Sequence[str] | None = None) -> str:
    """Python source of `expr` (`grid_names`: as for `index_node`)."""
    return ast.unparse(index_node(expr, prefetch_refs, grid_names))


def index_map_text(exprs: tuple[IndexExpr, ...], grid_rank: int, prefetch_refs: Mapping) -> str:
    """`lambda i0, i1, <prefetch refs>: (...)` for a BlockSpec."""
    params = [grid_parameter(a) for a in range(grid_rank)] + list(dict.fromkeys(prefetch_refs.values()))
    body = ast.Tuple([index_node(e, prefetch_refs) for e in exprs], ast.Load())
    arguments = ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params], kwonlyargs=[], kw_defaults=[],
                              defaults=[])
    return ast.unparse(ast.Lambda(arguments, body))
