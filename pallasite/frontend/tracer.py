"""The frontend: runs a kernel's Python source and records the IR.

Host statements run as ordinary Python with proxies standing in for tensors
(so shape arithmetic, asserts and helper calls just work); a `for` over
`hl.tile`/`hl.grid` at host level becomes a device loop whose body is visited
statement by statement. Expressions are evaluated by Python itself; every
torch call on a proxy reaches `Tracer.torch_function` through a
TorchFunctionMode, and the per-op work lives in `OpRecorder`.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from .. import exc
from .. import language as hl
from ..ir import (
    Allocate, Carried, DeviceLoopCall, KernelIR, Load, ScalarSymbol, TensorSymbol, TileDim, TileLoop,
    Value,
)
from ..ir.sizes import SymbolicSize, pin
from . import device_if, source
from .op_recorder import OpRecorder
from .proxies import BlockSize, DeviceTensor, HostScalar, HostTensor, TileProxy, _Traced


@dataclass(frozen=True)
class ArgSpec:
    """What the tracer knows about one kernel argument."""

    kind: str  # "tensor" | "scalar" | "const"
    shape: tuple[int, ...] = ()
    dtype: torch.dtype | None = None
    python_type: type | None = None
    value: Any = None  # the runtime value (scalars: used only by hl.specialize)


class _TraceMode(TorchFunctionMode):
    def __init__(self, tracer: Tracer):
        super().__init__()
        self.tracer = tracer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return self.tracer.torch_function(func, args, kwargs or {})


class Tracer(OpRecorder):
    """Traces one kernel at one argument signature and one set of block sizes."""

    def __init__(
        self,
        fn: Callable,
        args: list[ArgSpec],
        choose_block_size: Callable[[int, int], int],
        captured: dict[str, ArgSpec] | None = None,
        tunable_values: dict[str, Any] | None = None,
    ):
        """`captured`: the tensors the kernel reads from its enclosing scope, by name
        (`Kernel.captured_tensors`); they become trailing parameters of the host function."""
        super().__init__()
        self.fn = fn
        self.fn_ast, self.filename = source.function_ast(fn)
        self.arg_specs = args
        self.captured = captured or {}
        self.choose_block_size = choose_block_size
        self.specialized: set[str] = set()
        self.tunable_values = dict(tunable_values or {})  # the config's values of user tunables
        self.tunables: dict[str, Any] = {}  # hl.register_tunable: name -> fragment, in order
        self.steps: list = []
        self.block_dims: list[TileDim | None] = []
        self.device_loops: list[DeviceLoopCall] = []
        self.result: Any = None
        self.scope: dict[str, Any] = {}
        self.enclosing_ifs: list[exc.SourceLocation] = []  # the device ifs being traced

    # ------------------------------------------------------------- driver --

    def run(self) -> KernelIR:
        params = [a.arg for a in self.fn_ast.args.args]
        if len(params) != len(self.arg_specs):
            raise exc.KernelArgumentError(
                f"{self.fn.__name__} takes {len(params)} arguments, got {len(self.arg_specs)}."
            )
        self.scope = self._initial_scope()
        arguments = []
        for name, spec in zip(params, self.arg_specs):
            value = self._argument_proxy(name, spec)
            self.scope[name] = value
            arguments.append(value.symbol if isinstance(value, (HostTensor, HostScalar)) else value)
        for name, spec in self.captured.items():
            value = self._argument_proxy(name, spec)
            self.scope[name] = value
            params.append(name)
            arguments.append(value.symbol)
        previous = hl.set_active_tracer(self)
        try:
            with _TraceMode(self):
                self._run_host_block(self.fn_ast.body)
        finally:
            hl.set_active_tracer(previous)
        with self._user_code():  # errors point at the `return` statement
            result = self._result_structure(self.result)
        return KernelIR(
            name=self.fn.__name__,
            source_file=self.filename,
            params=params,
            arguments=arguments,
            steps=self.steps,
            result=result,
            block_dims=self.block_dims,
            device_loops=self.device_loops,
            captured=tuple(self.captured),
            random_seed=self.random_seed,
        )

    def _initial_scope(self) -> dict[str, Any]:
        scope = dict(self.fn.__globals__)
        code = self.fn.__code__
        for name, cell in zip(code.co_freevars, self.fn.__closure__ or ()):
            scope[name] = cell.cell_contents
        if "min" not in scope:
            scope["min"] = self._traced_min
        if "max" not in scope:
            scope["max"] = self._traced_max
        return scope

    def _argument_proxy(self, name: str, spec: ArgSpec) -> Any:
        if spec.kind == "tensor":
            return HostTensor(self, TensorSymbol(name, spec.shape, spec.dtype, "arg"))
        if spec.kind == "scalar":
            dtype = torch.int32 if spec.python_type is int else torch.float32
            return HostScalar(self, ScalarSymbol(name, dtype), spec.python_type)
        return spec.value

    def _result_structure(self, value: Any) -> Any:
        if isinstance(value, (HostTensor, HostScalar)):
            return value.symbol
        if isinstance(value, DeviceTensor):
            raise exc.DeviceValueInHostCode(
                "The kernel returns a value computed inside a device loop; store it "
                "into a tensor allocated in host code and return that tensor."
            )
        if isinstance(value, (list, tuple)):
            return type(value)(self._result_structure(v) for v in value)
        if isinstance(value, dict):
            return {k: self._result_structure(v) for k, v in value.items()}
        return value

    # -------------------------------------------------------- statements --

    def _execute(self, stmt: ast.stmt) -> None:
        """Run one simple statement with Python, in the kernel's scope."""
        self.location = source.location(self.filename, stmt)
        code = compile(ast.Module(body=[stmt], type_ignores=[]), self.filename, "exec")
        with self._user_code():
            exec(code, self.scope)
        self._name_assigned_values(stmt)

    def _evaluate(self, expr: ast.expr, stmt: ast.stmt) -> Any:
        self.location = source.location(self.filename, stmt)
        code = compile(ast.Expression(body=expr), self.filename, "eval")
        with self._user_code():
            return eval(code, self.scope)

    @contextlib.contextmanager
    def _user_code(self):
        try:
            yield
        except exc.PallasiteError as err:
            raise err.with_location(self.location) from None
        except Exception as err:  # the user's own error: keep its type, add the line
            if self.location is not None and not getattr(err, "_pallasite_noted", False):
                err.add_note(f"while pallasite traced {self.location}")
                err._pallasite_noted = True
            raise

    def _name_assigned_values(self, stmt: ast.stmt) -> None:
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
                value = self.scope.get(name_node.id)
                if isinstance(value, DeviceTensor) and not value.value.name:
                    value.value.name = name_node.id
                elif isinstance(value, HostTensor) and value.symbol.origin != "arg" and value.symbol.name.startswith("_t"):
                    value.symbol.name = name_node.id

    def _run_host_block(self, stmts: list[ast.stmt]) -> bool:
        """Run host statements; True once a `return` ran."""
        for stmt in stmts:
            if isinstance(stmt, ast.Return):
                self.result = None if stmt.value is None else self._evaluate(stmt.value, stmt)
                return True
            if source.looks_like_device_loop(stmt):
                iterable = self._evaluate(stmt.iter, stmt)
                if isinstance(iterable, hl.TileIterable):
                    self._device_loop(stmt, iterable)
                    continue
                if self._python_loop(stmt, iterable, self._run_host_block):
                    return True
                continue
            if isinstance(stmt, ast.If) and source.must_walk(stmt):
                test = self._evaluate(stmt.test, stmt)
                with self._user_code():  # a traced condition raises here, at the `if`
                    branch = stmt.body if test else stmt.orelse
                if self._run_host_block(branch):
                    return True
                continue
            if isinstance(stmt, ast.For) and source.must_walk(stmt):
                iterable = self._evaluate(stmt.iter, stmt)
                if self._python_loop(stmt, iterable, self._run_host_block):
                    return True
                continue
            if source.must_walk(stmt):
                raise source.unsupported_host_statement(stmt, source.location(self.filename, stmt))
            self._execute(stmt)
        return False

    def _python_loop(self, stmt: ast.For, iterable: Any, run_block: Callable) -> bool:
        """A `for` over a Python iterable: unrolled at trace time."""
        if stmt.orelse or any(isinstance(n, (ast.Break, ast.Continue)) for n in ast.walk(stmt)):
            raise exc.UnsupportedSyntax(
                "break/continue/else in a loop around device code are not supported.",
                source.location(self.filename, stmt),
            )
        if isinstance(iterable, _Traced):
            raise exc.UnsupportedSyntax(
                "A Python for loop over a traced value is not supported; use hl.tile or hl.grid.",
                source.location(self.filename, stmt),
            )
        for item in iterable:
            self._assign_target(stmt.target, item, stmt)
            if run_block(stmt.body):
                return True
        return False

    def _assign_target(self, target: ast.expr, value: Any, stmt: ast.stmt) -> None:
        if isinstance(target, ast.Name):
            self.scope[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = list(value)
            if len(values) != len(target.elts):
                raise exc.UnsupportedSyntax(
                    f"Cannot unpack {len(values)} values into {len(target.elts)} names.",
                    source.location(self.filename, stmt),
                )
            for elt, item in zip(target.elts, values):
                self._assign_target(elt, item, stmt)
        else:
            raise exc.UnsupportedSyntax(
                "Loop targets must be names or tuples of names.", source.location(self.filename, stmt)
            )

    def _run_device_block(self, stmts: list[ast.stmt]) -> bool:
        for stmt in stmts:
            loc = source.location(self.filename, stmt)
            self.location = loc
            if isinstance(stmt, ast.For):
                iterable = self._evaluate(stmt.iter, stmt)
                if isinstance(iterable, hl.TileIterable):
                    self._inner_loop(stmt, iterable)
                    continue
                self._python_loop(stmt, iterable, self._run_device_block)
            elif isinstance(stmt, ast.If):
                test = device_if.evaluate_condition(self, stmt.test, stmt)
                if isinstance(test, _Traced):
                    device_if.trace_device_if(self, stmt, test)
                else:
                    self._run_device_block(stmt.body if test else stmt.orelse)
            elif isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Pass, ast.Assert)):
                self._execute(stmt)
            elif isinstance(stmt, ast.Return):
                raise exc.UnsupportedSyntax("return inside a device loop is not supported.", loc)
            else:
                raise exc.UnsupportedSyntax(
                    f"{type(stmt).__name__} statements are not supported in device code.", loc
                )
        return False

    # ------------------------------------------------------- device loops --

    def _device_loop(self, stmt: ast.For, spec: hl.TileIterable) -> None:
        loc = source.location(self.filename, stmt)
        dims = self._loop_dims(stmt, spec, self._static_bound, loc)
        body: list = []
        call = DeviceLoopCall(TileLoop(dims, body, loc), len(self.device_loops), [])
        self.enter_device(call)
        try:
            self._bind_loop_variable(stmt, spec, dims)
            self._run_device_block(stmt.body)
        finally:
            self.exit_device()
        if stmt.orelse:
            raise exc.UnsupportedSyntax("for ... else on a device loop is not supported.", loc)
        self.steps.append(call)
        self.device_loops.append(call)

    def _loop_dims(self, stmt: ast.For, spec: hl.TileIterable, bound: Callable, loc) -> list[TileDim]:
        """The TileDims of a loop; `bound` checks/converts each begin and end."""
        names = self._loop_names(stmt.target, len(spec.ends), spec.kind)
        return [
            self._tile_dim(name, bound(begin, "begin", loc), bound(end, "end", loc), block, spec.kind, loc)
            for name, begin, end, block in zip(names, spec.begins, spec.ends, spec.block_sizes)
        ]

    def _bind_loop_variable(self, stmt: ast.For, spec: hl.TileIterable, dims: list[TileDim]) -> None:
        """Record each dim's begin and bind the loop target: tiles, or scalars for hl.grid."""
        for dim in dims:
            dim.begin_value = self.record(
                "tile_begin", (dim,), {}, (), torch.int32,
                name=dim.name if dim.is_grid else f"{dim.name}_begin")
        proxies = [DeviceTensor(self, d.begin_value) if d.is_grid else TileProxy(self, d) for d in dims]
        self._assign_target(stmt.target, tuple(proxies) if spec.multi else proxies[0], stmt)

    def _inner_loop(self, stmt: ast.For, spec: hl.TileIterable) -> None:
        """A tile/grid loop inside a device loop: traced once, with loop-carried variables."""
        loc = source.location(self.filename, stmt)
        if stmt.orelse:
            raise exc.UnsupportedSyntax("for ... else on a device loop is not supported.", loc)
        if self.enclosing_ifs:
            outer = self.enclosing_ifs[-1]
            raise exc.UnsupportedSyntax(
                f"A tile/grid loop inside an if on a device value ({outer.lineno}: "
                f"{outer.text.strip()!r}) is not supported; put the if inside the loop.", loc)
        dims = self._loop_dims(stmt, spec, self._inner_bound, loc)
        assigned = {
            node.id for inner in stmt.body for node in ast.walk(inner)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
        }
        before = dict(self.scope)
        carried = []
        for name in sorted(assigned):
            value = before.get(name)
            if isinstance(value, DeviceTensor):
                param = Value(value.value.shape, value.value.dtype, name)
                carried.append(Carried(name, value.value, param))
                self.scope[name] = DeviceTensor(self, param)
        loop = TileLoop(dims, [], loc, carried)
        self.push_body(loop.body, dims)
        try:
            self._bind_loop_variable(stmt, spec, dims)
            self._run_device_block(stmt.body)
        finally:
            self.pop_body()
        self.location = loc
        for item in carried:
            result = self.scope.get(item.name)
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
        self.append_node(loop)
        for name in assigned:  # values defined only inside the loop do not escape it
            if name in before:
                self.scope[name] = before[name]
            else:
                self.scope.pop(name, None)
        for item in carried:
            self.scope[item.name] = DeviceTensor(self, item.out)

    def _inner_bound(self, bound: Any, what: str, loc) -> Any:
        if isinstance(bound, bool):
            raise exc.UnsupportedSyntax(f"Loop {what} must be an int, got {bound!r}.", loc)
        if isinstance(bound, int):
            return bound
        if isinstance(bound, (DeviceTensor, HostScalar)):
            value = self._device_operand(bound)
            if value.shape != () or value.dtype.is_floating_point:
                source = value.producer.tensor.name if isinstance(getattr(value, "producer", None), Load) else ""
                raise exc.UnsupportedSyntax(
                    f"Loop {what} must be an integer scalar, got a {str(value.dtype).replace('torch.', '')} "
                    f"{'scalar' if value.shape == () else f'tensor of shape {list(value.shape)}'}"
                    + (f" read from '{source}' (pass it as an int32 tensor)" if source else "") + ".", loc)
            return value
        raise exc.UnsupportedSyntax(f"Loop {what} must be an int or a device scalar, got {bound!r}.", loc)

    def _loop_names(self, target: ast.expr, count: int, kind: str) -> list[str]:
        if isinstance(target, ast.Tuple) and len(target.elts) == count and all(
            isinstance(e, ast.Name) for e in target.elts
        ):
            return [e.id for e in target.elts]
        base = target.id if isinstance(target, ast.Name) else kind
        return [base] if count == 1 else [f"{base}_{i}" for i in range(count)]

    def _static_bound(self, bound: Any, what: str, loc) -> int:
        if isinstance(bound, bool) or not isinstance(bound, int):
            if isinstance(bound, (HostScalar, DeviceTensor)):
                raise exc.UnsupportedSyntax(
                    f"The {what} of a top-level device loop must be known when compiling "
                    "(a size, or hl.specialize(...) of a scalar argument).", loc
                )
            raise exc.UnsupportedSyntax(f"Loop {what} must be an int, got {bound!r}.", loc)
        return bound if isinstance(bound, SymbolicSize) else int(bound)

    def _tile_dim(self, name: str, begin: Any, end: Any, block: Any, kind: str, loc) -> TileDim:
        static = isinstance(begin, int) and isinstance(end, int)
        extent = max(end - begin, 0) if static else 128
        if kind == "grid":
            return TileDim(name, begin, end, 1, None, True)
        if block is None:
            block_id = self._new_block_id(extent)
            size = self.choose_block_size(block_id, extent)
        elif isinstance(block, BlockSize):
            block_id, size = block.block_id, int(block)
        elif isinstance(block, int) and not isinstance(block, bool) and block > 0:
            block_id, size = None, block
        else:
            raise exc.IllegalBlockSize(f"block_size must be a positive int or None, got {block!r}.", loc)
        dim = TileDim(name, begin, end, size, block_id, False)
        if block_id is not None and self.block_dims[block_id] is None:
            self.block_dims[block_id] = dim
        return dim

    def _new_block_id(self, extent: int) -> int:
        self.block_dims.append(None)
        return len(self.block_dims) - 1

    # ------------------------------------------------------ hl functions --

    def specialize(self, value: Any) -> Any:
        if isinstance(value, HostScalar):
            self.specialized.add(value.symbol.name)
            index = [a.arg for a in self.fn_ast.args.args].index(value.symbol.name)
            if self.arg_specs[index].value is None:
                raise exc.UnsupportedSyntax(
                    f"hl.specialize({value.symbol.name}): the argument is traced by jax.jit, so its "
                    "value is unknown while compiling; make it static (jax.jit(..., "
                    "static_argnums=...)) or close over it."
                )
            return self.arg_specs[index].value
        if isinstance(value, (list, tuple, torch.Size)):
            return type(value)(self.specialize(v) for v in value)
        if isinstance(value, DeviceTensor):
            raise exc.UnsupportedSyntax("hl.specialize() of a device value is not possible.")
        return pin(value, requested=True)  # a dynamic size (static_shapes=False): a constant of its variant

    def register_block_size(self, args: tuple) -> BlockSize:
        if not args or len(args) > 2:
            raise exc.UnsupportedSyntax("hl.register_block_size(max) or (min, max).")
        extent = int(args[-1])
        block_id = self._new_block_id(extent)
        size = self.choose_block_size(block_id, extent)
        self.block_dims[block_id] = TileDim(f"block_{block_id}", 0, extent, size, block_id, False)
        return BlockSize(size, block_id)

    def register_tunable(self, name: Any, fragment: Any) -> Any:
        from ..config import register_user_tunable
        from ..language.tunables import tunable_value

        value = tunable_value(name, fragment, self.tunable_values)
        if self.tunables.get(name, fragment) != fragment:
            raise exc.UnsupportedSyntax(f"hl.register_tunable({name!r}, ...) is declared twice with "
                                        "different fragments.")
        self.tunables[name] = fragment
        register_user_tunable(name)
        return value

    def _traced_min(self, *args: Any, **kwargs: Any) -> Any:
        return self._fold_builtin("minimum", builtins.min, args, kwargs)

    def _traced_max(self, *args: Any, **kwargs: Any) -> Any:
        return self._fold_builtin("maximum", builtins.max, args, kwargs)

    def _fold_builtin(self, op: str, python_fn: Callable, args: tuple, kwargs: dict) -> Any:
        items = list(args[0]) if len(args) == 1 and not isinstance(args[0], _Traced) else list(args)
        if kwargs or not any(isinstance(i, _Traced) for i in items):
            return python_fn(*args, **kwargs)
        result = items[0]
        for item in items[1:]:
            result = self.apply(op, None, (result, item), {}, display=f"{python_fn.__name__}()")
        return result
