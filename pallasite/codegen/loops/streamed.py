"""Emit a `fori_loop` loop: `lax.fori_loop` streaming tensors from HBM with
n-buffered DMA (`Stream.buffers`, double by default) (also the loop of a resident block with a
dynamic trip count). A multi-dim loop is one `fori_loop` over every dim's tiles (`steps.py`)."""
from __future__ import annotations

from ...ir import FullSlice, NewAxis, ScalarIndex, TileLoop, TileSlice
from ...plan import Direction, LoopPlan, Stream
from ...plan.loops import StreamedLoopPlan
from .registry import emits
from .steps import LoopTrips, counter_exprs, emit_counters, emit_trips


@emits(StreamedLoopPlan)
def emit_fori_loop(k, loop: TileLoop, loop_plan: LoopPlan, indent: int) -> list:
    from ..kernel import LoopFrame

    streams = loop_plan.streams
    carried = k.bind_carried(loop, indent, copy=False)
    trips = emit_trips(k, loop, loop_plan, indent)
    label = ", ".join(dim.name for dim in trips.dims)
    step = k.names.fresh(f"{label.replace(', ', '_')}_step")
    frame = LoopFrame({}, traced=True, step=step)
    k.frames[loop.id] = frame
    if streams:
        what = ", ".join(f"{s.symbol.name} ({s.direction.value})" for s in streams)
        depth = {2: "double-buffered", 3: "triple-buffered"}.get(_depth(streams), f"{_depth(streams)} buffers")
        k.emit(f"# inner loop '{label}': fori_loop streaming {what} from HBM, {depth}", indent)
        frame.slot = k.names.fresh(f"{label.replace(', ', '_')}_slot")
        for stream in streams:
            _emit_copy_builder(k, stream, trips, indent)
        _emit_first_copies(k, streams, trips.total, indent)
    else:
        k.emit(f"# inner loop '{label}': fori_loop over resident blocks", indent)
    if len(trips.dims) > 1:
        k.emit(f"# one step per ({label}) tile, '{trips.dims[-1].name}' fastest", indent)
    body_name = k.names.fresh(f"{label.replace(', ', '_')}_body")
    names = ", ".join(var for _, var in carried)
    pack = f"({names},)" if carried else "()"
    k.emit(f"def {body_name}({step}, carry):", indent)
    if carried:
        k.emit(f"{pack} = carry", indent + 1)
    frame.counters.update(emit_counters(k, trips, step, indent + 1))
    if streams:
        _emit_step_copies(k, streams, frame, trips.total, indent + 1)
    k.emit_loop_body(loop, indent + 1)
    results = ", ".join(k.carried_results(loop, carried, indent + 1))
    k.emit(f"return ({results},)" if carried else "return carry", indent + 1)
    inits = ", ".join(k.render(item.init) for item, _ in carried)
    k.emit(f"{pack if carried else '_'} = lax.fori_loop(0, {trips.total}, {body_name}, "
           f"{f'({inits},)' if carried else '()'})", indent)
    if streams:
        _emit_drain_outputs(k, streams, trips.total, indent)
    return carried


def _emit_copy_builder(k, stream: Stream, trips: LoopTrips, indent: int) -> None:
    """One function builds each DMA descriptor, for its start and for its wait."""
    counters = counter_exprs(trips, "step")
    parts = []
    for item in stream.index:
        if isinstance(item, NewAxis):
            continue
        if isinstance(item, TileSlice) and item.dim.id in counters:
            dim = item.dim
            counter = counters[dim.id]
            start = f"{counter if counter.isidentifier() or counter.isdigit() else f'({counter})'} * {dim.block_size}"
            if not (isinstance(dim.begin, int) and dim.begin == 0):
                start = f"{k.render(dim.begin)} + {start}"
            parts.append(f"pl.ds({start}, {dim.block_size})")
        elif isinstance(item, TileSlice):
            parts.append(f"pl.ds({k.env[item.dim.begin_value.id]}, {item.dim.block_size})")
        elif isinstance(item, FullSlice):
            parts.append(":")
        elif isinstance(item, ScalarIndex):
            parts.append(k.render(item.index))
    window = f"{stream.hbm_ref}.at[{', '.join(parts)}]"
    buffer = f"{stream.buffer}.at[slot]"
    src, dst = (window, buffer) if stream.direction is Direction.IN else (buffer, window)
    k.emit(f"def {stream.copy_fn}(step, slot):", indent)
    k.emit(f"return pltpu.make_async_copy({src}, {dst}, {stream.semaphores}.at[slot])", indent + 1)


def _depth(streams) -> int:
    """The loop's buffer depth (the plan gives every fori_loop stream the same one)."""
    return max(s.buffers for s in streams)


def _emit_first_copies(k, streams, trips: str, indent: int) -> None:
    inputs = [s for s in streams if s.direction is Direction.IN]
    if not inputs:
        return
    depth = _depth(streams)
    if depth == 2:
        k.emit(f"@pl.when({trips} > 0)", indent)
        k.emit("def _fetch_first_tile():", indent)
        for stream in inputs:
            k.emit(f"{stream.copy_fn}(0, 0).start()", indent + 1)
        return
    # A loop over them: a copy built at a constant step past a short tensor fails to trace,
    # even where it never runs; the step of a loop is a traced value.
    k.emit(f"# {depth} buffers: the copies of the first {depth - 1} tiles (as many as there are) start "
           "before the loop", indent)
    k.emit("def _fetch_first_tiles(ahead, carry):", indent)
    for stream in inputs:
        k.emit(f"{stream.copy_fn}(ahead, ahead).start()", indent + 1)
    k.emit("return carry", indent + 1)
    k.emit(f"lax.fori_loop(0, jnp.minimum({trips}, {depth - 1}), _fetch_first_tiles, 0)", indent)


def _emit_step_copies(k, streams, frame, trips: str, indent: int) -> None:
    step, slot = frame.step, frame.slot
    depth = _depth(streams)
    k.emit(f"{slot} = {step} % {depth}", indent)
    inputs = [s for s in streams if s.direction is Direction.IN]
    outputs = [s for s in streams if s.direction is Direction.OUT]
    if inputs:
        ahead = depth - 1
        k.emit("# start the next tile's copy before computing on this one" if ahead == 1 else
               f"# start the copy of the tile {ahead} steps ahead (into the slot step - 1 freed)", indent)
        k.emit(f"@pl.when({step} + {ahead} < {trips})", indent)
        k.emit("def _fetch_next_tile():", indent)
        for stream in inputs:
            target = f"1 - {slot}" if depth == 2 else f"({step} + {ahead}) % {depth}"
            k.emit(f"{stream.copy_fn}({step} + {ahead}, {target}).start()", indent + 1)
        for stream in inputs:
            k.emit(f"{stream.copy_fn}({step}, {slot}).wait()", indent)
    if outputs:
        k.emit("# this slot's previous write-back must finish before it is reused", indent)
        k.emit(f"@pl.when({step} >= {depth})", indent)
        k.emit("def _reuse_slot():", indent)
        for stream in outputs:
            k.emit(f"{stream.copy_fn}({step} - {depth}, {slot}).wait()", indent + 1)


def _emit_drain_outputs(k, streams, trips: str, indent: int) -> None:
    outputs = [s for s in streams if s.direction is Direction.OUT]
    if not outputs:
        return
    depth = _depth(streams)
    k.emit("# wait for the last write-backs", indent)
    for back in range(depth, 0, -1):
        name = {2: "_drain_second_last", 1: "_drain_last"}.get(back, f"_drain_{back}_from_last")
        k.emit(f"@pl.when({trips} >= {back})", indent)
        k.emit(f"def {name}():", indent)
        for stream in outputs:
            k.emit(f"{stream.copy_fn}({trips} - {back}, ({trips} - {back}) % {depth}).wait()", indent + 1)
