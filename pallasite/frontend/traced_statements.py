"""What the walker's statements mean while tracing: device loops, inner loops with their
carried values, and `if`s on device values, recorded as IR (`TileLoop`, `Carried`, `IfBlock`).
"""
from __future__ import annotations

import ast
import contextlib
from typing import Any, Callable

import torch

from .. import exc
from .. import language as hl
from ..ir import Carried, DeviceLoopCall, TileDim, TileLoop, Value
from . import view_aliasing
from .device_if import DeviceIfs
from .jagged import JaggedLoops
from .op_recorder import OpRecorder
from .moved_tiles import rebase_moved_tiles
from .proxies import DeviceTensor, HostTensor, TileProxy, Traced
from .tile_dims import TileDims, inner_bound, static_bound
from .walker import StatementWalker


class TracedStatements:
    """The tracer's `StatementSemantics` (frontend/walker.py)."""

    def __init__(self, walker: StatementWalker, recorder: OpRecorder, dims: TileDims):
        self.walker = walker
        self.recorder = recorder
        self.dims = dims
        self.ifs = DeviceIfs(walker, recorder)
        self.device_loops: list[DeviceLoopCall] = []
        self.jagged = JaggedLoops(recorder)  # the hl.jagged_tile loops around the statement
        self._host_names: set[str] = set()  # the user names host tensors took (`_host_name`)

    def enter_statement(self, stmt: ast.stmt, location: exc.SourceLocation) -> None:
        self.recorder.location = location  # every node recorded from now on carries it
        self.jagged.enter_statement(stmt)

    def statement_executed(self, stmt: ast.stmt) -> None:
        """Give values the user's variable names, so generated code reads like the source."""
        targets = []
        if isinstance(stmt, ast.Assign):
            targets = stmt.targets
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
            targets = [stmt.target]
        for target in targets:
            names = [target] if isinstance(target, ast.Name) else (
                list(target.elts) if isinstance(target, ast.Tuple) else [])
            for name_node in names:
                if not isinstance(name_node, ast.Name):
                    continue
                value = self.walker.scope.get(name_node.id)
                if isinstance(value, DeviceTensor) and not value.value.name:
                    value.value.name = name_node.id
                elif (isinstance(value, HostTensor) and value.symbol.origin != "arg"
                      and value.symbol.name.startswith("_t")):
                    value.symbol.name = self._host_name(name_node.id)

    def _host_name(self, name: str) -> str:
        """`name`, or `name_1`, `name_2`, ... when an earlier host tensor took it (a host loop
        allocating `out` in every layer): one kernel may read one layer's `out` and write the
        next's, and the generated code names each apart."""
        chosen, n = name, 0
        while chosen in self._host_names:
            n += 1
            chosen = f"{name}_{n}"
        self._host_names.add(chosen)
        return chosen

    def check_python_iterable(self, iterable: Any, location: exc.SourceLocation) -> None:
        if isinstance(iterable, Traced):
            raise exc.UnsupportedSyntax(
                "A Python for loop over a traced value is not supported; use hl.tile or hl.grid.", location)

    # ---------------------------------------------------------------- ifs --

    def if_condition(self, stmt: ast.If) -> Any:
        return self.ifs.condition(stmt.test, stmt)

    def is_device_condition(self, test: Any) -> bool:
        return isinstance(test, Traced)

    def is_device_value(self, value: Any) -> bool:
        return isinstance(value, (DeviceTensor, TileProxy))

    def bool_op(self, is_and: bool | None, thunks: list) -> Any:
        """`a and b` / `a or b` / `not a` (`is_and` None) in device code: traced operands
        combine with torch.logical_and/or/not (a traced value has no truth value while
        tracing); host ones keep Python's meaning."""
        if is_and is None:
            return self.ifs.negate(thunks[0](), self.walker.statement)
        return self.ifs.combine((thunk() for thunk in thunks), is_and, self.walker.statement)

    def device_if(self, stmt: ast.If, test: Any) -> None:
        self.ifs.trace(stmt, test)

    # -------------------------------------------------------------- loops --

    def device_loop(self, stmt: ast.For, spec: hl.TileIterable, run_body: Callable[[Any], None]) -> None:
        """A top-level loop: one `DeviceLoopCall` of the host program."""
        loc = self.walker.location_of(stmt)
        if spec.jagged is not None:
            raise exc.UnsupportedOperation(
                "hl.jagged_tile is an inner loop: its lengths are a vector over the enclosing loop's tile of rows "
                "(for tile_b in hl.tile(rows): ... for tile_k in hl.jagged_tile(lengths)).", loc)
        dims = self.dims.loop_dims(stmt, spec, static_bound, loc)
        call = DeviceLoopCall(TileLoop(dims, [], loc), len(self.device_loops), [])
        self.recorder.enter_device(call)
        try:
            run_body(self._loop_variable(spec, dims))
        finally:
            self.recorder.exit_device()
        rebase_moved_tiles(call.loop, self.jagged.dim_ids)  # `x[start + tile.index]`: the tile's own window
        view_aliasing.check_loop_views(self.recorder.host, call)
        self.recorder.host.steps.append(call)
        self.device_loops.append(call)

    def inner_loop(self, stmt: ast.For, spec: hl.TileIterable, run_body: Callable[[Any], None],
                   assigned: list[str]) -> dict[str, Any]:
        """A tile/grid loop inside a device loop: traced once, with loop-carried variables
        (each device value it reassigns that existed before it)."""
        loc = self.walker.location_of(stmt)
        dims = self.dims.loop_dims(stmt, spec, inner_bound(self.recorder), loc)
        groups = self._carry(assigned)
        carried = [item for _, _, items in groups for item in items]
        loop = TileLoop(dims, [], loc, carried)
        self.recorder.push_body(loop.body, dims)
        try:
            variable = self._loop_variable(spec, dims)
            with self.jagged.loop(dims[0], spec.jagged) if spec.jagged is not None else contextlib.nullcontext():
                run_body(variable)
        finally:
            self.recorder.pop_body()
        self.walker.enter(stmt)
        for name, kind, items in groups:
            self._close_group(name, kind, items, loc)
        self.recorder.append_node(loop)
        self.recorder.close_loop(loop)
        return {name: DeviceTensor(self.recorder, items[0].out) if kind is None else
                kind(DeviceTensor(self.recorder, item.out) for item in items) for name, kind, items in groups}

    def _loop_variable(self, spec: hl.TileIterable, dims: list[TileDim]) -> Any:
        """Record each dim's begin; the loop variable: tiles, or scalars for hl.grid."""
        for dim in dims:
            dim.begin_value = self.recorder.record(
                "tile_begin", (dim,), {}, (), torch.int32,
                name=dim.name if dim.is_grid else f"{dim.name}_begin")
        proxies = [DeviceTensor(self.recorder, d.begin_value) if d.is_grid else TileProxy(self.recorder, d)
                   for d in dims]
        return tuple(proxies) if spec.multi else proxies[0]

    def _carry(self, assigned: list[str]) -> list[tuple[str, type | None, list[Carried]]]:
        """The loop's carried values, by name: a device value, or a tuple or list of them
        (`state = (m, l)`: one carried value per item, `state_0`, `state_1`); in the body each
        is the loop's parameter. Each name gives (name, its container type or None, values)."""
        groups = []
        for name in assigned:
            value = self.walker.scope.get(name)
            if isinstance(value, DeviceTensor):
                param = Value(value.value.shape, value.value.dtype, name)
                groups.append((name, None, [Carried(name, value.value, param)]))
                self.walker.scope[name] = DeviceTensor(self.recorder, param)
            elif type(value) in (tuple, list) and value and all(isinstance(v, DeviceTensor) for v in value):
                for i, v in enumerate(value):  # the generated code calls an unnamed item `state_0`
                    v.value.name = v.value.name or f"{name}_{i}"
                items = [Carried(f"{name}_{i}", v.value, Value(v.value.shape, v.value.dtype, f"{name}_{i}"))
                         for i, v in enumerate(value)]
                groups.append((name, type(value), items))
                self.walker.scope[name] = type(value)(DeviceTensor(self.recorder, item.param) for item in items)
        return groups

    def _close_group(self, name: str, kind: type | None, items: list[Carried], loc: exc.SourceLocation) -> None:
        result = self.walker.scope.get(name)
        if kind is None:
            self._close_carried(items[0], result, loc)
            return
        if type(result) is not kind or len(result) != len(items):
            raise exc.UnsupportedSyntax(
                f"Loop-carried variable '{name}' is a {kind.__name__} of {len(items)} device values before the "
                f"loop; an iteration must leave it one too (it left {type(result).__name__} "
                f"{'of ' + str(len(result)) + ' items' if isinstance(result, (tuple, list)) else ''}).", loc)
        for item, element in zip(items, result):
            self._close_carried(item, element, loc)

    def _close_carried(self, item: Carried, result: Any, loc: exc.SourceLocation) -> None:
        """A carried value after the body: its result must keep the shape and dtype."""
        if not isinstance(result, DeviceTensor):
            raise exc.UnsupportedSyntax(
                f"Loop-carried variable '{item.name}' must stay a device tensor in the loop.", loc)
        if result.value.shape != item.init.shape or result.value.dtype != item.init.dtype:
            raise exc.ShapeMismatch(
                f"Loop-carried variable '{item.name}' is {list(item.init.shape)} {item.init.dtype} "
                f"before the loop but {list(result.value.shape)} {result.value.dtype} after an "
                "iteration; initialize it with the shape and dtype the loop produces.", loc)
        item.result = result.value
        item.out = Value(item.init.shape, item.init.dtype, item.name)
