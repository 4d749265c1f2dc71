"""Emit the host wrapper: the JAX function around the pallas_calls.

Host tensors are immutable JAX arrays here, so every host tensor symbol maps
to its *current* JAX variable. A device loop that writes a tensor produces a
new variable for it; a view of a tensor is recomputed from its base when the
base has changed since, and writing into a reshape-view writes its base.
"""
from __future__ import annotations

import ast
import os
from collections.abc import Mapping

import torch

from .. import exc
from ..ir.sizes import dynamic_sizes
from ..ir import Allocate, DeviceLoopCall, HostOp, HostStore, KernelIR, ScalarSymbol, TensorSymbol, ops
from ..naming import as_written
from ..plan import KernelPlan, Memory, Operand, PallasCallPlan, ScratchKind
from ..plan.plans import BlockKind
from ..plan.index_expr import prefetched
from .index_text import index_map_text, index_text
from .lowering import Arg, OpCall, jnp_dtype, key_text, literal, lower
from .names import NameTable
from .tree import CodeBuilder, Layout, render


class HostEmitter:
    def __init__(self, plan: KernelPlan, names: NameTable, index_helpers: Mapping | None = None):
        """`index_helpers`: per kernel name, the index expressions with a module-level function."""
        self.plan = plan
        self.index_helpers = index_helpers or {}
        self.ir: KernelIR = plan.ir
        self.names = names
        self.code = CodeBuilder()
        self.current: dict[int, str] = {}  # symbol id -> JAX variable
        self.version: dict[int, int] = {}
        self.views: dict[int, tuple[HostOp, int]] = {}  # view symbol id -> (op, base version)
        self.undefined: set[int] = set()  # `torch.empty` allocations not materialized
        self.mutated_args: list[TensorSymbol] = []
        self._source = os.path.basename(self.ir.source_file)
        self._index_checks = {check.host_index: check for check in plan.host_index_checks}

    def emit(self, text: str, comment: str | None = None):
        return self.code.emit(text, comment)

    def note(self, text: str) -> None:
        """A comment line explaining the statements after it."""
        self.code.comment(text)

    def block(self, header: str, comment: str | None = None):
        return self.code.block(header, comment)

    def comment(self, location) -> None:
        """The statements emitted next come from the user's line at `location` (quoted above them)."""
        self.code.location = location

    # ------------------------------------------------------------ symbols --

    def define(self, symbol, text: str | None = None, comment: str | None = None) -> str:
        name = self.names.fresh(symbol.name)
        if text is not None:
            self.emit(f"{name} = {text}", comment)
        self.current[symbol.id] = name
        self.version[symbol.id] = self.version.get(symbol.id, -1) + 1
        return name

    def read(self, symbol) -> str:
        """The current JAX variable of a symbol, recomputing a stale view."""
        if isinstance(symbol, TensorSymbol) and symbol.id in self.undefined:
            self.undefined.discard(symbol.id)
            return self.define(symbol, f"jnp.zeros({literal(symbol.shape)}, {jnp_dtype(symbol.dtype)})")
        if symbol.id in self.views:
            op, base_version = self.views[symbol.id]
            if self.version.get(op.view_of.id) != base_version:
                self._emit_host_op(op)
        return self.current[symbol.id]

    # ------------------------------------------------------------- driver --

    def function_source(self) -> str:
        ir = self.ir
        # the kernel's own name, unless the module already uses it (a kernel named `elementwise`)
        self.function_name = self.names.fresh(ir.name)
        params = []
        for name, arg in zip(ir.params, ir.arguments):
            if isinstance(arg, (TensorSymbol, ScalarSymbol)):
                name = self.names.fresh(name)
                self.current[arg.id] = name
                self.version[arg.id] = 0
                params.append(name)
        if ir.random_seed is not None:  # torch.rand_like's seed, drawn by the runtime per call
            params.append(self.define(ir.random_seed))
        with self.block(f"def {self.function_name}({', '.join(params)}):") as function:
            self._emit_steps()
        return "\n".join(render([function], self._source))

    def _emit_steps(self) -> None:
        ir = self.ir
        self.sizes = dynamic_sizes(ir.arguments)
        if self.sizes:
            self.note("static_shapes=False: sizes are read from the inputs, so one module serves every size")
        for size, argument, axis in self.sizes:
            symbol = next(a for a in ir.arguments if getattr(a, "name", None) == argument)
            self.emit(f"{size} = {self.current[symbol.id]}.shape[{axis}]")
        items = [name for name in ir.captured if as_written(name) != name]  # a list argument's tensors
        scoped = [name for name in ir.captured if name not in items]
        if scoped:
            self.note(f"{', '.join(scoped)}: read from the kernel's enclosing scope, passed at each call")
        if items:
            self.note(f"{', '.join(items)}: the tensors {', '.join(map(as_written, items))} of list arguments, "
                      "passed at each call")
        for argument in self.plan.narrowed_arguments:
            self.note(f"{argument.name}: the caller's {str(argument.caller_dtype).removeprefix('torch.')}, "
                      f"narrowed to {str(argument.kernel_dtype).removeprefix('torch.')} before the call "
                      f"({'every value checked to fit' if argument.values_read else 'only its shape is read'})")
        calls = iter(self.plan.calls)
        for step in ir.steps:
            if isinstance(step, Allocate):
                self._emit_allocate(step)
            elif isinstance(step, HostOp):
                self.comment(step.location)
                self._emit_host_op(step)
            elif isinstance(step, HostStore):
                self.comment(step.location)
                self._emit_host_store(step)
            elif isinstance(step, DeviceLoopCall):
                self._emit_call(next(calls))
            else:
                raise TypeError(f"the host emitter has no rule for a {type(step).__name__} step")
        result = self._result_text(ir.result)
        mutated = ", ".join(self.read(s) for s in self.mutated_args)
        self.emit(f"return {result}, ({mutated}{',' if len(self.mutated_args) == 1 else ''})")

    def _emit_allocate(self, step: Allocate) -> None:
        symbol = step.symbol
        self.comment(step.location)
        if step.ramp is not None:  # torch.arange: start + i * step in int32 (whole numbers: exact), cast
            start, stride = step.ramp
            (length,) = symbol.shape
            ramp = f"jnp.arange({literal(length)}, dtype=jnp.int32)"
            ramp = ramp if stride == 1 else f"{ramp} * {literal(stride)}"
            ramp = ramp if start == 0 else f"{ramp} + {literal(start)}"
            self.define(symbol, ramp if symbol.dtype == torch.int32 else f"({ramp}).astype({jnp_dtype(symbol.dtype)})")
            return
        if symbol.fill is None:
            self.note(f"{symbol.name}: uninitialized until a device loop writes it")
            self.undefined.add(symbol.id)
            self.current[symbol.id] = symbol.name
            return
        self.define(symbol, f"jnp.full({literal(symbol.shape)}, {literal(symbol.fill)}, {jnp_dtype(symbol.dtype)})")

    def _emit_host_op(self, step: HostOp) -> None:
        args = [
            Arg(self.read(a), a.shape, a.dtype, a) if isinstance(a, TensorSymbol) else
            Arg(self.read(a), (), a.dtype, a) if isinstance(a, ScalarSymbol) else
            Arg(literal(a), None, None, a)
            for a in step.args
        ]
        results = step.result if isinstance(step.result, tuple) else (step.result,)
        first = results[0]
        shape = getattr(first, "shape", ())
        attrs = dict(step.kwargs)
        if step.op == "getitem":
            attrs["key"] = self._key(step.kwargs["key"], step.id)
        if ops.OPS[step.op].kind is ops.OpKind.CONTRACTION:
            attrs["precision"] = self.plan.dot_precision
        call = OpCall(step.op, args, attrs, shape, first.dtype)
        self.define(first, lower(call))
        if step.view_of is not None:
            self.views[first.id] = (step, self.version[step.view_of.id])

    def _key(self, key, step_id: int) -> tuple:
        """A host subscript with its index tensors and scalars as `Arg`s of their current
        variables; in interpret mode each passes its range check first."""
        items = key if isinstance(key, tuple) else (key,)
        out = []
        for position, item in enumerate(items):
            if isinstance(item, (TensorSymbol, ScalarSymbol)):
                name = self.read(item)
                check = self._index_checks.get((step_id, position))
                if check is not None:
                    with self.block("if INTERPRET is not None:", f"interpret mode checks {item.name}'s values"):
                        self.emit(f"{name} = CHECKS.host_indices({check.check_id}, {name}, limit={check.limit})")
                item = Arg(name, getattr(item, "shape", ()), item.dtype, item)
            out.append(item)
        return tuple(out)

    def _emit_host_store(self, step: HostStore) -> None:
        """`x[key] = v`: a new version of the whole tensor (`x.at[key].set(v)`)."""
        symbol, value = step.tensor, step.value
        key = key_text(self._key(step.key, step.id))
        if isinstance(value, (TensorSymbol, ScalarSymbol)):
            text = self.read(value)
            shape = getattr(value, "shape", ())
            if len(shape) > len(step.shape):  # torch drops the value's extra leading unit axes
                text = f"{text}.reshape({literal(tuple(shape[len(shape) - len(step.shape):]))})"
            if value.dtype != symbol.dtype:
                text = f"{text}.astype({jnp_dtype(symbol.dtype)})"
        else:
            text = _number_as(value, symbol.dtype)
        self.define(symbol, f"{self.read(symbol)}.at[{key}].set({text})")
        self._after_write(symbol, step.location)

    def _result_text(self, result) -> str:
        if isinstance(result, (TensorSymbol, ScalarSymbol)):
            return self.read(result)
        if isinstance(result, (list, tuple)):
            inner = ", ".join(self._result_text(r) for r in result)
            return f"({inner},)" if len(result) == 1 else f"({inner})"
        if isinstance(result, dict):
            return "{" + ", ".join(f"{k!r}: {self._result_text(v)}" for k, v in result.items()) + "}"
        return literal(result)

    # ---------------------------------------------------------- device call --

    def _emit_call(self, call: PallasCallPlan) -> None:
        self.comment(call.call.loop.location)
        if call.worklist is not None:
            self._emit_worklist(call, call.worklist)
        if any(axis.num_blocks == 0 for axis in call.grid):
            self.note("the loop has no iterations (a zero-size dimension): no kernel runs")
            for op in call.outputs:
                if op.symbol.id in self.undefined:
                    self.read(op.symbol)  # materialize the (empty) tensor
            return
        args = []
        for op in (*call.scalar_prefetch, *call.scalar_inputs):
            if isinstance(op.symbol, TensorSymbol):  # a prefetched table
                args.append(self.read(op.symbol))
            else:
                args.append(f"jnp.reshape({self.read(op.symbol)}, (1,)).astype({jnp_dtype(op.symbol.dtype)})")
        prefetch_refs = {op.symbol: op.ref_name for op in call.scalar_prefetch}
        grid = ", ".join(str(a.num_blocks) for a in call.grid)
        if call.host_checks:
            args[:len(call.scalar_prefetch)] = self._emit_host_checks(call, args[:len(call.scalar_prefetch)],
                                                                      prefetch_refs, grid)
        for op in call.inputs:
            args.append(self._padded(op))
        target = self._outputs_target(call)
        layout: dict = {}
        kernel = call.kernel_name
        if self.sizes:
            kernel = f"functools.partial({kernel}, {', '.join(f'{size}={size}' for size, _, _ in self.sizes)})"
        specs = self._grid_keywords(call, grid, prefetch_refs, layout)
        if call.scalar_prefetch:
            names = ", ".join(op.symbol.name for op in call.scalar_prefetch)
            grid_spec = ast.Call(self.code.expr("pltpu.PrefetchScalarGridSpec"), [], [
                ast.keyword("num_scalar_prefetch", ast.Constant(len(call.scalar_prefetch))), *specs])
            layout[id(grid_spec)] = Layout(expand=True, above=f"{names}: scalar-prefetched into SMEM; index maps "
                                                               "read them to choose blocks")
            specs = [ast.keyword("grid_spec", grid_spec)]
        out_shape = self._listed([f"jax.ShapeDtypeStruct({literal(op.call_shape)}, {jnp_dtype(op.symbol.dtype)})"
                                  for op in call.outputs], [None] * len(call.outputs), layout)
        keywords = [*specs, ast.keyword("out_shape", out_shape)]
        if call.aliases:
            aliases = self.code.expr(repr(call.aliases))
            layout[id(aliases)] = Layout(comment="updated in place")
            keywords.append(ast.keyword("input_output_aliases", aliases))
        keywords.append(ast.keyword("compiler_params", self.code.expr(_compiler_params(call))))
        keywords.append(ast.keyword("interpret", self.code.expr("INTERPRET")))
        pallas_call = ast.Call(self.code.expr("pl.pallas_call"), [self.code.expr(kernel)], keywords)
        layout[id(pallas_call)] = Layout(expand=True)
        value = ast.Call(pallas_call, [self.code.expr(arg) for arg in args], [])
        self.code.assign(target, value).layout.update(layout)
        for op in call.outputs:
            text = self.current[op.symbol.id]
            if op.view_shape is not None:
                text += f".reshape({literal(op.padded_shape or tuple(op.symbol.shape))})"
            comment = None
            if op.padded_shape is not None:
                window = ", ".join(f":{d}" for d in op.symbol.shape)
                text += f"[{window}]"
                comment = "drop the padding"
            if text != self.current[op.symbol.id]:
                self.define(op.symbol, text, comment)
            self._after_write(op.symbol)

    def _grid_keywords(self, call: PallasCallPlan, grid: str, prefetch_refs: dict, layout: dict) -> list:
        """`grid`, `in_specs`, `out_specs` and `scratch_shapes` of a pallas_call: one
        BlockSpec or scratch shape per line, each with its tensor's name."""
        rank, helpers = len(call.grid), self.index_helpers.get(call.kernel_name)
        inputs, outputs = (*call.scalar_inputs, *call.inputs), call.outputs
        keywords = [
            ast.keyword("grid", self.code.expr(f"({grid}{',' if len(call.grid) == 1 else ''})")),
            ast.keyword("in_specs", self._listed([_block_spec(op, rank, prefetch_refs, helpers) for op in inputs],
                                                 [_spec_comment(op) for op in inputs], layout)),
            ast.keyword("out_specs", self._listed([_block_spec(op, rank, prefetch_refs, helpers) for op in outputs],
                                                  [op.symbol.name for op in outputs], layout)),
        ]
        if call.scratch:
            keywords.append(ast.keyword("scratch_shapes", self._listed(
                [_scratch_shape(scratch) for scratch in call.scratch], [s.name for s in call.scratch], layout)))
        return keywords

    def _listed(self, texts: list[str], comments: list, layout: dict) -> ast.List:
        """A list written one element per line, each with its comment."""
        elements = [self.code.expr(text) for text in texts]
        for element, comment in zip(elements, comments):
            layout[id(element)] = Layout(comment=comment)
        listed = ast.List(elements, ast.Load())
        layout[id(listed)] = Layout(expand=True)
        return listed

    def _emit_worklist(self, call: PallasCallPlan, worklist) -> None:
        """The item tables of a flattened worklist (plan/worklists.py), built from the q
        range of every segment (the loop bounds as index expressions of the segment)."""
        tables = {symbol: self._table_text(symbol) for symbol in (*prefetched(worklist.begin),
                                                                   *prefetched(worklist.end))}
        n, rows = worklist.segments, worklist.rows_per_item
        bounds = self.names.fresh("segment_bounds")
        self.note(f"worklist: {n} segments cut into items of {worklist.grouping} x {worklist.tile_dim.block_size} "
                  f"'{worklist.tile_dim.name}' rows; the grid walks at most {worklist.max_items} items")
        self.emit(f"{bounds} = lambda i0: ({index_text(worklist.begin, tables)}, {index_text(worklist.end, tables)})",
                  comment=f"i0: '{worklist.segment_name}', every segment at once")
        begin, end = self.names.fresh("segment_begin"), self.names.fresh("segment_end")
        self.emit(f"{begin}, {end} = {bounds}(jnp.arange({n}, dtype=jnp.int32))")
        names = [self.define(symbol) for symbol in worklist.tables]
        count = self.names.fresh("work_count")
        self.emit(f"{', '.join(names)}, {count} = build_worklist({begin}, {end}, segments={n}, rows_per_item={rows}, "
                  f"max_items={worklist.max_items})")
        for check in (c for c in call.range_checks if c.worklist_ends):
            with self.block("if INTERPRET is not None:", "interpret mode checks the segments end inside the rows"):
                self.emit(f"{end} = CHECKS.host_indices({check.check_id}, {end}, limit={check.limit})")
                self.emit(f"{names[2]} = jnp.where(jnp.max({end}, initial=0) < {check.limit}, {names[2]}, 0)")
        for check in (c for c in call.range_checks if c.worklist_items):
            with self.block("if INTERPRET is not None:", "interpret mode checks the items fit the grid"):
                self.emit(f"{count} = CHECKS.host_indices({check.check_id}, {count}, limit={check.limit})")
                self.emit(f"{names[2]} = jnp.where({count} <= {worklist.max_items}, {names[2]}, 0)")
        for check in (c for c in call.range_checks if c.worklist_overlaps):
            overlaps = self.names.fresh("overlapping_segments")
            with self.block("if INTERPRET is not None:",
                            "the items run in parallel: interpret mode checks their rows are disjoint"):
                self.emit(f"{overlaps} = CHECKS.host_indices({check.check_id}, jnp.sum({end} < {begin}), "
                          f"limit={check.limit})")
                self.emit(f"{names[2]} = jnp.where({overlaps} == 0, {names[2]}, 0)")

    def _table_text(self, symbol) -> str:
        name = self.read(symbol)
        return name if isinstance(symbol, TensorSymbol) else f"jnp.reshape({name}, (1,))"

    def _emit_host_checks(self, call: PallasCallPlan, tables: list[str], prefetch_refs: dict,
                          grid: str) -> list[str]:
        """Interpret mode checks the rows prefetched tables choose, at every grid step, before
        the call (the plan's host `RangeCheck`s); the tables pass through the check."""
        names = []
        for op, text in zip(call.scalar_prefetch, tables):
            if not text.isidentifier():
                text = self.names.fresh(f"{op.symbol.name}_table")
                self.emit(f"{text} = {tables[len(names)]}")
            names.append(text)
        packed = f"({', '.join(names)},)"
        with self.block("if INTERPRET is not None:", "interpret mode checks the rows the tables choose"):
            for check in call.host_checks:
                index_map = index_map_text((check.block_index,), len(call.grid), prefetch_refs)
                self.emit(f"{packed} = CHECKS.block_indices({check.check_id}, ({grid},), {index_map}, "
                          f"{', '.join(names)}, limit={check.limit})")
        return names

    def _padded(self, op: Operand) -> str:
        """An input as the kernel takes it: padded so every DMA window stays in bounds,
        or reshaped to the plan's view."""
        name = self.read(op.symbol)
        if op.padded_shape is not None:
            pads = ", ".join(f"(0, {p - d})" for p, d in zip(op.padded_shape, op.symbol.shape))
            name = f"jnp.pad({name}, ({pads},))"
        if op.view_shape is not None:
            return f"{name}.reshape({literal(op.view_shape)})"
        return name

    def _outputs_target(self, call: PallasCallPlan) -> str:
        names = []
        for op in call.outputs:
            self.undefined.discard(op.symbol.id)
            names.append(self.define(op.symbol))
        return f"({', '.join(names)},)" if len(names) == 1 else f"({', '.join(names)})"

    def _after_write(self, symbol: TensorSymbol, location=None) -> None:
        """Propagate a write of `symbol` (by a device loop, or a host store at `location`)
        to what it views and to the caller."""
        if symbol.origin == "arg" and symbol not in self.mutated_args:
            self.mutated_args.append(symbol)
        if symbol.id not in self.views:
            return
        op, _ = self.views.pop(symbol.id)
        base = op.view_of
        if op.op not in ("reshape", "identity"):
            writer = "A device loop writes" if location is None else "Host code writes"
            raise exc.UnsupportedOperation(
                f"{writer} into '{symbol.name}', a {op.op} view of '{base.name}'; "
                "only reshape/view results can be written. Write the base tensor instead.",
                location or op.location,
            )
        self.define(base, f"{self.current[symbol.id]}.reshape({literal(base.shape)})")
        self.views[symbol.id] = (op, self.version[base.id])
        self._after_write(base, location)


def _number_as(value, dtype: torch.dtype) -> str:
    """A Python number stored into a tensor of `dtype`, converted as torch converts it."""
    if dtype == torch.bool:
        return literal(bool(value))
    if dtype.is_floating_point:
        return literal(float(value))
    if isinstance(value, float):  # truncated toward zero, as torch does
        return f"jnp.asarray({literal(value)}, {jnp_dtype(dtype)})"
    return literal(int(value))


def _compiler_params(call: PallasCallPlan) -> str:
    semantics = ", ".join(repr(a.semantics.value) for a in call.grid)
    params = f"dimension_semantics=({semantics}{',' if len(call.grid) == 1 else ''})"
    if call.vmem_limit_bytes is not None:
        params += f", vmem_limit_bytes={call.vmem_limit_bytes}"
    if call.remote is not None and call.remote.collective_id is not None:
        params += f", collective_id={call.remote.collective_id}"  # the barrier semaphore's id
    return f"pltpu.CompilerParams({params})"


def _spec_comment(op: Operand) -> str:
    """An input's BlockSpec comment: its name, and what a row-group axis's block holds."""
    groups = [axis for axis in op.axes if axis.kind is BlockKind.ROW_GROUP]
    if not groups:
        return op.symbol.name
    return (f"{op.symbol.name}: the {groups[0].size}-row group holding the chosen row (row // {groups[0].size}); "
            f"the kernel reads row % {groups[0].size} of it")


def _block_spec(op: Operand, grid_rank: int, prefetch_refs: dict, helpers: Mapping | None = None) -> str:
    if op.memory is Memory.SMEM:
        return "pl.BlockSpec(memory_space=pltpu.SMEM)"
    if op.memory is Memory.HBM:
        return "pl.BlockSpec(memory_space=pl.ANY)"
    if op.memory is not Memory.VMEM_BLOCK:
        raise TypeError(f"no BlockSpec for an operand in {op.memory}")
    shape = ", ".join("pl.Squeezed()" if s is None else str(s) for s in op.block_shape)
    shape = f"({shape},)" if len(op.block_shape) == 1 else f"({shape})"
    index_map = index_map_text(tuple(a.index for a in op.axes), grid_rank, prefetch_refs, helpers)
    return f"pl.BlockSpec({shape}, {index_map})"


def _scratch_shape(scratch) -> str:
    if scratch.kind is ScratchKind.DMA_SEMAPHORES:
        return f"pltpu.SemaphoreType.DMA({literal(scratch.shape)})"
    if scratch.kind is ScratchKind.MESH_SEMAPHORES:  # one per device of the mesh (known when traced)
        return "pltpu.SemaphoreType.REGULAR((mesh_devices(),))"
    if scratch.kind is ScratchKind.SMEM:
        return f"pltpu.SMEM({literal(scratch.shape)}, jnp.int32)"
    if scratch.kind is not ScratchKind.VMEM:
        raise TypeError(f"no scratch shape for {scratch.kind}")
    return f"pltpu.VMEM({literal(scratch.shape)}, {jnp_dtype(scratch.dtype)})"
