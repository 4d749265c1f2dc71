"""Emit the Pallas kernel function of one device loop from its plan."""
from __future__ import annotations

import math
import os
import re

import torch

from dataclasses import dataclass

from ..ir import (
    FullSlice, IfBlock, Load, Node, RemoteBarrier, RemoteCopy, RemoteCopyStep, ScalarIndex, Store, TileLoop, Value,
    ops,
)
from ..plan import Mask, Memory, PallasCallPlan, TileRange
from ..plan.plans import InnerTileSlice, MergedPadding, PrefixSlice, ReductionChunk, RefOffset, StreamSlot
from .gathers import gather_text, one_hot_text
from .lanes import merged_condition
from .scatters import scatter_text
from .subviews import emit_spill, offset_text
from .structural import STRUCTURAL_RULES
from .lowering import Arg, OpCall, jnp_dtype, literal, lower
from .inline import _atom, _unwrap, _value_uses
from .worklists import emit_item_write_back
from .names import NameTable

import builtins

_RESERVED = ("jax", "jnp", "lax", "pl", "pltpu", "INTERPRET", "CHECKS", "RangeChecks", "random_uniform",
             "mesh_devices", "mesh_rank", *dir(builtins))


@dataclass
class LoopFrame:
    """The generated names of one inner loop, made by its strategy's emitter."""

    counters: dict[int, str]  # dim id -> the variable counting the dim's tiles
    traced: bool = False  # counters are traced values (lax.fori_loop, pipeline step), not Python ints
    step: str | None = None  # the loop's step (stream copy builders take it)
    slot: str | None = None  # the double-buffer slot of the current step


class KernelEmitter:
    """Writes `def <kernel>(refs...):` for one `PallasCallPlan`."""

    def __init__(self, plan: PallasCallPlan, source_file: str, sizes: tuple[str, ...] = ()):
        """`sizes`: the dynamic sizes (static_shapes=False) the host passes as keywords."""
        self.plan = plan
        self.source_file = os.path.basename(source_file)
        self.sizes = sizes
        self.names = NameTable((*_RESERVED, *sizes))
        self.env: dict[int, str] = {}
        self.lines: list[str] = []
        self._last_line: int | None = None
        self.frames: dict[int, LoopFrame] = {}  # inner TileLoop id -> its generated names
        self._range_scopes: list[dict] = [{}]  # (shape, axis, range) -> condition variable, per scope
        self._value_lines: dict[str, int] = {}  # variable of a pure value -> the line binding it
        self._uses, self._inlined = _value_uses(plan.call.loop.body)
        self._checks_done: set[int] = set()  # range checks already emitted
        self.branch_depth = 0  # > 0 inside a device if's branch function (codegen/branches.py)
        # > 0 inside an emit_pipeline body, where pl.program_id counts the pipeline's steps
        self.pipeline_depth = 0
        self.grid_ids: dict[int, str] = {}  # grid axis -> its program id, read at the kernel's top
        self.reduction_chunks: dict[int, str] = {}  # looped reduction node id -> its chunk counter
        self._widened: dict[tuple[int, int], str] = {}  # (node id, operand) -> its pre-broadcast variable
        self.barrier_rank: str | None = None  # this device's flat rank, when the kernel has barriers

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

    def bind_carried(self, loop: TileLoop, indent: int, copy: bool) -> list[tuple]:
        """A variable per carried value of `loop`, bound to its loop-time parameter.

        `copy`: the emitter rebinds the variable each step (a Python loop), so
        it starts as a copy of the initial value — unless nothing else reads
        that value, whose variable is then reused."""
        carried = []
        for item in loop.carried:
            init = self.render(item.init)
            if copy and self._uses.get(item.init.id) == 1 and init.isidentifier():
                var = init
            else:
                var = self.names.fresh(item.name)
                if copy:
                    self.emit(f"{var} = {init}", indent)
            self.env[item.param.id] = var
            carried.append((item, var))
        return carried

    # -------------------------------------------------------------- kernel --

    def kernel_source(self) -> str:
        plan = self.plan
        refs = [op.ref_name for op in (*plan.scalar_prefetch, *plan.scalar_inputs, *plan.inputs, *plan.outputs)]
        refs += [scratch.name for scratch in plan.scratch]
        for ref in refs:
            self.names.fresh(ref)
        if self.sizes:
            refs += ["*", *self.sizes]
        self.lines.append(f"def {plan.kernel_name}({', '.join(refs)}):")
        for axis in plan.grid:
            dim = axis.dim
            what = "grid index" if dim.is_grid else f"tile of {dim.block_size}"
            reason = f": {axis.reason}" if axis.reason else ""
            self.emit(f"# grid axis {plan.grid_axis_of[dim.id]}: {dim.name}, {what} over "
                      f"[{dim.begin}, {dim.end}) ({axis.semantics.value}{reason})")
        for axis, grid_axis in enumerate(plan.grid):  # dropped below unless a pipeline body reads it
            name = self.grid_ids[axis] = self.names.fresh(f"{grid_axis.dim.name}_program")
            self._value_lines[name] = len(self.lines)
            self.emit(f"{name} = pl.program_id({axis})")
        if plan.remote is not None and plan.remote.barrier_semaphores is not None:
            from .remote import emit_entry_rendezvous
            emit_entry_rendezvous(self)
        for update in plan.updates:
            self._emit_copy_in(update)
        self.emit_body(plan.call.loop.body)
        if plan.worklist is not None:
            for write_back in plan.worklist.write_backs:
                emit_item_write_back(self, write_back)
        self._drop_unused_values()
        return "\n".join(self.lines)

    def _drop_unused_values(self) -> None:
        """Drop the bindings of pure values nothing reads: tile attributes are bound where
        their loop starts, and a scalar may only feed an index map (`tile.begin // 32`)."""
        dropped: set[int] = set()
        code = [line.split("  # ")[0] if not line.lstrip().startswith("#") else "" for line in self.lines]
        while True:  # comments quote the user's lines, which name the same values: not uses
            text = "\n".join(line for i, line in enumerate(code) if i not in dropped)
            unused = {line for name, line in self._value_lines.items() if line not in dropped
                      and len(re.findall(rf"\b{re.escape(name)}\b", text)) == 1}
            if not unused:
                break
            dropped |= unused
        self.lines = [line for i, line in enumerate(self.lines) if i not in dropped]

    def _emit_copy_in(self, update) -> None:
        self.emit(f"# '{update.symbol.name}' is updated in place: start from its current contents")
        indent = 1
        if update.first_item_of_owner is not None:  # a flattened worklist: the owner's first item
            owner, item = update.first_item_of_owner, f"pl.program_id({self.plan.worklist.item_axis})"
            self.emit(f"@pl.when(({item} == 0) | ({owner}[{item}] != {owner}[jnp.maximum({item} - 1, 0)]))")
            self.emit("def _copy_in():")
            indent = 2
        elif update.first_visit_axes:
            cond = " & ".join(f"(pl.program_id({a}) == 0)" for a in update.first_visit_axes)
            self.emit(f"@pl.when({cond})")
            self.emit("def _copy_in():")
            indent = 2
        (operand,) = [op for op in self.plan.outputs if op.ref_name == update.output_ref]
        if operand.memory is not Memory.SMEM:
            self.emit(f"{update.output_ref}[...] = {update.input_ref}[...]", indent)
            return
        # SMEM holds scalars: Mosaic loads and stores them one at a time
        shape = operand.call_shape
        count = " * ".join(str(size) for size in shape) or "1"
        digits = []  # element i of the flat loop, in mixed radix (last axis fastest)
        for axis, size in enumerate(shape):
            inner = math.prod(shape[axis + 1:])
            digit = "i" if inner == 1 else f"i // {inner}"
            digits.append(digit if axis == 0 else f"{digit} % {size}")
        index = ", ".join(digits) or "0"
        self.emit("def _copy_scalar(i, carry):", indent)
        self.emit(f"{update.output_ref}[{index}] = {update.input_ref}[{index}]", indent + 1)
        self.emit("return carry", indent + 1)
        self.emit(f"lax.fori_loop(0, {count}, _copy_scalar, 0)", indent)

    def emit_body(self, body: list, indent: int = 1) -> None:
        for node in body:
            if isinstance(node, TileLoop):
                self._emit_inner_loop(node, indent)
                continue
            if isinstance(node, IfBlock):
                from .branches import emit_if
                emit_if(self, node, indent)
                continue
            if node.id in self.plan.skipped_nodes:  # only looped reductions read it, per chunk
                continue
            self.comment_source(node, indent)
            looped = self.plan.looped_reductions.get(node.id)
            if looped is not None:
                from .reduction_loops import emit_looped_reduction
                emit_looped_reduction(self, node, looped, indent)
            elif isinstance(node, Load):
                self._emit_load(node, indent)
            elif isinstance(node, Store):
                self._emit_store(node, indent)
            elif isinstance(node, (RemoteCopy, RemoteCopyStep, RemoteBarrier)):
                from .remote import emit_remote
                emit_remote(self, node, indent)
            else:
                self._emit_op(node, indent)
            for output in getattr(node, "outputs", ()):
                if output.id not in self._inlined:
                    self._emit_value_checks(output, indent)

    def emit_loop_body(self, loop: TileLoop, indent: int) -> None:
        """The body of an inner loop: a scope of its own for the masks it computes."""
        self._range_scopes.append({})
        try:
            self.emit_body(loop.body, indent)
        finally:
            self._range_scopes.pop()

    # -------------------------------------------------------- inner loops --

    def _emit_inner_loop(self, loop: TileLoop, indent: int) -> None:
        """An inner loop, by the emitter of its strategy's plan (codegen/loops/)."""
        from .loops import emitter_for

        loop_plan = self.plan.inner_loops[loop.id]
        self.comment_source(loop, indent)
        self._emit_pre_broadcasts(loop, indent)
        carried = emitter_for(loop_plan)(self, loop, loop_plan, indent)
        for item, var in carried:
            self.env[item.out.id] = var

    def _emit_pre_broadcasts(self, loop: TileLoop, indent: int) -> None:
        """`pallas_pre_broadcast`: the plan's loop-invariant operands, widened once here."""
        for widen in self.plan.pre_broadcasts.get(loop.id, ()):
            name = self.names.fresh(f"{widen.value.name or 'operand'}_wide")
            self.emit(f"{name} = jnp.broadcast_to({self.render(widen.value)}, {literal(widen.shape)})"
                      "  # loop-invariant: broadcast once, before the loop", indent)
            self._widened[(widen.node_id, widen.position)] = name

    def carried_results(self, loop: TileLoop, carried: list, indent: int) -> list[str]:
        """The carried values at the end of an iteration: lanes past a partial tile of the
        loop keep their previous value (the plan's `CarriedMask`s)."""
        results = [self.render(item.result) for item, _ in carried]
        for mask in self.plan.carried_masks.get(loop.id, ()):
            item, var = carried[mask.carried]
            self.emit(f"# lanes past the end of '{mask.dim.name}' keep their previous '{item.name}'", indent)
            condition = self.range_condition(item.result.shape, mask.axis, mask.range, indent)
            name = self.names.fresh(f"{item.name}_kept")
            self.emit(f"{name} = jnp.where({condition}, {results[mask.carried]}, {var})", indent)
            results[mask.carried] = name
        return results

    def emit_loop_checks(self, dim, trips: str, indent: int) -> None:
        """Interpret mode checks a data-dependent range of a loop dim against the tensors its
        tiles index (the plan's `RangeCheck`s); outside them, the dim runs no tiles (`trips`
        is the variable counting them)."""
        for check in self.plan.loop_checks(dim):
            self.emit("if INTERPRET is not None:  # interpret mode checks the data-dependent range", indent)
            self.emit(f"{trips} = CHECKS.loop_range({check.check_id}, {self.render(dim.begin)}, "
                      f"{self.render(dim.end)}, {trips}, limit={check.limit})", indent + 1)

    def _emit_value_checks(self, value: Value, indent: int) -> None:
        """Interpret mode checks a named scalar read from data where it is computed, before
        any access (or stream copy) uses it; the checked value keeps the name."""
        for check in self.plan.range_checks:
            if check.value is value and check.check_id not in self._checks_done:
                self._checks_done.add(check.check_id)
                name = self.render(value)
                call = self._check_call(check, name, indent)
                self.emit("if INTERPRET is not None:  # interpret mode checks the index read from data", indent)
                self.emit(f"{name} = {call}", indent + 1)

    def _emit_index_checks(self, node, indent: int) -> None:
        """An unnamed scalar index read from data is checked just before its access."""
        for check in self.plan.index_checks(node.id):
            if check.check_id in self._checks_done:
                continue
            self._checks_done.add(check.check_id)
            value = check.value
            text = self.render(value)
            if not text.isidentifier() or self.branch_depth:  # a branch must not rebind outer names
                name = self.bind(value, "index")
                self.emit(f"{name} = {_unwrap(text)}", indent)
                text = name
            call = self._check_call(check, text, indent)
            self.emit("if INTERPRET is not None:  # interpret mode checks the index read from data", indent)
            self.emit(f"{text} = {call}", indent + 1)

    def _check_call(self, check, text: str, indent: int) -> str:
        """The check of a scalar index, or of a gather's index vector on its valid lanes."""
        # The limit is a size variable under static_shapes=False: each call checks its own size.
        if not check.value.shape:
            return f"CHECKS.index({check.check_id}, {text}, limit={check.limit})"
        conditions = [self.range_condition(check.value.shape, axis, rng, indent) for axis, rng in
                      (((0, check.valid_lanes),) if check.valid_lanes is not None else check.valid_axes)]
        valid = f", {' & '.join(conditions)}" if conditions else ""
        return f"CHECKS.indices({check.check_id}, {text}{valid}, limit={check.limit})"

    def frame_of(self, dim) -> LoopFrame | None:
        """The frame of the inner loop that walks `dim` (None for a grid dim)."""
        for frame in self.frames.values():
            if dim.id in frame.counters:
                return frame
        return None

    # ------------------------------------------------------------- memory --

    def ref_subscript(self, access) -> str:
        return self._ref_subscript(access)

    def _ref_subscript(self, access) -> str:
        if not access.ref_index:
            return "..."
        parts = []
        for item in access.ref_index:
            if isinstance(item, FullSlice):
                parts.append(":")
            elif isinstance(item, ScalarIndex):
                parts.append(self.render(item.index))
            elif isinstance(item, StreamSlot):
                parts.append(self.frames[item.loop_id].slot)
            elif isinstance(item, PrefixSlice):
                parts.append(f":{item.length}")
            elif isinstance(item, ReductionChunk):
                counter = self.reduction_chunks[item.node_id]
                parts.append(f"pl.ds(pl.multiple_of({counter} * {item.chunk}, {item.chunk}), {item.chunk})")
            elif isinstance(item, RefOffset):
                parts.append(offset_text(self, item))
            else:  # InnerTileSlice
                dim = item.dim
                begin = self.env[dim.begin_value.id]
                frame = self.frame_of(dim)
                if frame is not None and frame.traced and dim.begin_aligned:
                    begin = f"pl.multiple_of({begin}, {dim.block_size})"
                parts.append(f"pl.ds({begin}, {dim.block_size})")
        return ", ".join(parts)

    def _emit_load(self, node: Load, indent: int) -> None:
        access = self.plan.accesses[node.id]
        value = node.output
        if 0 in value.shape:  # an empty slice: nothing to read (and no vector: see _emit_op)
            self.env[value.id] = f"jnp.zeros({literal(tuple(value.shape))}, {jnp_dtype(value.dtype)})"
            return
        self._emit_index_checks(node, indent)
        if access.gather is not None and access.gather.row_copy is not None:
            from .row_gathers import emit_row_gather

            emit_row_gather(self, node, access, indent)
            return
        text = f"{access.ref_name}[{self._ref_subscript(access)}]"
        if access.gather is not None:
            self._emit_gather(node, access, text, indent)
            return
        copy = self.plan.block_copies.get(node.id)
        if copy is not None:  # the loop writes the tensor: narrowing reads use this copy
            self.emit(f"{copy.scratch}[...] = {text}  # the loaded values, for reads after a write", indent)
        if tuple(access.ref_shape) != tuple(value.shape):
            text = f"{text}.reshape({literal(tuple(value.shape))})"
        name = self.bind(value, node.tensor.name)
        self._value_lines[name] = len(self.lines)  # dropped if only narrowing reads use the block
        self.emit(f"{name} = {text}", indent)

    def _emit_gather(self, node: Load, access, window: str, indent: int) -> None:
        """A load through an index vector: read the window, pick its rows (the plan's `Gather`)."""
        gather, value = access.gather, node.output
        rows = self.names.fresh(f"{node.tensor.name}_rows")
        self.emit(f"{rows} = {window}", indent)
        index = self.render(gather.index)
        hot = self.names.fresh(f"{gather.index.name or 'index'}_hot")
        self.emit(f"{hot} = {one_hot_text(index, gather.index.shape[0], gather.rows)}", indent)
        def bind(hint: str, text: str) -> str:
            name = self.names.fresh(hint)
            self.emit(f"{name} = {text}", indent)
            return name

        text = gather_text(gather, rows, tuple(access.ref_shape), hot, node.tensor.dtype, bind)
        shape = list(access.ref_shape)
        shape[gather.axis] = gather.index.shape[0]
        if tuple(shape) != tuple(value.shape):
            text = f"({text}).reshape({literal(tuple(value.shape))})"
        self.emit(f"{self.bind(value, node.tensor.name)} = {text}", indent)

    def _emit_store(self, node: Store, indent: int) -> None:
        access = self.plan.accesses[node.id]
        dtype = node.tensor.dtype
        self._emit_index_checks(node, indent)
        target = f"{access.ref_name}[{self._ref_subscript(access)}]"
        (operand,) = node.args
        if isinstance(operand, Value) and 0 in operand.shape:
            self.emit("# an empty slice: nothing to store", indent)
            return
        shape = tuple(access.ref_shape)
        if access.scatter is not None:  # the value has the index's lanes on the scattered axis
            shape = tuple(access.scatter.index.shape[0] if axis == access.scatter.axis else size
                          for axis, size in enumerate(shape))
        if isinstance(operand, Value):
            text = self.render(operand)
            if operand.dtype != dtype:
                text = (f"({text} != 0)" if dtype == torch.bool else f"{jnp_dtype(dtype)}({text})"
                        if not operand.shape else f"{text}.astype({jnp_dtype(dtype)})")
            if tuple(operand.shape) != shape:
                text = (f"{text}.reshape({literal(shape)})" if _kept_unit_axes(operand.shape, shape)
                        else f"jnp.broadcast_to({text}, {literal(shape)})" if shape else f"{text}.reshape(())")
        elif operand == 0 and shape:
            text = f"jnp.zeros({literal(shape)}, {jnp_dtype(dtype)})"
        else:
            text = f"jnp.full({literal(shape)}, {literal(operand)}, {jnp_dtype(dtype)})" if shape else literal(operand)
        if access.scatter is not None:
            text, shape = self._scatter_window(access, text, shape, target, dtype, indent), tuple(access.ref_shape)
        if access.store_masks:
            conditions = [self.range_condition(shape, m.axis, m.range, indent) for m in access.store_masks]
            self.emit("# keep the contents past the tile's end", indent)
            text = f"jnp.where({' & '.join(conditions)}, {text}, {target})"
        self.emit(f"{target} = {_unwrap(text)}", indent)
        if access.write_back is not None:
            frame = self.frames[access.write_back.loop_id]
            self.emit(f"{access.write_back.copy_fn}({frame.step}, {frame.slot}).start()  # write back asynchronously",
                      indent)

    def _scatter_window(self, access, values: str, lane_shape, window: str, dtype, indent: int) -> str:
        """The written window after a store through an index vector (the plan's `Scatter`)."""
        scatter = access.scatter
        valid = None if scatter.valid_lanes is None else self.range_condition(
            scatter.index.shape, 0, scatter.valid_lanes, indent)

        def bind(hint: str, text: str) -> str:
            name = self.names.fresh(hint)
            self.emit(f"{name} = {text}", indent)
            return name

        if not values.isidentifier():
            values = bind("scattered", _unwrap(values))
        index = self.render(scatter.index)
        if not index.isidentifier():
            index = bind("index", _unwrap(index))
        self.emit(f"# scatter into '{access.ref_name}': each row takes its last lane's value", indent)
        return scatter_text(scatter, index, valid, values, lane_shape, window, dtype, bind)

    def range_condition(self, shape, axis: int, rng: TileRange | MergedPadding, indent: int) -> str:
        """A boolean array of `shape`: which positions along `axis` lie in the tile range
        (a merged range: the valid lanes of an index tile's flat vector, `lanes.py`).

        Computed once per scope (a loop step) for each (shape, axis, range)."""
        key = (tuple(shape), axis, rng)
        for scope in reversed(self._range_scopes):
            if key in scope:
                return scope[key]
        if isinstance(rng, MergedPadding):
            name = merged_condition(self, tuple(shape), axis, rng, indent)
            self._range_scopes[-1][key] = name
            return name
        dim = rng.dim
        begin = self.env[dim.begin_value.id]
        index = f"{begin} + lax.broadcasted_iota(jnp.int32, {literal(tuple(shape))}, {axis})"
        condition = f"{index} < {self.render(dim.end)}"
        name = self.names.fresh(f"{dim.name}_valid")
        self.emit(f"{name} = {condition}", indent)
        self._range_scopes[-1][key] = name
        return name

    # ---------------------------------------------------------------- ops --

    def _emit_op(self, node: Node, indent: int) -> None:
        op = ops.OPS[node.op]
        if op.kind is ops.OpKind.STRUCTURAL:
            if node.op == "subview":
                emit_spill(self, node, indent)
            name = self.bind(node.output, node.op)
            self._value_lines[name] = len(self.lines)
            self.emit(f"{name} = {self._structural(node)}", indent)
            return
        if op.kind is ops.OpKind.INDEXED:  # interpret mode checks the index against the axis
            self._emit_index_checks(node, indent)
        empty = _empty_result(node, op)
        if empty is not None:  # Mosaic has no zero-sized vectors: an empty value is never built
            self.env[node.outputs[0].id] = empty
            return
        args = [
            Arg(self.render(a), a.shape, a.dtype, a) if isinstance(a, Value) else Arg(self.render(a), None, None, a)
            for a in node.args
        ]
        for position, arg in enumerate(args):
            widened = self._widened.get((node.id, position))
            if widened is not None:
                args[position] = Arg(widened, tuple(node.outputs[0].shape), arg.dtype, arg.raw)
        attrs = dict(node.kwargs)
        for mask in self.plan.masks.get(node.id, ()):
            args[mask.operand] = args[mask.operand].with_text(
                self._apply_mask(node, mask, args[mask.operand].text, indent))
            if op.reduction is not None and op.reduction.averages:
                attrs["count"] = self._valid_count(node, mask)
            if op.reduction is not None and op.reduction.flat_index and node.kwargs["dim"] is None:
                attrs["extents"] = self._valid_extents(node)
        outputs = node.outputs
        call = OpCall(node.op, args, attrs, outputs[0].shape, outputs[0].dtype)
        if len(outputs) > 1:
            raise NotImplementedError(f"multi-output op {node.op}")
        text = lower(call)
        if text in self.env.values():  # a no-op (same-dtype cast, contiguous()): reuse the name
            self.env[outputs[0].id] = text
            return
        if outputs[0].id in self._inlined:  # an unnamed part of one statement: inline it
            self.env[outputs[0].id] = _atom(text)
            return
        name = self.bind(outputs[0], node.op)
        self._value_lines[name] = len(self.lines)
        self.emit(f"{name} = {_unwrap(text)}", indent)

    def _structural(self, node: Node) -> str:
        """A structural op: a runtime scalar read or a tile attribute (`STRUCTURAL_RULES`)."""
        return STRUCTURAL_RULES[node.op](self, node)

    def _apply_mask(self, node: Node, mask: Mask, text: str, indent: int) -> str:
        operand = node.args[mask.operand]
        shape = tuple(operand.shape)
        fill = _typed_fill(mask.fill, operand.dtype)
        label = self.env.get(operand.id, "") if operand.id not in self._inlined else operand.name
        name = self.names.fresh(f"{label or node.op}_masked")
        self.emit(f"# mask the padded tail of '{mask.dim.name}' with {fill} before {node.op}", indent)
        condition = self.range_condition(shape, mask.axis, mask.range, indent)
        self.emit(f"{name} = jnp.where({condition}, {text}, {fill})", indent)
        return name

    def _valid_count(self, node: Node, mask: Mask) -> str:
        dims = node.kwargs["dim"]
        shape = node.args[0].shape
        axes = range(len(shape)) if dims is None else dims
        masked = {m.axis: m.range for m in self.plan.masks[node.id]}
        factors = [self.range_count(masked[axis]) if axis in masked else str(shape[axis]) for axis in axes]
        return "(" + " * ".join(factors) + ")"

    def _valid_extents(self, node: Node) -> list[str]:
        """Per axis of a reduction's source: how many of its positions are valid."""
        masked = {m.axis: m.range for m in self.plan.masks[node.id]}
        shape = node.args[0].shape
        return [self.range_count(masked[axis]) if axis in masked else str(size) for axis, size in enumerate(shape)]

    def range_count(self, rng: TileRange) -> str:
        """How many positions of the current tile lie in its range (a masked mean's divisor)."""
        dim = rng.dim
        begin = self.env[dim.begin_value.id]
        end = f"jnp.minimum({self.render(dim.end)}, {begin} + {dim.block_size})"
        return f"jnp.maximum({end} - {begin}, 0)"


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


def _kept_unit_axes(value_shape, shape) -> bool:
    """The store's window keeps size-1 axes the value lacks, which broadcasting cannot add in
    the middle (an integer index into an axis the block splits off: `out[tile, h, :]` with a
    window of (rows, 1, D)): the value is reshaped into it, same elements in the same order."""
    strip = lambda dims: tuple(size for size in dims if size != 1)  # noqa: E731
    if strip(value_shape) != strip(shape) or len(value_shape) >= len(shape):
        return False
    broadcasts = all(v in (1, s) for v, s in zip(reversed(tuple(value_shape)), reversed(tuple(shape))))
    return not broadcasts


def _empty_result(node: Node, op) -> str | None:
    """The text of an op's result that an empty operand decides, never materialized: an
    empty result (zeros of its shape, read only by other empty ops and skipped stores), or
    a reduction over an empty axis (its identity, as torch gives: 0 for a sum, 1 for a
    product, NaN for a mean)."""
    out = node.outputs[0]
    if 0 in out.shape:
        return f"jnp.zeros({literal(tuple(out.shape))}, {jnp_dtype(out.dtype)})"
    source = node.args[0] if node.args else None
    if op.reduction is None or not isinstance(source, Value) or 0 not in source.shape:
        return None
    fill = math.nan if op.reduction.averages else op.reduction.identity
    return f"jnp.full({literal(tuple(out.shape))}, {_typed_fill(fill, out.dtype)}, {jnp_dtype(out.dtype)})"
