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
values' final step. The folded axes are the innermost grid axes, in the loop's
`loop_orders` entry (else as written) but for a range from the outer tiles, which walks
innermost (below; an entry putting it elsewhere is refused), and `arbitrary` when
values are carried across them (plan/passes.py).

Folding keeps the kernel's meaning only where a folded program may repeat the prologue:
it must only compute (no store, no effect such as a print or a remote copy, no read of a
tensor the loop writes), the epilogue must not read a tensor the loop writes (the last
step does not see the blocks earlier steps wrote; one only the epilogue writes, as in
`c[tm, tn] = c[tm, tn] + acc`, it reads as it was), and the loop must be in the device
loop's own body. A loop that breaks one is `exc.BackendUnsupported` naming it; `emit_pipeline`, `fori_loop` or
`unroll` run it. The autotuner offers this loop type to each loop directly in a device
loop's body (`ConfigSpec.foldable`); a fold planning refuses scores as rejected.

Its bounds may be values of the outer tiles (a causal key loop, `hl.tile(0, min(s,
tile_q.end))`; a sliding window, `hl.tile(max(0, tile_q.begin - w), tile_q.end)`): the grid
axis then has as many steps as the longest program's range holds tiles (`folded_trips`,
evaluated at every outer program), each program's tiles start at its own begin, a step past
its range skips its body (`pl.when`), and the blocks the folded dim indexes repeat the last
one the program needs there (`grid_exprs.clamped_tile_block`): no copy, and no block written
back that the step did not compute — JAX's causal flash attention schedule, and splash
attention's grid as wide as its widest row. Bounds read from a tensor or a runtime scalar
cannot size the grid and are refused.

Planning folds before every pass (`build.py`): the passes then see a device loop whose
grid has the folded dims, and decide its blocks, masks and grid semantics as for any.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from .. import exc
from ..config import FOLDED_LOOP_TYPE
from ..ir import DeviceLoopCall, FoldedSteps, Load, Node, Store, TileDim, TileLoop, Value, cdiv, walk_nodes
from ..ir.sizes import SymbolicSize
from .bounds import check_tile_range
from .grid_exprs import NotAGridExpression, grid_expression
from .index_expr import evaluate_grid, prefetched
from .loops import inner_loops, loop_type_names


def folded_loop_ids(ir, value) -> frozenset[int]:
    """The TileLoop ids a config's `pallas_loop_type` folds (one name for every inner loop,
    or one per inner loop in source order)."""
    return frozenset(loop_id for loop_id, name in loop_type_names(ir, value).items() if name == FOLDED_LOOP_TYPE)


def fold(call: DeviceLoopCall, folded: frozenset[int], loop_orders: Mapping[int, tuple] | None = None
         ) -> DeviceLoopCall:
    """`call` with its folded inner loop's dims appended to its grid, in the loop's
    `loop_orders` entry if it has one, and the loop a `FoldedSteps` of no dims in its
    place (the call itself when it folds none)."""
    chosen = [loop for loop in inner_loops(call.loop.body) if loop.id in folded]
    if not chosen:
        return call
    top = call.loop
    nested = [loop for loop in chosen if not any(item is loop for item in top.body)]
    if len(chosen) > 1 and len(nested) == len(chosen) - 1:  # one string for a loop and those inside it
        line = chosen[0].location.lineno if chosen[0].location is not None else "?"
        raise _refused(nested[0], f"it is nested in the loop folded into the grid (line {line}), and only a loop "
                       "directly in the device loop's body folds (give pallas_loop_type as a list, one entry per "
                       "inner loop in source order, e.g. ['outer_pipeline', 'fori_loop'])")
    if len(chosen) > 1:
        raise _refused(chosen[1], f"a device loop folds one loop into its grid; this one holds {len(chosen)} "
                       "(give pallas_loop_type as a list, one entry per inner loop, folding one)")
    (loop,) = chosen
    position = next((i for i, item in enumerate(top.body) if item is loop), None)
    if position is None:
        raise _refused(loop, "only a loop directly in the device loop's body folds into its grid (this one is "
                       "inside another loop or a device if)")
    trips = _grid_trips(loop, top)
    prologue, epilogue = top.body[:position], top.body[position + 1:]
    # what earlier folded steps wrote: the loop body's stores (the prologue may not store; the
    # statements after the loop run at the last step only, so their writes come after every read)
    written = {id(node.tensor) for node in walk_nodes(loop.body) if isinstance(node, Store)}
    _check_prologue(prologue, loop, written)
    _check_epilogue(epilogue, loop, written)
    if any(trips.get(dim.id, dim.static_trips) == 0 for dim in loop.dims):  # a grid axis of no step runs no program
        return dataclasses.replace(call, loop=TileLoop(top.dims, [*prologue, _no_steps(loop), *epilogue],
                                                       top.location, top.carried, top.id))
    folded = _walk_order(loop, trips, (loop_orders or {}).get(loop.id))
    steps = FoldedSteps([], loop.body, loop.location, loop.carried, loop.id, folded=folded)
    merged = TileLoop([*top.dims, *folded], [*prologue, steps, *epilogue], top.location, top.carried, top.id)
    return dataclasses.replace(call, loop=merged, folded_dims=frozenset(dim.id for dim in loop.dims),
                               folded_trips=trips)


def _walk_order(loop: TileLoop, trips: dict[int, int], order: tuple | None) -> list[TileDim]:
    """The folded dims as grid axes, outermost first: `order` (the loop's `loop_orders`
    entry) or as written. A range from the outer tiles walks innermost: the blocks its
    skipped steps repeat are then the ones of the step just before them (an axis inside it
    would move away and back), so an order putting it outside another dim is refused."""
    dims = [loop.dims[i] for i in order] if order is not None else list(loop.dims)
    ranged = [dim for dim in dims if dim.id in trips]
    if order is not None and ranged and dims[-1] is not ranged[0]:
        line = loop.location.lineno if loop.location is not None else "?"
        raise exc.InvalidConfig(
            f"loop_orders {list(order)} for the loop folded into the grid (line {line}) walks "
            f"'{ranged[0].name}', whose range comes from the outer tiles, outside '{dims[-1].name}': a fold "
            f"walks such a dim innermost (its skipped steps repeat the block before them); put it last.",
            loop.location)
    return [*(dim for dim in dims if dim.id not in trips), *ranged]


def _grid_trips(loop: TileLoop, top: TileLoop) -> dict[int, int]:
    """The steps of the grid axis of each folded dim whose bounds are values of the outer
    tiles: the most tiles any outer program's range holds (its bounds evaluated at every
    outer program, as index maps compute them: grid_exprs.py). A program's tiles start at its
    own begin; its steps past its range skip, and the blocks they index repeat the last one
    it needs (grid_exprs.py:clamped_tile_block)."""
    trips = {}
    ranged = [dim for dim in loop.dims if isinstance(dim.begin, Value) or isinstance(dim.end, Value)]
    if len(ranged) > 1:
        raise _refused(loop, f"the ranges of {len(ranged)} of its dims come from the outer tiles; one of them folds "
                       "(its skipped steps must repeat the block of the step before them)")
    outer = {dim.id: axis for axis, dim in enumerate(top.dims)}
    shape = tuple(cdiv(dim.static_extent, dim.block_size) for dim in top.dims)
    for dim in loop.dims:
        if not isinstance(dim.begin, Value) and not isinstance(dim.end, Value):
            continue
        if any(isinstance(size, SymbolicSize) for size in (*shape, *_constants(dim.begin), *_constants(dim.end))):
            raise _refused(loop, "its range is a value of the outer tiles, whose largest extent depends on sizes "
                           "that vary from call to call under static_shapes=False")
        try:
            begin, end = (grid_expression(bound, outer) for bound in (dim.begin, dim.end))
        except NotAGridExpression:
            begin = end = None
        if begin is None or prefetched(begin) or prefetched(end):
            raise _refused(loop, "its range has no compile-time bound the grid could span: it is read from a "
                           "tensor or a runtime scalar (a range computed from the outer tiles and ints, as "
                           "[0, min(n, tile_q.end)), folds; a scalar argument in it, as a window's width w, is a runtime "
                           "scalar: w = hl.specialize(w) in host code makes it a constant of the kernel, as "
                           "hl.specialize(x.size(0)) does a size)")
        begins, ends = evaluate_grid(begin, shape), evaluate_grid(end, shape)
        visited = ends > begins  # the programs whose range holds a tile
        if visited.any():  # as a loop of static bounds, a range past a tensor is refused here
            check_tile_range(loop.body, dim, int(begins[visited].min()), int(ends[visited].max()))
        most = int((ends - begins).max()) if visited.size else 0
        trips[dim.id] = cdiv(max(most, 0), dim.block_size)
    return trips


def folded_order(call: DeviceLoopCall, order, folded_call: DeviceLoopCall):
    """The grid order of a folded call: the device loop's own (`loop_orders`, else as
    written), the folded dims innermost in the order `fold` gave them. Always given, so planning
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


def _constants(operand) -> list:
    """The ints an int scalar's expression holds (a size under static_shapes=False among them)."""
    if isinstance(operand, int):
        return [operand]
    node = operand.producer if isinstance(operand, Value) else None
    if node is None:
        return []
    out = []
    for arg in node.args:
        if isinstance(arg, (int, Value)):
            out += _constants(arg)
        elif isinstance(arg, TileDim):
            out += [*_constants(arg.begin), *_constants(arg.end)]
    return out


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
