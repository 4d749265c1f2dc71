"""Emit an inner loop as `pltpu.emit_pipeline` (the `emit_pipeline` strategy)."""
from __future__ import annotations

from ..ir import FullSlice, NewAxis, TileLoop, TileSlice
from ..plan import InnerLoopPlan


class PipelineEmitter:
    """Mixin of `KernelEmitter`: one nested Pallas pipeline per inner loop.

    Streamed tensors are the pipeline's BlockSpecs (it double-buffers their
    DMAs); carried values live in VMEM scratch across steps; the body reads its
    step from an SMEM counter. Tiles start at a block multiple, so a loop whose
    begin is not block-aligned also masks below its begin.
    """

    def _emit_pipeline(self, loop: TileLoop, carried: list, indent: int, loop_plan: InnerLoopPlan) -> None:
        (dim,) = loop.dims  # the plan admits one dim here
        block = dim.block_size
        first = self.names.fresh(f"{dim.name}_first_block")
        trips = self.names.fresh(f"{dim.name}_trips")
        if isinstance(dim.begin, int):
            self.emit(f"{first} = {dim.begin // block}", indent)
        else:
            self.emit(f"{first} = {self.render(dim.begin)} // {block}", indent)
        self.emit(f"{trips} = ({self.render(dim.end)} - {first} * {block} + {block - 1}) // {block}", indent)
        self.block_starts[dim.id] = first
        if loop_plan.aligned_begin:
            self.lower_bounds[dim.id] = self.render(dim.begin)
        streams = loop_plan.streams
        inputs = [s for s in streams if s.direction == "in"]
        outputs = [s for s in streams if s.direction == "out"]
        names = ", ".join(s.symbol.name for s in streams) or "nothing"
        self.emit(f"# inner loop '{dim.name}': emit_pipeline over {names}; carried values in VMEM scratch", indent)
        for (item, var), ref in zip(carried, loop_plan.carried_refs):
            value = var if item.init.shape else f"jnp.reshape({var}, (1,))"
            self.emit(f"{ref}[...] = {value}", indent)
        self.emit(f"{loop_plan.step_ref}[0] = 0", indent)
        body_name = self.names.fresh(f"{dim.name}_body")
        self.emit(f"def {body_name}({', '.join(s.block_ref for s in (*inputs, *outputs))}):", indent)
        step = self.names.fresh(f"{dim.name}_step")
        self.loop_counters[dim.id] = step
        self.emit(f"{step} = {loop_plan.step_ref}[0]", indent + 1)
        for (item, var), ref in zip(carried, loop_plan.carried_refs):
            self.emit(f"{var} = {self._read_scratch(ref, item)}", indent + 1)
        self.emit_body(loop.body, indent + 1)
        results = self.carried_results(loop, carried, indent + 1)
        for (item, var), ref, result in zip(carried, loop_plan.carried_refs, results):
            self.emit(f"{ref}[...] = {result if item.init.shape else f'jnp.reshape({result}, (1,))'}", indent + 1)
        self.emit(f"{loop_plan.step_ref}[0] = {step} + 1", indent + 1)
        self.emit(f"@pl.when({trips} > 0)", indent)
        self.emit(f"def _run_{body_name}():", indent)
        self.emit("pltpu.emit_pipeline(", indent + 1)
        self.emit(f"{body_name},", indent + 2)
        self.emit(f"grid=({trips},),", indent + 2)
        self.emit(f"in_specs=[{', '.join(self._pipeline_spec(s, dim, first) for s in inputs)}],", indent + 2)
        self.emit(f"out_specs=[{', '.join(self._pipeline_spec(s, dim, first) for s in outputs)}],", indent + 2)
        self.emit(f")({', '.join(s.hbm_ref for s in (*inputs, *outputs))})", indent + 1)
        for (item, var), ref in zip(carried, loop_plan.carried_refs):
            self.emit(f"{var} = {self._read_scratch(ref, item)}", indent)

    @staticmethod
    def _read_scratch(ref: str, item) -> str:
        return f"{ref}[...]" if item.init.shape else f"{ref}[...].reshape(())"

    def _pipeline_spec(self, stream, dim, first: str) -> str:
        indices = []
        for item in stream.index:
            if isinstance(item, NewAxis):
                continue
            if isinstance(item, TileSlice) and item.dim is dim:
                indices.append(f"{first} + j")
            elif isinstance(item, TileSlice):  # a block-aligned grid tile (the plan checked)
                indices.append(f"{self.env[item.dim.begin_value.id]} // {item.dim.block_size}")
            elif isinstance(item, FullSlice):
                indices.append("0")
        shape = ", ".join(map(str, stream.window_shape))
        shape = f"({shape},)" if len(stream.window_shape) == 1 else f"({shape})"
        index = f"({', '.join(indices)},)" if len(indices) == 1 else f"({', '.join(indices)})"
        return f"pl.BlockSpec({shape}, lambda j: {index})"
