"""Render the plan's index-expression trees as the Python of BlockSpec index maps: `ast`
nodes built from the tree (precedence decides the parentheses when they are unparsed).

A long expression several index maps and the kernel share — a folded range's clamped block
(plan/grid_exprs.py:clamped_tile_block) — gets a module-level function of its own
(`index_helpers`, `helper_source`): `tn_block(i0, i2)` where it is used."""
from __future__ import annotations

import ast
from typing import Mapping, Sequence

from ..plan.grid_exprs import folded_range
from ..plan.index_expr import Binary, BinaryOp, Const, GridIndex, IndexExpr, TableRead, grid_axes, prefetched
from ..plan.plans import Memory, PallasCallPlan

_OPERATORS = {BinaryOp.ADD: ast.Add, BinaryOp.SUB: ast.Sub, BinaryOp.MUL: ast.Mult,
              BinaryOp.FLOORDIV: ast.FloorDiv, BinaryOp.MOD: ast.Mod}


def grid_parameter(axis: int) -> str:
    """The index map's parameter for grid axis `axis`."""
    return f"i{axis}"


def index_node(expr: IndexExpr, prefetch_refs: Mapping, grid_names: Sequence[str] | None = None,
               helpers: Mapping[IndexExpr, str] | None = None) -> ast.expr:
    """`expr` as an expression node; `prefetch_refs` maps prefetched symbols to their ref names;
    `grid_names`: the text of each grid index (default: the index map's parameters);
    `helpers`: subexpressions rendered as a call of their module-level function."""
    if helpers and expr in helpers:
        return ast.Call(ast.Name(helpers[expr], ast.Load()),
                        [index_node(GridIndex(axis), prefetch_refs, grid_names) for axis in sorted(grid_axes(expr))],
                        [])
    if isinstance(expr, Const):
        return ast.parse(repr(expr.value), mode="eval").body
    if isinstance(expr, GridIndex):
        return ast.Name(grid_parameter(expr.axis) if grid_names is None else grid_names[expr.axis], ast.Load())
    if isinstance(expr, TableRead):
        index = [index_node(i, prefetch_refs, grid_names, helpers) for i in expr.index] or [ast.Constant(0)]
        key = index[0] if len(index) == 1 else ast.Tuple(index, ast.Load())
        return ast.Subscript(ast.Name(prefetch_refs[expr.symbol], ast.Load()), key, ast.Load())
    if not isinstance(expr, Binary):
        raise TypeError(f"no index map for a {type(expr).__name__}")
    left, right = (index_node(side, prefetch_refs, grid_names, helpers) for side in (expr.left, expr.right))
    if expr.op in (BinaryOp.MIN, BinaryOp.MAX):
        function = ast.Attribute(ast.Name("jnp", ast.Load()), "minimum" if expr.op is BinaryOp.MIN else "maximum",
                                 ast.Load())
        return ast.Call(function, [left, right], [])
    return ast.BinOp(left, _OPERATORS[expr.op](), right)


def index_text(expr: IndexExpr, prefetch_refs: Mapping, grid_names: Sequence[str] | None = None,
               helpers: Mapping[IndexExpr, str] | None = None) -> str:
    """Python source of `expr` (`grid_names`, `helpers`: as for `index_node`)."""
    return ast.unparse(index_node(expr, prefetch_refs, grid_names, helpers))


def index_map_text(exprs: tuple[IndexExpr, ...], grid_rank: int, prefetch_refs: Mapping,
                   helpers: Mapping[IndexExpr, str] | None = None) -> str:
    """`lambda i0, i1, <prefetch refs>: (...)` for a BlockSpec."""
    params = [grid_parameter(a) for a in range(grid_rank)] + list(dict.fromkeys(prefetch_refs.values()))
    body = ast.Tuple([index_node(e, prefetch_refs, helpers=helpers) for e in exprs], ast.Load())
    arguments = ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params], kwonlyargs=[], kw_defaults=[],
                              defaults=[])
    return ast.unparse(ast.Lambda(arguments, body))


def index_helpers(calls: Sequence[PallasCallPlan], taken: set[str]) -> dict[str, dict[IndexExpr, str]]:
    """Per kernel name, the index expressions of its BlockSpecs that get a function of their
    own, and its name (`<dim>_block`, unique in the module: `taken` gains it)."""
    helpers: dict[str, dict[IndexExpr, str]] = {}
    for call in calls:
        own = helpers.setdefault(call.kernel_name, {})
        for op in (*call.inputs, *call.outputs):
            if op.memory is not Memory.VMEM_BLOCK:
                continue
            for block in op.axes:
                if folded_range(block, call.grid_axis_of) and block.index not in own \
                        and not prefetched(block.index):
                    name, n = f"{block.dim.name}_block", 1
                    while name in taken:
                        n += 1
                        name = f"{block.dim.name}_block_{n}"
                    taken.add(name)
                    own[block.index] = name
    return helpers


def helper_source(helpers: Mapping[IndexExpr, str]) -> str:
    """The module-level functions of `helpers` (from `index_helpers`)."""
    return "\n\n\n".join(
        f"def {name}({', '.join(grid_parameter(axis) for axis in sorted(grid_axes(expr)))}):\n"
        "    # a folded range's block at a program: its step's block, clamped to the blocks the\n"
        "    # program's range needs (a step past it repeats the last: no copy) and to the array's\n"
        f"    return {index_text(expr, {})}"
        for expr, name in helpers.items())
