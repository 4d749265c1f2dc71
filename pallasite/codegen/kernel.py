"""Emit the Pallas kernel function of one device loop from its plan."""
from __future__ import annotations

import ast
import builtins
import math
import os
from collections.abc import Mapping

from ..ir import (
    FoldedSteps, IfBlock, Load, Node, RemoteBarrier, RemoteCopy, RemoteCopyStep, Store, TileDim, TileLoop, Value, ops,
)
from ..plan import Mask, Memory, PallasCallPlan, TileRange
from ..plan.index_expr import grid_axes
from ..plan.plans import MergedPadding
from . import accesses
from .branches import emit_if
from .frames import LoopFrame, typed_fill
from .index_text import index_text
from .inline import value_uses
from .lanes import merged_condition
from .loops import emitter_for
from .loops.folded import emit_after_last_step
from .lowering import Arg, OpCall, jnp_dtype, literal, lower
from .runtime_imports import RUNTIME_IMPORTS
from .names import NameTable
from .reduction_loops import emit_looped_reduction
from .remote import emit_entry_rendezvous, emit_remote
from .structural import STATEMENT_RULES, STRUCTURAL_RULES
from .subviews import emit_spill
from .tree import CodeBuilder, render, tidy
from .worklists import emit_item_write_back

# module-level names the kernel's code reads, which its own names must not shadow
_RESERVED = ("jax", "jnp", "lax", "pl", "pltpu", "INTERPRET", "CHECKS", "RangeChecks", "mesh_devices", "mesh_rank",
             *(helper.name for helper in RUNTIME_IMPORTS), *dir(builtins))

__all__ = ["KernelEmitter", "LoopFrame", "STRUCTURAL_RULES"]


class KernelEmitter:
    """Writes `def <kernel>(refs...):` for one `PallasCallPlan`."""

    def __init__(self, plan: PallasCallPlan, source_file: str, sizes: tuple[str, ...] = (),
                 index_helpers: Mapping | None = None):
        """`sizes`: the dynamic sizes (static_shapes=False) the host passes as keywords;
        `index_helpers`: index expressions with a module-level function (index_text.py)."""
        self.plan = plan
        self.source_file = os.path.basename(source_file)
        self.sizes = sizes
        self.index_helpers = dict(index_helpers or {})
        self.names = NameTable((*_RESERVED, *sizes, *self.index_helpers.values()))
        self.code = CodeBuilder()
        self.env: dict[int, ast.expr] = {}  # Value id -> its expression (a name, or inlined)
        self.frames: dict[int, LoopFrame] = {}  # inner TileLoop id -> its generated names
        # per scope (a loop step, a branch): (shape, axis, range) -> its condition variable, and
        # ("masked", operand text, shape, axis, range, fill) -> the masked operand's variable
        self._range_scopes: list[dict] = [{}]
        self._uses, self._inlined = value_uses(plan.call.loop.body)
        self._checks_done: set[int] = set()  # range checks already emitted
        self.branch_depth = 0  # > 0 inside a device if's branch function (codegen/branches.py)
        # > 0 inside an emit_pipeline body, where pl.program_id counts the pipeline's steps
        self.pipeline_depth = 0
        self.grid_ids: dict[int, str] = {}  # grid axis -> its program id, read at the kernel's top
        self.reduction_chunks: dict[int, str] = {}  # looped reduction node id -> its chunk counter
        self._widened: dict[tuple[int, int], str] = {}  # (node id, operand) -> its pre-broadcast variable
        self.barrier_rank: str | None = None  # this device's flat rank, when the kernel has barriers

    # ---------------------------------------------------------------- tree --

    def emit(self, text: str, comment: str | None = None, pure: bool = False):
        """One statement (its expressions may hold `render`ed operands)."""
        return self.code.emit(text, comment, pure)

    def comment(self, text: str) -> None:
        self.code.comment(text)

    def block(self, header: str, comment: str | None = None):
        """`with k.block("def f():"):` — the statements emitted inside form its body."""
        return self.code.block(header, comment)

    def comment_source(self, node) -> None:
        """The statements emitted next come from `node`'s line (quoted above them)."""
        if node.location is not None:
            self.code.location = node.location

    def render(self, operand) -> str:
        """Text standing for an operand in expression text: a Value's name or inlined
        expression (substituted as a node when the text is parsed), a constant's literal."""
        if isinstance(operand, Value):
            return self.code.text(self.env[operand.id])
        return literal(operand)

    def describe(self, operand) -> str:
        """An operand as a comment shows it."""
        if isinstance(operand, Value):
            return ast.unparse(self.env[operand.id])
        return literal(operand)

    def bind(self, value: Value, default: str) -> str:
        name = self.names.fresh(value.name or default)
        self.env[value.id] = ast.Name(name, ast.Load())
        return name

    def bind_name(self, value: Value, name: str) -> None:
        """`value` is the variable `name`."""
        self.env[value.id] = ast.Name(name, ast.Load())

    def set_value(self, value: Value, text: str) -> None:
        """`value` is the expression `text` (a name bound elsewhere, or written inline)."""
        self.env[value.id] = self.code.expr(text)

    def is_name(self, operand) -> bool:
        return isinstance(operand, Value) and isinstance(self.env[operand.id], ast.Name)

    def bind_carried(self, loop: TileLoop, copy: bool) -> list[tuple]:
        """A variable per carried value of `loop`, bound to its loop-time parameter.

        `copy`: the emitter rebinds the variable each step (a Python loop), so
        it starts as a copy of the initial value — unless nothing else reads
        that value, whose variable is then reused."""
        carried = []
        for item in loop.carried:
            if copy and self._uses.get(item.init.id) == 1 and self.is_name(item.init):
                var = self.env[item.init.id].id
            else:
                var = self.names.fresh(item.name)
                if copy:
                    self.emit(f"{var} = {self.render(item.init)}")
            self.env[item.param.id] = ast.Name(var, ast.Load())
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
        with self.block(f"def {plan.kernel_name}({', '.join(refs)}):") as kernel:
            self._emit_preamble()
            self.emit_body(plan.call.loop.body)
            self.code.location = None
            if plan.worklist is not None:
                for write_back in plan.worklist.write_backs:
                    emit_item_write_back(self, write_back)
        tidy(self.code.root)
        return "\n".join(render([kernel], self.source_file))

    def _emit_preamble(self) -> None:
        plan = self.plan
        for axis in plan.grid:
            dim = axis.dim
            what = "grid index" if dim.is_grid else f"tile of {dim.block_size}"
            reason = f": {axis.reason}" if axis.reason else ""
            folded = ", the inner loop folded into the grid (outer_pipeline)" if dim.id in plan.call.folded_dims else ""
            span = f"over [{dim.begin}, {dim.end})"
            if dim.id in plan.call.folded_trips:  # its bounds are values of the outer tiles
                steps = f"{axis.num_blocks} step{'' if axis.num_blocks == 1 else 's'}"
                span = f"over each program's own range in {steps} (the steps past it skip)"
            self.comment(f"grid axis {plan.grid_axis_of[dim.id]}: {dim.name}, {what} "
                         f"{span}{folded} ({axis.semantics.value}{reason})")
        for axis, grid_axis in enumerate(plan.grid):  # dropped unless read (e.g. by a pipeline body)
            name = self.grid_ids[axis] = self.names.fresh(f"{grid_axis.dim.name}_program")
            self.emit(f"{name} = pl.program_id({axis})", pure=True)
        if plan.remote is not None and plan.remote.barrier_semaphores is not None:
            emit_entry_rendezvous(self)
        for update in plan.updates:
            self._emit_copy_in(update)

    def _emit_copy_in(self, update) -> None:
        self.comment(f"'{update.symbol.name}' is updated in place: start from its current contents"
                     + ("" if update.changes_along is None else
                        " where this step's block is new (skipped steps of "
                        f"'{self.plan.grid[update.changes_along].dim.name}' revisit the block before them)"))
        if update.first_item_of_owner is not None:  # a flattened worklist: the owner's first item
            owner, item = update.first_item_of_owner, f"pl.program_id({self.plan.worklist.item_axis})"
            with self.block(f"@pl.when(({item} == 0) | ({owner}[{item}] != {owner}[jnp.maximum({item} - 1, 0)]))\n"
                            "def _copy_in():"):
                self._copy_in(update)
        elif update.first_visit_axes or update.changes_along is not None:
            conditions = [f"(pl.program_id({a}) == 0)" for a in update.first_visit_axes]
            if update.changes_along is not None:
                conditions.append(self._block_changes(update))
            with self.block(f"@pl.when({' & '.join(conditions)})\ndef _copy_in():"):
                self._copy_in(update)
        else:
            self._copy_in(update)

    def _block_changes(self, update) -> str:
        """Whether this step's block of an in-place updated tensor differs from the previous
        step's along the folded range axis `update.changes_along` (its skipped steps repeat
        their block): the axis's first step, or an index-map result that moved."""
        (operand,) = [op for op in self.plan.outputs if op.ref_name == update.output_ref]
        axis = update.changes_along
        prefetch = {op.symbol: op.ref_name for op in self.plan.scalar_prefetch}
        now = [f"pl.program_id({a})" for a in range(len(self.plan.grid))]
        before = [f"(pl.program_id({a}) - 1)" if a == axis else name for a, name in enumerate(now)]
        moved = [f"({index_text(block.index, prefetch, now, self.index_helpers)} != "
                 f"{index_text(block.index, prefetch, before, self.index_helpers)})"
                 for block in operand.axes if axis in grid_axes(block.index)]
        return f"(({now[axis]} == 0) | {' | '.join(moved)})"

    def _copy_in(self, update) -> None:
        (operand,) = [op for op in self.plan.outputs if op.ref_name == update.output_ref]
        if operand.memory is not Memory.SMEM:
            self.emit(f"{update.output_ref}[...] = {update.input_ref}[...]")
            return
        # SMEM holds scalars: Mosaic loads and stores them one at a time
        shape = operand.call_shape
        if not shape:  # a 0-d tensor: its one element
            self.emit(f"{update.output_ref}[()] = {update.input_ref}[()]")
            return
        count = " * ".join(str(size) for size in shape)
        digits = []  # element i of the flat loop, in mixed radix (last axis fastest)
        for axis, size in enumerate(shape):
            inner = math.prod(shape[axis + 1:])
            digit = "i" if inner == 1 else f"i // {inner}"
            digits.append(digit if axis == 0 else f"{digit} % {size}")
        index = ", ".join(digits)
        with self.block("def _copy_scalar(i, carry):"):
            self.emit(f"{update.output_ref}[{index}] = {update.input_ref}[{index}]")
            self.emit("return carry")
        self.emit(f"lax.fori_loop(0, {count}, _copy_scalar, 0)")

    def emit_body(self, body: list) -> None:
        for position, node in enumerate(body):
            if isinstance(node, FoldedSteps) and node.folded:  # outer_pipeline: what follows runs at its last step
                self._emit_inner_loop(node)
                if position + 1 < len(body):
                    emit_after_last_step(self, node, body[position + 1:])
                return
            if isinstance(node, TileLoop):
                self._emit_inner_loop(node)
                continue
            if isinstance(node, IfBlock):
                emit_if(self, node)
                continue
            if node.id in self.plan.skipped_nodes:  # only looped reductions read it, per chunk
                continue
            self.comment_source(node)
            looped = self.plan.looped_reductions.get(node.id)
            if looped is not None:
                emit_looped_reduction(self, node, looped)
            elif isinstance(node, Load):
                accesses.emit_load(self, node)
            elif isinstance(node, Store):
                accesses.emit_store(self, node)
            elif isinstance(node, (RemoteCopy, RemoteCopyStep, RemoteBarrier)):
                emit_remote(self, node)
            elif isinstance(node, Node):
                self._emit_op(node)
            else:
                raise TypeError(f"the kernel emitter has no rule for {type(node).__name__} in a loop body")
            for output in getattr(node, "outputs", ()):
                if output.id not in self._inlined:
                    self._emit_value_checks(output)

    def emit_loop_body(self, loop: TileLoop) -> None:
        """The body of an inner loop: a scope of its own for the masks it computes."""
        self._range_scopes.append({})
        try:
            self.emit_body(loop.body)
        finally:
            self._range_scopes.pop()

    # -------------------------------------------------------- inner loops --

    def _emit_inner_loop(self, loop: TileLoop) -> None:
        """An inner loop, by the emitter of its strategy's plan (codegen/loops/)."""
        loop_plan = self.plan.inner_loops[loop.id]
        self.comment_source(loop)
        self._emit_pre_broadcasts(loop)
        carried = emitter_for(loop_plan)(self, loop, loop_plan)
        for item, var in carried:
            self.set_value(item.out, var)

    def _emit_pre_broadcasts(self, loop: TileLoop) -> None:
        """`pallas_pre_broadcast`: the plan's loop-invariant operands, widened once here."""
        for widen in self.plan.pre_broadcasts.get(loop.id, ()):
            name = self.names.fresh(f"{widen.value.name or 'operand'}_wide")
            self.emit(f"{name} = jnp.broadcast_to({self.render(widen.value)}, {literal(widen.shape)})",
                      comment="loop-invariant: broadcast once, before the loop")
            self._widened[(widen.node_id, widen.position)] = name

    def carried_results(self, loop: TileLoop, carried: list) -> list[str]:
        """The carried values at the end of an iteration: lanes past a partial tile of the
        loop keep their previous value (the plan's `CarriedMask`s)."""
        results = [self.render(item.result) for item, _ in carried]
        for mask in self.plan.carried_masks.get(loop.id, ()):
            item, var = carried[mask.carried]
            self.comment(f"lanes past the end of '{mask.dim.name}' keep their previous '{item.name}'")
            condition = self.range_condition(item.result.shape, mask.axis, mask.range)
            name = self.names.fresh(f"{item.name}_kept")
            self.emit(f"{name} = jnp.where({condition}, {results[mask.carried]}, {var})")
            results[mask.carried] = name
        return results

    def emit_loop_checks(self, dim, trips: str) -> None:
        """Interpret mode checks a data-dependent range of a loop dim against the tensors its
        tiles index (the plan's `RangeCheck`s); outside them, the dim runs no tiles (`trips`
        is the variable counting them)."""
        for check in self.plan.loop_checks(dim):
            if check.extents is not None:
                sides = [(self.render(d.begin), self.render(d.end), d.block_size) if isinstance(d, TileDim)
                         else ("0", str(d), d) for d in check.extents]
                (begin_a, end_a, block_a), (begin_b, end_b, block_b) = sides
                with self.block("if INTERPRET is not None:", "interpret mode checks that the tiles' extents agree"):
                    self.emit(f"{trips} = CHECKS.extents({check.check_id}, {begin_a}, {end_a}, {begin_b}, {end_b}, "
                              f"{trips}, blocks=({block_a}, {block_b}))")
                continue
            with self.block("if INTERPRET is not None:", "interpret mode checks the data-dependent range"):
                self.emit(f"{trips} = CHECKS.loop_range({check.check_id}, {self.render(dim.begin)}, "
                          f"{self.render(dim.end)}, {trips}, limit={check.limit})")

    def _emit_value_checks(self, value: Value) -> None:
        """Interpret mode checks a named scalar read from data where it is computed, before
        any access (or stream copy) uses it; the checked value keeps the name."""
        for check in self.plan.range_checks:
            # a masked scatter's index is checked at its store, where its lane mask exists, and an
            # access under a device `if` where it runs
            if (check.value is value and check.check_id not in self._checks_done and check.lane_mask is None
                    and not check.guarded):
                self._checks_done.add(check.check_id)
                name = self.render(value)
                call = self._check_call(check, name)
                with self.block("if INTERPRET is not None:", "interpret mode checks the index read from data"):
                    self.emit(f"{name} = {call}")

    def emit_index_checks(self, node) -> None:
        """An unnamed scalar index read from data is checked just before its access."""
        for check in self.plan.index_checks(node.id):
            if check.check_id in self._checks_done:
                continue
            self._checks_done.add(check.check_id)
            value = check.value
            text = "" if value is None else self.render(value)
            if check.nonzero or check.recompute is not None:  # a check only: the op reads its operands as
                # they are (a name may be an outer function's, which a loop body's function must not rebind)
                what = ("that the divisor holds no 0" if check.nonzero else
                        "that torch's int64 result fits int32")
                call = self._check_call(check, text)  # its lane conditions outside the if: a mask reuses them
                with self.block("if INTERPRET is not None:", f"interpret mode checks {what}"):
                    self.emit(call)
                continue
            if not self.is_name(value) or self.branch_depth:  # a branch must not rebind outer names
                name = self.bind(value, "index")
                self.emit(f"{name} = {text}")
                text = name
            call = self._check_call(check, text)
            with self.block("if INTERPRET is not None:", "interpret mode checks the index read from data"):
                self.emit(f"{text} = {call}")

    def _int64_check_call(self, check) -> str:
        """`CHECKS.fits_int32(id, op, operands, valid lanes of each, **attrs)`: the op recomputed
        exactly on the host from its operands (plan/int64_values.py)."""
        op, attrs = check.recompute
        operands = [self.render(item) for item in check.operands]
        valid = []
        for item, axes in zip(check.operands, check.operand_valid):
            conditions = [self.range_condition(item.shape, axis, rng) for axis, rng in axes]
            valid.append(" & ".join(conditions) if conditions else "None")
        extra = "".join(f", {key}={value!r}" for key, value in attrs)
        return (f"CHECKS.fits_int32({check.check_id}, {op!r}, ({', '.join(operands)},), "
                f"({', '.join(valid)},){extra})")

    def _check_call(self, check, text: str) -> str:
        """The check of a scalar index, or of a gather's index vector on its valid lanes (or of
        an integer divisor: no 0 on them)."""
        # The limit is a size variable under static_shapes=False: each call checks its own size.
        if check.nonzero:
            conditions = [self.range_condition(check.value.shape, axis, rng) for axis, rng in check.valid_axes]
            valid = f", {' & '.join(conditions)}" if conditions else ""
            return f"CHECKS.divisors({check.check_id}, {text}{valid})"
        if check.recompute is not None:
            return self._int64_check_call(check)
        if not check.value.shape:
            return f"CHECKS.index({check.check_id}, {text}, limit={check.limit})"
        conditions = [self.range_condition(check.value.shape, axis, rng) for axis, rng in
                      (((0, check.valid_lanes),) if check.valid_lanes is not None else check.valid_axes)]
        if check.lane_mask is not None:
            conditions.append(self.render(check.lane_mask))
        valid = f", {' & '.join(conditions)}" if conditions else ""
        return f"CHECKS.indices({check.check_id}, {text}{valid}, limit={check.limit})"

    def frame_of(self, dim) -> LoopFrame | None:
        """The frame of the inner loop that walks `dim` (None for a grid dim)."""
        for frame in self.frames.values():
            if dim.id in frame.counters:
                return frame
        return None

    def ref_subscript(self, access) -> str:
        return accesses.ref_subscript(self, access)

    def _in_scope(self, key) -> str | None:
        """The variable an enclosing scope (`_range_scopes`) computed for `key`, if any."""
        for scope in reversed(self._range_scopes):
            if key in scope:
                return scope[key]
        return None

    def range_condition(self, shape, axis: int, rng: TileRange | MergedPadding) -> str:
        """A boolean array of `shape`: which positions along `axis` lie in the tile range
        (a merged range: the valid lanes of an index tile's flat vector, `lanes.py`).

        Computed once per scope (a loop step) for each (shape, axis, range)."""
        key = (tuple(shape), axis, rng)
        known = self._in_scope(key)
        if known is not None:
            return known
        if isinstance(rng, MergedPadding):
            name = merged_condition(self, tuple(shape), axis, rng)
            self._range_scopes[-1][key] = name
            return name
        dim = rng.dim
        begin = self.render(dim.begin_value)
        index = f"{begin} + lax.broadcasted_iota(jnp.int32, {literal(tuple(shape))}, {axis})"
        name = self.names.fresh(f"{dim.name}_valid")
        self.emit(f"{name} = {index} < {self.render(dim.end)}")
        self._range_scopes[-1][key] = name
        return name

    # ---------------------------------------------------------------- ops --

    def _emit_op(self, node: Node) -> None:
        op = ops.OPS[node.op]
        if node.op in STATEMENT_RULES:  # a statement with no value
            for statement in STATEMENT_RULES[node.op](self, node):
                self.emit(statement)
            return
        if op.kind is ops.OpKind.STRUCTURAL:
            if node.op == "subview":
                emit_spill(self, node)
            name = self.bind(node.output, node.op)
            self.emit(f"{name} = {STRUCTURAL_RULES[node.op](self, node)}", pure=True)
            return
        if op.kind is ops.OpKind.INDEXED or self.plan.index_checks(node.id):  # an index, or a divisor
            self.emit_index_checks(node)
        empty = _empty_result(node, op)
        if empty is not None:  # Mosaic has no zero-sized vectors: an empty value is never built
            self.set_value(node.outputs[0], empty)
            return
        if len(node.outputs) > 1:
            raise NotImplementedError(f"multi-output op {node.op}")
        args, attrs = self._op_operands(node, op)
        output = node.output
        text = lower(OpCall(node.op, args, attrs, output.shape, output.dtype))
        if any(text == arg.text for arg in args if not arg.is_constant):  # a no-op (same-dtype cast)
            self.set_value(output, text)
            return
        if output.id in self._inlined:  # an unnamed part of one statement: inline it
            self.set_value(output, text)
            return
        name = self.bind(output, node.op)
        self.emit(f"{name} = {text}", pure=True)

    def _op_operands(self, node: Node, op) -> tuple[list[Arg], dict]:
        """The rule's operands (widened, masked) and attrs (a masked mean's count)."""
        floats = any(isinstance(a, Value) and a.dtype.is_floating_point for a in node.args)
        args = [
            Arg(self.render(a), a.shape, a.dtype, a) if isinstance(a, Value) else Arg(self.render(a), None, None, a)
            for a in node.args
        ]
        for position, raw in enumerate(node.args):  # `x + 2**31` of a float x: torch's float scalar (a JAX
            if floats and type(raw) is int and not -2**31 <= raw < 2**31:  # int literal would overflow int32)
                args[position] = Arg(literal(float(raw)), None, None, float(raw))
        for position, arg in enumerate(args):
            widened = self._widened.get((node.id, position))
            if widened is not None:
                args[position] = Arg(widened, tuple(node.outputs[0].shape), arg.dtype, arg.raw)
        attrs = dict(node.kwargs)
        if op.kind is ops.OpKind.CONTRACTION:  # the kernel's, unless the node asks exact products
            attrs.setdefault("precision", self.plan.dot_precision)
        for mask in self.plan.masks.get(node.id, ()):
            args[mask.operand] = args[mask.operand].with_text(self._apply_mask(node, mask, args[mask.operand].text))
            if op.reduction is not None and op.reduction.averages:
                attrs["count"] = self._valid_count(node)
            if op.reduction is not None and op.reduction.flat_index and node.kwargs["dim"] is None:
                attrs["extents"] = self._valid_extents(node)
        return args, attrs

    def _apply_mask(self, node: Node, mask: Mask, text: str) -> str:
        """`text` (node's operand) with the padded tail filled: once per scope for each
        (operand text, axis, range, fill), as `range_condition` computes its conditions."""
        operand = node.args[mask.operand]
        shape = tuple(operand.shape)
        fill = typed_fill(mask.fill, operand.dtype)
        if _float_result_of(node) and not operand.dtype.is_floating_point:
            # logsumexp of bool/int values: their padding is -inf in float32, which they have none of
            text, fill = f"{text}.astype(jnp.float32)", literal(float(mask.fill))
        key = ("masked", text, shape, mask.axis, mask.range, fill)
        known = self._in_scope(key)
        if known is not None:
            return known
        label = self.env[operand.id].id if self.is_name(operand) else operand.name
        name = self.names.fresh(f"{label or node.op}_masked")
        self.comment(f"mask the padded tail of {mask.names} with {fill} before {node.op}")
        condition = self.range_condition(shape, mask.axis, mask.range)
        self.emit(f"{name} = jnp.where({condition}, {text}, {fill})")
        self._range_scopes[-1][key] = name
        return name

    def _valid_count(self, node: Node) -> str:
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
        begin = self.render(dim.begin_value)
        end = f"jnp.minimum({self.render(dim.end)}, {begin} + {dim.block_size})"
        return f"jnp.maximum({end} - {begin}, 0)"


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
    return f"jnp.full({literal(tuple(out.shape))}, {typed_fill(fill, out.dtype)}, {jnp_dtype(out.dtype)})"


def _float_result_of(node: Node) -> bool:
    """A reduction that computes in float32 whatever its operand (logsumexp)."""
    reduction = ops.OPS[node.op].reduction
    return reduction is not None and reduction.accumulator is ops.Accumulator.WIDENED
