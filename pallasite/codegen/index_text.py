"""Render the plan's index-expression trees as the Python of BlockSpec index maps."""
from __future__ import annotations

from typing import Mapping

from ..plan.index_expr import Binary, BinaryOp, Const, GridIndex, IndexExpr, TableRead


def grid_parameter(axis: int) -> str:
    """The index map's parameter for grid axis `axis`."""
    return f"i{axis}"


def index_text(expr: IndexExpr, prefetch_refs: Mapping) -> str:
    """Python source of `expr`; `prefetch_refs` maps prefetched symbols to their ref names."""
    if isinstance(expr, Const):
        return repr(expr.value)
    if isinstance(expr, GridIndex):
        return grid_parameter(expr.axis)
    if isinstance(expr, TableRead):
        index = ", ".join(index_text(i, prefetch_refs) for i in expr.index) or "0"
        return f"{prefetch_refs[expr.symbol]}[{index}]"
    left, right = index_text(expr.left, prefetch_refs), index_text(expr.right, prefetch_refs)
    if expr.op in (BinaryOp.MIN, BinaryOp.MAX):
        return f"jnp.{'minimum' if expr.op is BinaryOp.MIN else 'maximum'}({left}, {right})"
    return f"({left} {expr.op.value} {right})"


def index_map_text(exprs: tuple[IndexExpr, ...], grid_rank: int, prefetch_refs: Mapping) -> str:
    """`lambda i0, i1, <prefetch refs>: (...)` for a BlockSpec."""
    params = [grid_parameter(a) for a in range(grid_rank)] + list(dict.fromkeys(prefetch_refs.values()))
    body = ", ".join(index_text(e, prefetch_refs) for e in exprs)
    return f"lambda {', '.join(params)}: ({body}{',' if len(exprs) == 1 else ''})"
