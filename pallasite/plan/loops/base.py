"""The mould every inner-loop strategy fits: `LoopStrategy` and what they share."""
from __future__ import annotations

from typing import Iterator

from ...ir import Load, NewAxis, ScalarIndex, TileLoop, walk_loops
from ..plans import Access, LoopPlan, Scratch, ScratchKind, Stream


class LoopStrategy:
    """How an inner tile loop runs, planned once per loop.

    A strategy decides its loop's plan (`plan_loop`: its own `LoopPlan`
    subclass), whether and how it streams tensors tile by tile from HBM
    (`streams`, `accepts_stream`, `stream_access`), the scratch buffers it
    needs. Codegen has one emitter
    per strategy, keyed by the plan class (codegen/loops/).
    """

    # Facts every strategy states in its own class (no defaults here; `FACTS` lists them and
    # tests/test_loop_strategies.py checks each strategy gives each one):
    name: str  # the `pallas_loop_type` value
    default_order: int | None  # the default config tries strategies in this order (None: never)
    streams: bool  # moves the tensors only this loop uses tile by tile
    windows_from_block_multiples: bool  # stream windows start at block multiples
    # each tile is a step of a compiled loop (`lax.fori_loop`, a pipeline), which the cost model
    # charges a step's overhead; False: static tiles are written out as straight-line code
    steps_at_run_time: bool
    # writes back only a partial tile's rows inside its range, so an output whose last tile
    # may end inside the tensor (a range read from data) streams instead of staying resident
    writes_partial_windows: bool
    # streams a tensor the loop reads and writes at the same windows (`out[w] += v`): each
    # window copied in, updated and written back before its buffer is reused
    streams_read_write: bool
    FACTS = ("name", "default_order", "streams", "windows_from_block_multiples", "steps_at_run_time",
             "writes_partial_windows", "streams_read_write")

    @property
    def copies_unaligned_windows(self) -> bool:
        """Copies windows starting anywhere by DMA, so tiles at data-dependent rows need not
        keep the tensors they index resident."""
        return self.streams and not self.windows_from_block_multiples

    def plan_loop(self, loop: TileLoop, names: set[str], order: tuple[int, ...]) -> LoopPlan:
        """`order`: the positions of `loop.dims`, outermost first (`loop_orders`)."""
        return LoopPlan(self.name, static_trips(loop), order=order)

    def accepts_stream(self, index: tuple, loop_dims: set[int], grid_axis_of: dict[int, int]) -> bool:
        """Whether a tensor accessed with `index` can be one of this loop's streams."""
        return self.streams

    def stream_buffers(self, direction, requested: int) -> int:
        """How many VMEM windows a stream in `direction` rotates through when the config
        asks for `requested` (`pallas_load_buffer_count`)."""
        return requested

    def stream_access(self, node, stream: Stream) -> Access:
        raise NotImplementedError(f"{self.name} does not stream tensors")

    def scratch(self, loop: TileLoop, plan: LoopPlan) -> tuple[Scratch, ...]:
        return ()



def carried_scratch(loop: TileLoop, refs: tuple[str, ...]) -> list[Scratch]:
    """One VMEM buffer per carried value of `loop` (a 0-d value as one element), named `refs`."""
    return [Scratch(name, ScratchKind.VMEM, item.init.shape or (1,), item.init.dtype)
            for item, name in zip(loop.carried, refs)]


def static_trips(loop: TileLoop) -> tuple[int, ...] | None:
    """Trips per dim, or None if any bound depends on data."""
    trips = tuple(dim.static_trips for dim in loop.dims)
    return None if any(t is None for t in trips) else trips


def inner_loops(body: list) -> Iterator[TileLoop]:
    """Every inner loop of a body, outer loops first (those under a device `if` too)."""
    return walk_loops(body)


def value_shape(node, stream: Stream) -> tuple[int, ...]:
    """The shape device code sees for a streamed access."""
    return tuple(node.outputs[0].shape) if isinstance(node, Load) else tuple(stream.window_shape)


def window_value_axes(node) -> tuple[int | None, ...]:
    """`Access.value_axes` of a streamed access: a window keeps every tensor axis but the
    scalar-indexed ones, in order."""
    from ..memory import loaded_value_axes

    kept = [axis for axis, item in enumerate(i for i in node.index if not isinstance(i, NewAxis))
            if not isinstance(item, ScalarIndex)]
    return loaded_value_axes(node.index, {axis: position for position, axis in enumerate(kept)})


def unique_name(base: str, used: set[str]) -> str:
    name, count = base, 1
    while name in used:
        name = f"{base}_{count}"
        count += 1
    used.add(name)
    return name
