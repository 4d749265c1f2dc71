"""Emit a `fori_loop` loop: `lax.fori_loop` streaming tensors from HBM with
n-buffered DMA (`Stream.buffers`, double by default) (also the loop of a resident block with a
dynamic trip count). A multi-dim loop is one `fori_loop` over every dim's tiles (`steps.py`)."""
from __future__ import annotations

from ...ir import FullSlice, NewAxis, ScalarIndex, TileLoop, TileSlice
from ...plan import Direction, LoopPlan, Stream
from ...plan.loops import StreamedLoopPlan
from ..frames import LoopFrame
from ..row_pieces import emit_row_pieces
from .registry import emits
from .steps import LoopTrips, counter_exprs, emit_counters, emit_trips


@emits(StreamedLoopPlan)
def emit_fori_loop(k, loop: TileLoop, loop_plan: LoopPlan) -> list:
    streams = loop_plan.streams
    carried = k.bind_carried(loop, copy=False)
    trips = emit_trips(k, loop, loop_plan)
    label = ", ".join(dim.name for dim in trips.dims)
    step = k.names.fresh(f"{label.replace(', ', '_')}_step")
    frame = LoopFrame({}, traced=True, step=step)
    k.frames[loop.id] = frame
    if streams:
        what = ", ".join(f"{s.symbol.name} ({s.direction.value})" for s in streams)
        depth = {2: "double-buffered", 3: "triple-buffered"}.get(_depth(streams), f"{_depth(streams)} buffers")
        k.comment(f"inner loop '{label}': fori_loop streaming {what} from HBM, {depth}")
        frame.slot = k.names.fresh(f"{label.replace(', ', '_')}_slot")
        for stream in streams:
            _emit_copy_builder(k, stream, trips)
        _emit_first_copies(k, streams, trips.total)
    else:
        k.comment(f"inner loop '{label}': fori_loop over resident blocks")
    if len(trips.dims) > 1:
        k.comment(f"one step per ({label}) tile, '{trips.dims[-1].name}' fastest")
    body_name = k.names.fresh(f"{label.replace(', ', '_')}_body")
    names = ", ".join(var for _, var in carried)
    pack = f"({names},)" if carried else "()"
    with k.block(f"def {body_name}({step}, carry):"):
        if carried:
            k.emit(f"{pack} = carry")
        frame.counters.update(emit_counters(k, trips, step))
        if streams:
            _emit_step_copies(k, streams, frame, trips.total)
        k.emit_loop_body(loop)
        results = ", ".join(k.carried_results(loop, carried))
        k.emit(f"return ({results},)" if carried else "return carry")
    inits = ", ".join(k.render(item.init) for item, _ in carried)
    k.emit(f"{pack if carried else '_'} = lax.fori_loop(0, {trips.total}, {body_name}, "
           f"{f'({inits},)' if carried else '()'})")
    if streams:
        _emit_drain_outputs(k, streams, trips.total)
    return carried


def _emit_copy_builder(k, stream: Stream, trips: LoopTrips) -> None:
    """One function builds each DMA descriptor, for its start and for its wait. An output
    written back in pieces (`Stream.partial_dim`) gets a builder of one piece: rows
    [row, row + size) of the step's window along that dim. A stream read and written gets
    the reading builder (`copy_fn`) and a writing one (`write_fn`, or the piece builder)."""
    counters = counter_exprs(trips, "step")
    items = [item for item in stream.index if not isinstance(item, NewAxis)]
    window = f"{stream.hbm_ref}.at[{', '.join(_window_item(k, item, counters) for item in items)}]"
    buffer = f"{stream.buffer}.at[slot]"
    if stream.partial_dim is not None:
        parts = [f"pl.ds({_window_start(k, item, counters)} + row, size)"
                 if isinstance(item, TileSlice) and item.dim is stream.partial_dim
                 else _window_item(k, item, counters) for item in items]
        rows = ", ".join([":"] * stream.partial_axis + ["pl.ds(row, size)"])
        with k.block(f"def {stream.piece_fn}(step, slot, row, size):"):
            k.emit(f"return pltpu.make_async_copy({stream.buffer}.at[slot, {rows}], "
                   f"{stream.hbm_ref}.at[{', '.join(parts)}], {stream.semaphores}.at[slot])")
    elif stream.direction is Direction.IN_OUT:
        with k.block(f"def {stream.write_fn}(step, slot):"):
            k.emit(f"return pltpu.make_async_copy({buffer}, {window}, {stream.semaphores}.at[slot])")
    if stream.partial_dim is not None and not stream.direction.reads:
        return
    src, dst = (window, buffer) if stream.direction.reads else (buffer, window)
    with k.block(f"def {stream.copy_fn}(step, slot):"):
        k.emit(f"return pltpu.make_async_copy({src}, {dst}, {stream.semaphores}.at[slot])")


def _window_start(k, item: TileSlice, counters: dict[int, str]) -> str:
    """Where a step's window starts along a tiled axis (`counters`: each loop dim's tile counter)."""
    dim = item.dim
    if dim.id not in counters:
        return k.render(dim.begin_value)
    start = f"({counters[dim.id]}) * {dim.block_size}"
    if not (isinstance(dim.begin, int) and dim.begin == 0):
        start = f"{k.render(dim.begin)} + {start}"
    return start


def emit_partial_write_back(k, stream: Stream) -> None:
    """After a store into an output written back in pieces: copy the tile's rows inside its
    range along `Stream.partial_dim` (min(block, end - begin), none past the range's end),
    so the rows past it keep what other steps or programs wrote there."""
    frame = k.frames[stream.loop_id]
    dim = stream.partial_dim
    rows = k.names.fresh(f"{stream.symbol.name}_rows")
    k.comment(f"write back only the tile's rows inside its range: the window's rows past "
              f"{k.describe(dim.end)} are other ranges' (or nobody's) and keep their contents")
    k.emit(f"{rows} = jnp.clip({k.render(dim.end)} - {k.render(dim.begin_value)}, 0, {dim.block_size})")
    emit_row_pieces(k, rows, dim.block_size.bit_length(),
                    lambda row, size: f"{stream.piece_fn}({frame.step}, {frame.slot}, {row}, {size})",
                    stream.symbol.name)


def _window_item(k, item, counters: dict[int, str]) -> str:
    """One axis of a step's window in HBM (`counters`: each loop dim's tile counter)."""
    if isinstance(item, TileSlice):
        return f"pl.ds({_window_start(k, item, counters)}, {item.dim.block_size})"
    if isinstance(item, FullSlice):
        return ":"
    if isinstance(item, ScalarIndex):
        return k.render(item.index)
    raise TypeError(f"a stream's window has no {type(item).__name__} axis")


def _depth(streams) -> int:
    """The loop's buffer depth (the plan gives every fori_loop stream the same one)."""
    return max(s.buffers for s in streams)


def _emit_first_copies(k, streams, trips: str) -> None:
    inputs = [s for s in streams if s.direction.reads]
    if not inputs:
        return
    depth = _depth(streams)
    if depth == 2:
        with k.block(f"@pl.when({trips} > 0)\ndef _fetch_first_tile():"):
            for stream in inputs:
                k.emit(f"{stream.copy_fn}(0, 0).start()")
        return
    # A loop over them: a copy built at a constant step past a short tensor fails to trace,
    # even where it never runs; the step of a loop is a traced value.
    k.comment(f"{depth} buffers: the copies of the first {depth - 1} tiles (as many as there are) start "
              "before the loop")
    with k.block("def _fetch_first_tiles(ahead, carry):"):
        for stream in inputs:
            k.emit(f"{stream.copy_fn}(ahead, ahead).start()")
        k.emit("return carry")
    k.emit(f"lax.fori_loop(0, jnp.minimum({trips}, {depth - 1}), _fetch_first_tiles, 0)")


def _emit_step_copies(k, streams, frame, trips: str) -> None:
    step, slot = frame.step, frame.slot
    depth = _depth(streams)
    k.emit(f"{slot} = {step} % {depth}")
    inputs = [s for s in streams if s.direction.reads]
    outputs = _written_back_whole(streams)
    if inputs:
        ahead = depth - 1
        k.comment("start the next tile's copy before computing on this one" if ahead == 1 else
                  f"start the copy of the tile {ahead} steps ahead (into the slot step - 1 freed)")
        with k.block(f"@pl.when({step} + {ahead} < {trips})\ndef _fetch_next_tile():"):
            for stream in inputs:
                target = f"1 - {slot}" if depth == 2 else f"({step} + {ahead}) % {depth}"
                k.emit(f"{stream.copy_fn}({step} + {ahead}, {target}).start()")
        for stream in inputs:
            k.emit(f"{stream.copy_fn}({step}, {slot}).wait()")
    if outputs:
        k.comment("this slot's previous write-back must finish before it is reused")
        with k.block(f"@pl.when({step} >= {depth})\ndef _reuse_slot():"):
            for stream in outputs:
                k.emit(f"{stream.copy_fn}({step} - {depth}, {slot}).wait()")


def _written_back_whole(streams) -> list:
    """The output streams whose windows are copied asynchronously, each waited for when its
    slot is reused (outputs written back in pieces, and streams read too, whose slot takes a
    later window's copy in, wait for each write at once)."""
    return [s for s in streams if s.direction is Direction.OUT and s.partial_dim is None]


def _emit_drain_outputs(k, streams, trips: str) -> None:
    outputs = _written_back_whole(streams)
    if not outputs:
        return
    depth = _depth(streams)
    k.comment("wait for the last write-backs")
    for back in range(depth, 0, -1):
        name = {2: "_drain_second_last", 1: "_drain_last"}.get(back, f"_drain_{back}_from_last")
        with k.block(f"@pl.when({trips} >= {back})\ndef {name}():"):
            for stream in outputs:
                k.emit(f"{stream.copy_fn}({trips} - {back}, ({trips} - {back}) % {depth}).wait()")
