"""A loop's trip counts and its dims' tile counters, shared by the strategies' emitters.

A loop over several dims (`hl.tile([m, n])`) runs as one loop of the product
of its dims' trip counts (a `lax.fori_loop` or an `emit_pipeline` step): each
dim's tile counter is a digit of the flat step in mixed radix, in the plan's
`order` (outermost first, the last dim fastest, as `emit_pipeline` walks its
grid). A one-dim loop's counter is its step.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import TileDim, TileLoop
from ...plan import LoopPlan
from ..frames import tile_count


@dataclass(frozen=True)
class LoopTrips:
    """The generated trip counts of one loop: per dim in the plan's order, and in all."""

    dims: tuple[TileDim, ...]  # the loop's dims in the plan's order, outermost first
    trips: tuple[str, ...]  # per dim (same order): a variable or an int literal
    total: str  # the loop's steps: a variable


def read_scratch(ref: str, item) -> str:
    """A carried value from its VMEM scratch buffer (a 0-d value is stored as one element)."""
    return f"{ref}[...]" if item.init.shape else f"{ref}[...].reshape(())"


def write_scratch(k, ref: str, item, text: str) -> None:
    """Store `text`, a value of carried `item`, into its VMEM scratch buffer."""
    k.emit(f"{ref}[...] = {text if item.init.shape else f'jnp.reshape({text}, (1,))'}")


def ordered_dims(loop: TileLoop, loop_plan: LoopPlan) -> tuple[TileDim, ...]:
    return tuple(loop.dims[i] for i in loop_plan.order)


def emit_trips(k, loop: TileLoop, loop_plan: LoopPlan, *, static_literal: bool = True) -> LoopTrips:
    """Bind the loop's trip counts (checked in interpret mode where the data decides
    them). A multi-dim loop's static counts are written as numbers; a one-dim loop's
    too if `static_literal`."""
    dims = ordered_dims(loop, loop_plan)
    static = loop_plan.static_trips if static_literal else None
    if len(dims) == 1:
        (dim,) = dims
        total = k.names.fresh(f"{dim.name}_trips")
        checked = any(True for _ in k.plan.loop_checks(dim))
        k.emit(f"{total} = {static[0] if static is not None else tile_count(k, dim)}", pure=not checked)
        k.emit_loop_checks(dim, total)
        return LoopTrips(dims, (total,), total)
    trips = []
    for dim in dims:
        if dim.static_trips is not None:
            trips.append(str(dim.static_trips))
            continue
        var = k.names.fresh(f"{dim.name}_trips")
        # a negative count (end < begin) must not make a positive product with another dim's
        k.emit(f"{var} = jnp.maximum({tile_count(k, dim)}, 0)")
        k.emit_loop_checks(dim, var)
        trips.append(var)
    total = k.names.fresh("_".join(dim.name for dim in dims) + "_trips")
    if all(dim.static_trips is not None for dim in dims):
        k.emit(f"{total} = {loop_plan.total_trips}", comment=f"{' x '.join(trips)} tiles")
    else:
        k.emit(f"{total} = {' * '.join(trips)}")
    return LoopTrips(dims, tuple(trips), total)


def counter_exprs(trips: LoopTrips, step: str) -> dict[int, str]:
    """Each dim's tile counter as an expression of the flat `step`, by dim id."""
    exprs = {}
    for position, dim in enumerate(trips.dims):
        if trips.trips[position] == "1":  # a dim of one tile
            exprs[dim.id] = "0"
            continue
        inner = [count for count in trips.trips[position + 1:] if count != "1"]
        expr = step
        if inner:
            expr += f" // {inner[0]}" if len(inner) == 1 else f" // ({' * '.join(inner)})"
        if position > 0:
            expr += f" % {trips.trips[position]}"
        exprs[dim.id] = expr
    return exprs


def emit_counters(k, trips: LoopTrips, step: str) -> dict[int, str]:
    """Bind each dim's tile counter from the flat `step` (a one-dim loop's is the step)."""
    if len(trips.dims) == 1:
        return {trips.dims[0].id: step}
    counters = {}
    exprs = counter_exprs(trips, step)
    for dim in trips.dims:
        counters[dim.id] = k.names.fresh(f"{dim.name}_step")
        k.emit(f"{counters[dim.id]} = {exprs[dim.id]}", pure=True)
    return counters
