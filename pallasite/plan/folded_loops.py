"""`pallas_loop_type="outer_pipeline"`: an inner tile loop folded into its call's grid.

The folded loop's dims become the last axes of the pallas_call grid: each of its tiles is
a program of the call, so Pallas' pipeline fetches the next tile's blocks while the
current one computes, across the outer tiles too (the next row's first blocks arrive
during this row's last step): the schedule hand-written TPU kernels give a K or KV axis.
Blocks the statements before the loop (its prologue) read are indexed by the outer tiles
only, so they are fetched once per outer tile.

In the folded call the loop is an `ir.FoldedSteps` with no dims of its own: its body runs
once per program. Its carried values (an accumulator, flash attention's m, l and acc) live
in VMEM scratch across the steps of one outer tile: set from their value before the loop
at the first folded step, read and written back at each (plan/loops/folded.py); the
statements after the loop (its epilogue) run at the last folded step, reading the carried
values' final step. The folded axes are the innermost grid axes, in their written order,
and `arbitrary` when values are carried across them (plan/passes.py).

Folding keeps the kernel's meaning only where a folded program may repeat the prologue:
it must only compute (no store, no effect such as a print or a remote copy, no read of a
tensor the loop writes), the epilogue must not read a tensor the loop writes (the last
step does not see the blocks earlier steps wrote; one only the epilogue writes, as in
`c[tm, tn] = c[tm, tn] + acc`, it reads as it was), and the loop must be in the device
loop's own body with a compile-time int begin (`hl.specialize` makes a size one).

Its end may be a value of the outer tiles (a causal key loop, `hl.tile(0, min(s,
tile_q.end))`): the grid axis then spans the end's largest value (`folded_ends`), a step past
its program's end skips its body (`pl.when`), and the blocks the folded dim indexes repeat the
last one the program needs there (`grid_exprs.clamped_tile_block`): no copy, and no block
written back that the step did not compute — JAX's causal flash attention schedule. A loop that breaks one is
`exc.BackendUnsupported` naming it; `emit_pipeline`, `fori_loop` or `unroll` run it. The
autotuner never picks this loop type (it changes which loop a config's other per-loop
entries mean); a config names it.

Planning folds before every pass (`build.py`): the passes then see a device loop whose
grid has the folded dims, and decide its blocks, masks and grid semantics as for any.
"""
from __future__ import annotations

import dataclasses

from .. import exc
from ..config import FOLDED_LOOP_TYPE
from ..ir import DeviceLoopCall, FoldedSteps, Load, Node, Store, TileLoop, walk_nodes
from .bounds import scalar_interval
from .grid_exprs import NotAGridExpression, grid_expression
from .loops import inner_loops, loop_type_names


def folded_loop_ids(ir, value) -> frozenset[int]:
    """The TileLoop ids a config's `pallas_loop_type` folds (one name for every inner loop,
    or one per inner loop in source order)."""
    return frozenset(loop_id for loop_id, name in loop_type_names(ir, value).items() if name == FOLDED_LOOP_TYPE)


def fold(call: DeviceLoopCall, folded: frozenset[int]) -> DeviceLoopCall:
    """`call` with its folded inner loop's dims appended to its grid and the loop a
    `FoldedSteps` of no dims in its place (the call itself when it folds none)."""
    chosen = [loop for loop in inner_loops(call.loop.body) if loop.id in folded]
    if not chosen:
        return call
    top = call.loop
    if len(chosen) > 1:
        raise _refused(chosen[1], f"a device loop folds one loop into its grid; this one holds {len(chosen)} "
                       "(give pallas_loop_type as a list, one entry per inner loop, folding one)")
    (loop,) = chosen
    position = next((i for i, item in enumerate(top.body) if item is loop), None)
    if position is None:
        raise _refused(loop, "only a loop directly in the device loop's body folds into its grid (this one is "
                       "inside another loop or a device if)")
    ends = _grid_ends(loop, top)
    prologue, epilogue = top.body[:position], top.body[position + 1:]
    # what earlier folded steps wrote: the loop body's stores (the prologue may not store; the
    # statements after the loop run at the last step only, so their writes come after every read)
    written = {id(node.tensor) for node in walk_nodes(loop.body) if isinstance(node, Store)}
    _check_prologue(prologue, loop, written)
    _check_epilogue(epilogue, loop, written)
    if any(ends.get(dim.id, dim.end) <= dim.begin for dim in loop.dims):  # a grid axis of no step would run no program
        return dataclasses.replace(call, loop=TileLoop(top.dims, [*prologue, _no_steps(loop), *epilogue],
                                                       top.location, top.carried, top.id))
    steps = FoldedSteps([], loop.body, loop.location, loop.carried, loop.id, folded=list(loop.dims))
    merged = TileLoop([*top.dims, *loop.dims], [*prologue, steps, *epilogue], top.location, top.carried, top.id)
    return dataclasses.replace(call, loop=merged, folded_dims=frozenset(dim.id for dim in loop.dims),
                               folded_ends=ends)


def _grid_ends(loop: TileLoop, top: TileLoop) -> dict[int, int]:
    """The static end of the grid axis of each folded dim whose end is a value of the outer
    tiles (`min(s, tile_q.end)`): that value's largest. Its begin must be a compile-time int
    (a tile's begin is `begin + step * block` in the grid), and the end must be computable by
    an index map, which clamps the dim's blocks to it (grid_exprs.py:clamped_tile_block)."""
    ends = {}
    outer = {dim.id: axis for axis, dim in enumerate(top.dims)}
    for dim in loop.dims:
        if type(dim.begin) is not int:
            raise _refused(loop, "its begin is computed in the kernel, but must be a compile-time int: each "
                           "grid step's tile starts at begin + step * block")
        if isinstance(dim.end, int) and not isinstance(dim.end, bool):
            continue
        interval = scalar_interval(dim.end)
        try:
            grid_expression(dim.end, outer)
        except NotAGridExpression:
            interval = None
        if interval is None:
            raise _refused(loop, "its end has no compile-time bound the grid could span "
                           "(an end computed from the outer tiles and ints, as min(n, tile_q.end), folds; "
                           "hl.specialize makes an argument's size an int)")
        ends[dim.id] = max(interval[1], dim.begin)
    return ends


def folded_order(call: DeviceLoopCall, order, folded_call: DeviceLoopCall):
    """The grid order of a folded call: the device loop's own (`loop_orders`, else as
    written), the folded dims innermost in their written order. Always given, so planning
    never moves an outer axis inside the folded ones (plan/grid_order.py would, for a
    revisited block): the steps of one outer tile must be consecutive, as the values
    carried across them are."""
    if folded_call is call:
        return order
    own = len(call.loop.dims)
    return (*(range(own) if order is None else order), *range(own, len(folded_call.loop.dims)))


def refused_fold(folded_call: DeviceLoopCall, error: exc.PallasiteError) -> exc.BackendUnsupported:
    """A planning error the fold caused (a written block that its grid axes would revisit out
    of order), said as the fold's refusal."""
    names = ", ".join(f"'{dim.name}'" for dim in folded_call.loop.dims if dim.id in folded_call.folded_dims)
    return exc.BackendUnsupported(
        f"pallas_loop_type='{FOLDED_LOOP_TYPE}': folding {names} into the grid makes each of its tiles a grid "
        f"step, and then: {error.message} Use another loop type for that loop (emit_pipeline, fori_loop or "
        "unroll).", error.location)


def _no_steps(loop: TileLoop) -> FoldedSteps:
    """A folded loop without a tile at these sizes: no body, no grid axis; its carried values
    keep their initial values and the statements after it run in every program."""
    carried = [dataclasses.replace(item, result=item.param) for item in loop.carried]
    return FoldedSteps([], [], loop.location, carried, loop.id, folded=[])


def _check_prologue(prologue: list, loop: TileLoop, written: set[int]) -> None:
    """The statements before a folded loop run at each of its steps: they must compute only."""
    for node in walk_nodes(prologue):
        where = _line(node)
        if isinstance(node, Store):
            raise _refused(loop, f"the statements before it store into '{node.tensor.name}'{where}, which each "
                           "folded step would repeat after earlier steps wrote")
        if isinstance(node, Load) and id(node.tensor) in written:
            raise _refused(loop, f"the statements before it read '{node.tensor.name}'{where}, which the loop "
                           "writes: a later folded step would read what an earlier one wrote")
        if isinstance(node, Node) and not isinstance(node, Load) and not node.outputs:
            raise _refused(loop, f"the statements before it have an effect ({node.op}{where}), which each "
                           "folded step would repeat")


def _check_epilogue(epilogue: list, loop: TileLoop, written: set[int]) -> None:
    """The statements after a folded loop run at its last step: what they read of a tensor the
    loop writes would be the blocks as this step sees them, not what every step wrote (a
    tensor only they write, as `c[tm, tn] = c[tm, tn] + acc`, they read as it was)."""
    for node in walk_nodes(epilogue):
        if isinstance(node, Load) and id(node.tensor) in written:
            raise _refused(loop, f"the statements after it read '{node.tensor.name}'{_line(node)}, which the "
                           "loop writes: they run at the last folded step, which does not see every block "
                           "the earlier steps wrote")


def _line(node) -> str:
    return f" (line {node.location.lineno})" if node.location is not None else ""


def _refused(loop: TileLoop, why: str) -> exc.BackendUnsupported:
    return exc.BackendUnsupported(
        f"pallas_loop_type='{FOLDED_LOOP_TYPE}' cannot fold this loop into the grid: {why}. Use another loop "
        "type for it (emit_pipeline, fori_loop or unroll).", loop.location)


__all__ = ["folded_loop_ids", "fold", "folded_order", "refused_fold"]
