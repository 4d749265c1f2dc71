"""Emit an `unroll` loop: a Python `for` over resident blocks (static trip count),
else a `lax.fori_loop` over them."""
from __future__ import annotations

import ast
from contextlib import ExitStack

from ...ir.sizes import SymbolicSize

from ...ir import TileLoop
from ...plan.loops import ResidentLoopPlan
from ..frames import LoopFrame
from .registry import emits
from .streamed import emit_fori_loop


@emits(ResidentLoopPlan)
def emit_resident_loop(k, loop: TileLoop, loop_plan: ResidentLoopPlan) -> list:
    if loop_plan.static_trips is None:
        return emit_fori_loop(k, loop, loop_plan)
    carried = k.bind_carried(loop, copy=True)
    steps = "x".join(str(loop_plan.static_trips[i]) for i in loop_plan.order)
    total = loop_plan.total_trips
    k.comment(f"inner loop '{', '.join(loop.dims[i].name for i in loop_plan.order)}': {steps} "
              f"step{'s' if isinstance(total, SymbolicSize) or total != 1 else ''} unrolled over resident blocks")
    counters = {}
    with ExitStack() as nest:
        for position in loop_plan.order:  # outermost first
            dim, trips = loop.dims[position], loop_plan.static_trips[position]
            counter = k.names.fresh(f"{dim.name}_step")
            counters[dim.id] = counter
            nest.enter_context(k.block(f"for {counter} in range({trips}):"))
        k.frames[loop.id] = LoopFrame(counters)
        k.emit_loop_body(loop)
        _rebind(k, [(var, result) for (_, var), result in zip(carried, k.carried_results(loop, carried))
                     if result != var])
    return carried


def _rebind(k, updates: list[tuple[str, str]]) -> None:
    """The carried variables rebound to this step's results, all at once when a result reads
    a variable rebound before it (`a, b = b + s, a`: a swap through `tmp = a` read the new a
    when written one by one; trial P)."""
    rebound: set[str] = set()
    for var, result in updates:
        if rebound & {node.id for node in ast.walk(ast.parse(result, mode="eval")) if isinstance(node, ast.Name)}:
            k.emit(f"{', '.join(var for var, _ in updates)} = {', '.join(result for _, result in updates)}")
            return
        rebound.add(var)
    for var, result in updates:
        k.emit(f"{var} = {result}")
