"""Emit an inner loop as `lax.fori_loop`: over resident blocks, or streaming
tensors from HBM with double-buffered DMA (the `fori_loop` strategy)."""
from __future__ import annotations

from ..ir import FullSlice, NewAxis, ScalarIndex, TileLoop, TileSlice
from ..plan import InnerLoopPlan
from ..plan.plans import Stream


class ForiLoopEmitter:
    """Mixin of `KernelEmitter`: one `lax.fori_loop` per inner loop."""

    def _emit_fori(self, loop: TileLoop, carried: list, indent: int, loop_plan: InnerLoopPlan) -> None:
        (dim,) = loop.dims  # the plan admits one dim here
        streams = loop_plan.streams
        step = self.names.fresh(f"{dim.name}_step")
        self.loop_counters[dim.id] = step
        self.loop_steps[loop.id] = step
        self.dynamic_dims.add(dim.id)
        trips = self.names.fresh(f"{dim.name}_trips")
        if loop_plan.static_trips is not None:
            self.emit(f"{trips} = {loop_plan.static_trips[0]}", indent)
        else:
            self.emit(f"{trips} = ({self.render(dim.end)} - {self.render(dim.begin)} + "
                      f"{dim.block_size - 1}) // {dim.block_size}", indent)
        if streams:
            what = ", ".join(f"{s.symbol.name} ({s.direction})" for s in streams)
            self.emit(f"# inner loop '{dim.name}': fori_loop streaming {what} from HBM, double-buffered", indent)
            slot = self.names.fresh(f"{dim.name}_slot")
            self.loop_slots[loop.id] = slot
            for stream in streams:
                self._emit_copy_builder(stream, dim, indent)
            self._emit_first_copies(streams, trips, indent)
        else:
            self.emit(f"# inner loop '{dim.name}': fori_loop over resident blocks", indent)
        body_name = self.names.fresh(f"{dim.name}_body")
        names = ", ".join(var for _, var in carried)
        pack = f"({names},)" if carried else "()"
        self.emit(f"def {body_name}({step}, carry):", indent)
        if carried:
            self.emit(f"{pack} = carry", indent + 1)
        if streams:
            self._emit_step_copies(streams, step, trips, indent + 1)
        self.emit_body(loop.body, indent + 1)
        results = ", ".join(self.carried_results(loop, carried, indent + 1))
        self.emit(f"return ({results},)" if carried else "return carry", indent + 1)
        target = pack if carried else "_"
        self.emit(f"{target} = lax.fori_loop(0, {trips}, {body_name}, {pack})", indent)
        if streams:
            self._emit_drain_outputs(streams, trips, indent)

    def _emit_copy_builder(self, stream: Stream, dim, indent: int) -> None:
        """One function builds each DMA descriptor, for its start and for its wait."""
        parts = []
        for item in stream.index:
            if isinstance(item, NewAxis):
                continue
            if isinstance(item, TileSlice) and item.dim is dim:
                start = f"step * {dim.block_size}"
                if not (isinstance(dim.begin, int) and dim.begin == 0):
                    start = f"{self.render(dim.begin)} + {start}"
                parts.append(f"pl.ds({start}, {dim.block_size})")
            elif isinstance(item, TileSlice):
                parts.append(f"pl.ds({self.env[item.dim.begin_value.id]}, {item.dim.block_size})")
            elif isinstance(item, FullSlice):
                parts.append(":")
            elif isinstance(item, ScalarIndex):
                parts.append(self.render(item.index))
        window = f"{stream.hbm_ref}.at[{', '.join(parts)}]"
        buffer = f"{stream.buffer}.at[slot]"
        src, dst = (window, buffer) if stream.direction == "in" else (buffer, window)
        self.emit(f"def {stream.copy_fn}(step, slot):", indent)
        self.emit(f"return pltpu.make_async_copy({src}, {dst}, {stream.semaphores}.at[slot])", indent + 1)

    def _emit_first_copies(self, streams, trips: str, indent: int) -> None:
        inputs = [s for s in streams if s.direction == "in"]
        if not inputs:
            return
        self.emit(f"@pl.when({trips} > 0)", indent)
        self.emit("def _fetch_first_tile():", indent)
        for stream in inputs:
            self.emit(f"{stream.copy_fn}(0, 0).start()", indent + 1)

    def _emit_step_copies(self, streams, step: str, trips: str, indent: int) -> None:
        slot = self.loop_slots[streams[0].loop_id]
        self.emit(f"{slot} = {step} % 2", indent)
        inputs = [s for s in streams if s.direction == "in"]
        outputs = [s for s in streams if s.direction == "out"]
        if inputs:
            self.emit("# start the next tile's copy before computing on this one", indent)
            self.emit(f"@pl.when({step} + 1 < {trips})", indent)
            self.emit("def _fetch_next_tile():", indent)
            for stream in inputs:
                self.emit(f"{stream.copy_fn}({step} + 1, 1 - {slot}).start()", indent + 1)
            for stream in inputs:
                self.emit(f"{stream.copy_fn}({step}, {slot}).wait()", indent)
        if outputs:
            self.emit("# this slot's previous write-back must finish before it is reused", indent)
            self.emit(f"@pl.when({step} >= 2)", indent)
            self.emit("def _reuse_slot():", indent)
            for stream in outputs:
                self.emit(f"{stream.copy_fn}({step} - 2, {slot}).wait()", indent + 1)

    def _emit_drain_outputs(self, streams, trips: str, indent: int) -> None:
        outputs = [s for s in streams if s.direction == "out"]
        if not outputs:
            return
        self.emit("# wait for the last write-backs", indent)
        for back, name in ((2, "_drain_second_last"), (1, "_drain_last")):
            self.emit(f"@pl.when({trips} >= {back})", indent)
            self.emit(f"def {name}():", indent)
            for stream in outputs:
                self.emit(f"{stream.copy_fn}({trips} - {back}, ({trips} - {back}) % 2).wait()", indent + 1)
