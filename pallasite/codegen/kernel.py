"""Emit the Pallas kernel function of one device loop from its plan."""
from __future__ import annotations

import os

import torch

from ..ir import Load, Node, Store, TileLoop, Value, ops
from ..plan import Mask, PallasCallPlan
from ..plan.plans import InnerTileSlice, StreamSlot
from .lowering import Arg, OpCall, jnp_dtype, literal, lower
from .fori import ForiLoopEmitter
from .pipeline import PipelineEmitter
from .names import NameTable

import builtins

_RESERVED = ("jax", "jnp", "lax", "pl", "pltpu", "INTERPRET", *dir(builtins))


class KernelEmitter(ForiLoopEmitter, PipelineEmitter):
    """Writes `def <kernel>(refs...):` for one `PallasCallPlan`."""

    def __init__(self, plan: PallasCallPlan, source_file: str):
        self.plan = plan
        self.source_file = os.path.basename(source_file)
        self.names = NameTable(_RESERVED)
        self.env: dict[int, str] = {}
        self.lines: list[str] = []
        self._last_line: int | None = None
        self.loop_counters: dict[int, str] = {}  # inner TileDim id -> loop counter variable
        self.dynamic_dims: set[int] = set()  # inner dims whose counter is traced (fori_loop)
        self.loop_slots: dict[int, str] = {}  # inner loop id -> its double-buffer slot variable
        self.loop_steps: dict[int, str] = {}  # inner loop id -> its step counter (fori_loop)
        self.block_starts: dict[int, str] = {}  # emit_pipeline dim id -> its first block index
        self.lower_bounds: dict[int, str] = {}  # retiled dim id -> the begin masks must respect

    # ---------------------------------------------------------------- text --

    def emit(self, text: str, indent: int = 1) -> None:
        self.lines.append("    " * indent + text)

    def comment_source(self, node, indent: int = 1) -> None:
        loc = node.location
        if loc is None or loc.lineno == self._last_line:
            return
        self._last_line = loc.lineno
        self.emit(f"# {self.source_file}:{loc.lineno}: {loc.text.strip()}", indent)

    def render(self, operand) -> str:
        if isinstance(operand, Value):
            return self.env[operand.id]
        return literal(operand)

    def bind(self, value: Value, default: str) -> str:
        name = self.names.fresh(value.name or default)
        self.env[value.id] = name
        return name

    # -------------------------------------------------------------- kernel --

    def kernel_source(self) -> str:
        plan = self.plan
        refs = [op.ref_name for op in (*plan.scalar_prefetch, *plan.scalar_inputs, *plan.inputs, *plan.outputs)]
        refs += [scratch.name for scratch in plan.scratch]
        for ref in refs:
            self.names.fresh(ref)
        self.lines.append(f"def {plan.kernel_name}({', '.join(refs)}):")
        for axis in plan.grid:
            dim = axis.dim
            what = "grid index" if dim.is_grid else f"tile of {dim.block_size}"
            reason = f": {axis.reason}" if axis.reason else ""
            self.emit(f"# grid axis {plan.grid_axis_of[dim.id]}: {dim.name}, {what} over "
                      f"[{dim.begin}, {dim.end}) ({axis.semantics}{reason})")
        for update in plan.updates:
            self._emit_copy_in(update)
        self.emit_body(plan.call.loop.body)
        return "\n".join(self.lines)

    def _emit_copy_in(self, update) -> None:
        copy = f"{update.output_ref}[...] = {update.input_ref}[...]"
        self.emit(f"# '{update.symbol.name}' is updated in place: start from its current contents")
        if not update.first_visit_axes:
            self.emit(copy)
            return
        cond = " & ".join(f"(pl.program_id({a}) == 0)" for a in update.first_visit_axes)
        self.emit(f"@pl.when({cond})")
        self.emit("def _copy_in():")
        self.emit(copy, 2)

    def emit_body(self, body: list, indent: int = 1) -> None:
        for node in body:
            if isinstance(node, TileLoop):
                self._emit_inner_loop(node, indent)
                continue
            self.comment_source(node, indent)
            if isinstance(node, Load):
                self._emit_load(node, indent)
            elif isinstance(node, Store):
                self._emit_store(node, indent)
            else:
                self._emit_op(node, indent)

    # -------------------------------------------------------- inner loops --

    def _emit_inner_loop(self, loop: TileLoop, indent: int) -> None:
        """An inner loop over resident blocks: Python-unrolled if static, else lax.fori_loop."""
        loop_plan = self.plan.inner_loops[loop.id]
        self.comment_source(loop, indent)
        carried = []
        for item in loop.carried:
            var = self.names.fresh(item.name)
            self.emit(f"{var} = {self.render(item.init)}", indent)
            self.env[item.param.id] = var
            carried.append((item, var))
        if loop_plan.static_trips is not None and loop_plan.strategy == "unroll":
            self.emit(f"# inner loop '{', '.join(d.name for d in loop.dims)}': "
                      f"{'x'.join(map(str, loop_plan.static_trips))} steps unrolled over resident blocks", indent)
            inner = indent
            for dim, trips in zip(loop.dims, loop_plan.static_trips):
                counter = self.names.fresh(f"{dim.name}_step")
                self.loop_counters[dim.id] = counter
                self.emit(f"for {counter} in range({trips}):", inner)
                inner += 1
            self.emit_body(loop.body, inner)
            for (item, var), result in zip(carried, self.carried_results(loop, carried, inner)):
                if result != var:
                    self.emit(f"{var} = {result}", inner)
        elif loop_plan.strategy == "emit_pipeline":
            self._emit_pipeline(loop, carried, indent, loop_plan)
        else:
            self._emit_fori(loop, carried, indent, loop_plan)
        for item, var in carried:
            self.env[item.out.id] = var

    def carried_results(self, loop: TileLoop, carried: list, indent: int) -> list[str]:
        """The carried values at the end of an iteration: lanes past a partial tile of the
        loop keep their previous value (the plan's `CarriedMask`s)."""
        results = [self.render(item.result) for item, _ in carried]
        for mask in self.plan.carried_masks.get(loop.id, ()):
            item, var = carried[mask.carried]
            condition = self._range_condition(item.result.shape, mask.axis, mask.dim)
            name = self.names.fresh(f"{item.name}_kept")
            self.emit(f"# lanes past the end of '{mask.dim.name}' keep their previous '{item.name}'", indent)
            self.emit(f"{name} = jnp.where({condition}, {results[mask.carried]}, {var})", indent)
            results[mask.carried] = name
        return results

    # ------------------------------------------------------------- memory --

    def _ref_subscript(self, access) -> str:
        parts = []
        for item in access.ref_index:
            if isinstance(item, StreamSlot):
                parts.append(self.loop_slots[item.loop_id])
            elif isinstance(item, InnerTileSlice):
                dim = item.dim
                begin = self.env[dim.begin_value.id]
                if dim.id in self.dynamic_dims and isinstance(dim.begin, int) and dim.begin % dim.block_size == 0:
                    begin = f"pl.multiple_of({begin}, {dim.block_size})"
                parts.append(f"pl.ds({begin}, {dim.block_size})")
            else:
                parts.append(item if isinstance(item, str) else self.render(item))
        return ", ".join(parts)

    def _emit_load(self, node: Load, indent: int) -> None:
        access = self.plan.accesses[node.id]
        value = node.output
        text = f"{access.ref_name}[{self._ref_subscript(access)}]"
        if tuple(access.ref_shape) != tuple(value.shape):
            text = f"{text}.reshape({literal(tuple(value.shape))})"
        self.emit(f"{self.bind(value, node.tensor.name)} = {text}", indent)

    def _emit_store(self, node: Store, indent: int) -> None:
        access = self.plan.accesses[node.id]
        dtype = node.tensor.dtype
        target = f"{access.ref_name}[{self._ref_subscript(access)}]"
        (operand,) = node.args
        shape = tuple(access.ref_shape)
        if isinstance(operand, Value):
            text = self.render(operand)
            if operand.dtype != dtype:
                text = f"{text}.astype({jnp_dtype(dtype)})" if dtype != torch.bool else f"({text} != 0)"
            if tuple(operand.shape) != shape:
                text = (f"jnp.broadcast_to({text}, {literal(shape)})" if shape
                        else f"{text}.reshape(())")
        else:
            text = f"jnp.full({literal(shape)}, {literal(operand)}, {jnp_dtype(dtype)})" if shape else literal(operand)
        if access.store_masks:
            conditions = [self._range_condition(shape, axis, dim) for axis, dim in access.store_masks]
            self.emit("# keep the contents past the tile's end", indent)
            text = f"jnp.where({' & '.join(conditions)}, {text}, {target})"
        self.emit(f"{target} = {text}", indent)
        if access.write_back is not None:
            loop_id = access.write_back.loop_id
            step, slot = self.loop_steps[loop_id], self.loop_slots[loop_id]
            self.emit(f"{access.write_back.copy_fn}({step}, {slot}).start()  # write back asynchronously", indent)

    def _range_condition(self, shape, axis: int, dim) -> str:
        begin = self.env[dim.begin_value.id]
        end = self.render(dim.end)
        index = f"{begin} + lax.broadcasted_iota(jnp.int32, {literal(tuple(shape))}, {axis})"
        if dim.id in self.lower_bounds:
            return f"(({index} < {end}) & ({index} >= {self.lower_bounds[dim.id]}))"
        return f"({index} < {end})"

    # ---------------------------------------------------------------- ops --

    def _emit_op(self, node: Node, indent: int) -> None:
        op = ops.OPS[node.op]
        if op.kind is ops.OpKind.STRUCTURAL:
            self.emit(f"{self.bind(node.output, node.op)} = {self._structural(node)}", indent)
            return
        args = [
            Arg(self.render(a), a.shape, a.dtype, a) if isinstance(a, Value) else Arg(self.render(a), None, None, a)
            for a in node.args
        ]
        attrs = dict(node.kwargs)
        for mask in self.plan.masks.get(node.id, ()):
            args[mask.operand] = args[mask.operand].with_text(
                self._apply_mask(node, mask, args[mask.operand].text, indent))
            if op.reduction is not None and op.reduction.averages:
                attrs["count"] = self._valid_count(node, mask)
        outputs = node.outputs
        call = OpCall(node.op, args, attrs, outputs[0].shape, outputs[0].dtype)
        if len(outputs) > 1:
            raise NotImplementedError(f"multi-output op {node.op}")
        text = lower(call)
        if text in self.env.values():  # a no-op (same-dtype cast, contiguous()): reuse the name
            self.env[outputs[0].id] = text
            return
        self.emit(f"{self.bind(outputs[0], node.op)} = {text}", indent)

    def _structural(self, node: Node) -> str:
        """A structural op: a runtime scalar read or a tile attribute (`STRUCTURAL_RULES`)."""
        return STRUCTURAL_RULES[node.op](self, node)

    def _apply_mask(self, node: Node, mask: Mask, text: str, indent: int) -> str:
        operand = node.args[mask.operand]
        shape = tuple(operand.shape)
        fill = _typed_fill(mask.fill, operand.dtype)
        name = self.names.fresh(f"{self.env.get(operand.id, operand.name or 'v')}_masked")
        condition = self._range_condition(shape, mask.axis, mask.dim)
        self.emit(f"# mask the padded tail of '{mask.dim.name}' with {fill} before {node.op}", indent)
        self.emit(f"{name} = jnp.where({condition}, {text}, {fill})", indent)
        return name

    def _valid_count(self, node: Node, mask: Mask) -> str:
        dims = node.kwargs["dim"]
        shape = node.args[0].shape
        axes = range(len(shape)) if dims is None else dims
        masked = {m.axis: m.dim for m in self.plan.masks[node.id]}
        factors = []
        for axis in axes:
            if axis in masked:
                dim = masked[axis]
                begin = self.env[dim.begin_value.id]
                end = f"jnp.minimum({self.render(dim.end)}, {begin} + {dim.block_size})"
                if dim.id in self.lower_bounds:  # a retiled tile starts below the loop's begin
                    begin = f"jnp.maximum({self.lower_bounds[dim.id]}, {begin})"
                factors.append(f"jnp.maximum({end} - {begin}, 0)")
            else:
                factors.append(str(shape[axis]))
        return "(" + " * ".join(factors) + ")"


def _typed_fill(fill, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return literal(bool(fill))
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        if fill == float("inf"):
            return str(info.max)
        if fill == float("-inf"):
            return str(info.min)
        return str(int(fill))
    return literal(float(fill))


# ------------------------------------------------------- structural ops --
# The kernel emitter's own lowering of the registry's STRUCTURAL ops: each reads
# the emitter's state (grid axes, loop counters), so none is a `RULES` entry.


def _tile_step(emitter: KernelEmitter, dim) -> str:
    """A grid tile counts steps with pl.program_id, an inner tile with its loop counter."""
    if dim.id in emitter.plan.grid_axis_of:
        return f"pl.program_id({emitter.plan.grid_axis_of[dim.id]})"
    return emitter.loop_counters[dim.id]


def _scalar_arg(emitter: KernelEmitter, node: Node) -> str:
    return f"{node.args[0].name}_ref[0]"


def _tile_begin(emitter: KernelEmitter, node: Node) -> str:
    dim = node.args[0]
    step = _tile_step(emitter, dim)
    if dim.id in emitter.block_starts:
        return f"({emitter.block_starts[dim.id]} + {step}) * {dim.block_size}"
    term = step if dim.block_size == 1 else f"{step} * {dim.block_size}"
    return term if dim.begin == 0 else f"{emitter.render(dim.begin)} + {term}"


def _tile_id(emitter: KernelEmitter, node: Node) -> str:
    return _tile_step(emitter, node.args[0])


def _tile_end(emitter: KernelEmitter, node: Node) -> str:
    dim = node.args[0]
    begin = emitter.env[dim.begin_value.id]
    return f"jnp.minimum({begin} + {dim.block_size}, {emitter.render(dim.end)})"


def _tile_index(emitter: KernelEmitter, node: Node) -> str:
    dim = node.args[0]
    begin = emitter.env[dim.begin_value.id]
    return f"{begin} + lax.broadcasted_iota(jnp.int32, ({dim.block_size},), 0)"


def _tile_count(emitter: KernelEmitter, node: Node) -> str:
    dim = node.args[0]
    return f"({emitter.render(dim.end)} - {emitter.render(dim.begin)} + {dim.block_size - 1}) // {dim.block_size}"


STRUCTURAL_RULES = {
    "scalar_arg": _scalar_arg, "tile_begin": _tile_begin, "tile_id": _tile_id, "tile_end": _tile_end,
    "tile_index": _tile_index, "tile_count": _tile_count,
}
