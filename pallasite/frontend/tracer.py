"""The frontend: runs a kernel's Python source and records the IR.

Host statements run as ordinary Python with proxies standing in for tensors
(so shape arithmetic, asserts and helper calls just work); a `for` over
`hl.tile`/`hl.grid` at host level becomes a device loop whose body is visited
statement by statement. The pieces: `walker.py` walks the statements (shared
with reference mode), `traced_statements.py` says what loops and device `if`s
record, `tile_dims.py` builds loop dims and block-size slots, and every torch
call on a proxy reaches `OpRecorder.torch_function` through a TorchFunctionMode.
`Tracer` puts them together and is `hl`'s active tracer while it runs.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
from torch.overrides import TorchFunctionMode

from .. import exc
from .. import language as hl
from ..ir import KernelIR, ScalarSymbol, TensorSymbol
from ..ir.sizes import pin
from . import closures, collectives, device_values, lane_pairs, scans, source
from .moved_tiles import moved_tile
from .op_recorder import CompositeRecord, OpRecorder
from .operands import kernel_dtype
from .proxies import BlockSize, DeviceTensor, HostScalar, HostTensor, Traced, static_int
from .tile_sizes import TileExtent
from .tile_dims import TileDims
from .traced_statements import TracedStatements
from .walker import StatementWalker, kernel_scope


@dataclass(frozen=True)
class ArgSpec:
    """What the tracer knows about one kernel argument."""

    kind: str  # "tensor" | "scalar" | "const"
    shape: tuple[int, ...] = ()
    dtype: torch.dtype | None = None
    python_type: type | None = None
    value: Any = None  # the runtime value (scalars: used only by hl.specialize)
    # tensors: the values of the elements host code reads with `.item()` ((index, value), ...):
    # constants of the variant, part of its key (frontend/host_items.py)
    items: tuple = ()
    # tensors: whether the caller's tensor is contiguous (torch's reshape of one that is not
    # copies, so frontend/host_program.py does not take it for the tensor itself)
    contiguous: bool = True
    requires_grad: bool = False  # tensors: the caller's flag (host code may read it)

    @property
    def kernel_dtype(self) -> torch.dtype | None:
        """A tensor's dtype inside the kernel: the caller's, but int64 narrowed to int32."""
        return None if self.dtype is None else kernel_dtype(self.dtype)


class _TraceMode(TorchFunctionMode):
    def __init__(self, recorder: OpRecorder):
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return self.recorder.torch_function(func, args, kwargs or {})


class Tracer:
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
        self.fn = fn
        self.fn_ast, self.filename = source.function_ast(fn)
        self.arg_specs = args
        self.captured = captured or {}
        self.specialized: set[str] = set()
        self.tunable_values = dict(tunable_values or {})  # the config's values of user tunables
        self.tunables: dict[str, Any] = {}  # hl.register_tunable: name -> fragment, in order
        self.recorder = OpRecorder()
        self.dims = TileDims(choose_block_size)
        self.walker = StatementWalker(self.filename, {}, "while pallasite traced {location}")
        self.statements = TracedStatements(self.walker, self.recorder, self.dims)
        self.recorder.check_in_place = self.walker.check_in_place_update  # `x op= v` on a value others hold

    def run(self) -> KernelIR:
        params = parameter_names(self.fn_ast)
        if len(params) != len(self.arg_specs):
            raise exc.KernelArgumentError(
                f"{self.fn.__name__} takes {len(params)} arguments, got {len(self.arg_specs)}."
            )
        scope = self.walker.scope
        scope.update(self._initial_scope())
        self.recorder.items = {(name, index): value for name, spec in [*zip(params, self.arg_specs),
                                                                       *self.captured.items()]
                               for index, value in spec.items}
        self.recorder.host.noncontiguous = {name for name, spec in zip(params, self.arg_specs)
                                            if spec.kind == "tensor" and not spec.contiguous}
        captured = {name: self._argument_proxy(name, spec) for name, spec in self.captured.items()}
        arguments = []
        specialized_in_body = _specialized_parameters(self.fn_ast)
        for name, spec in zip(params, self.arg_specs):
            value = self._argument_proxy(name, spec)
            if isinstance(value, closures.TensorItems):  # a list of tensors: each one's own input
                value = value.rebuilt(name, captured.__getitem__)
            if closures.is_plain_function(value):  # an epilogue: its tensors are captured inputs
                value = closures.rebound(value, {
                    variable: captured[closures.captured_name(name, variable)]
                    for variable in closures.closure_tensors(value)
                    if closures.captured_name(name, variable) in captured})
            scope[name] = value
            arguments.append(value.symbol if isinstance(value, (HostTensor, HostScalar)) else value)
            if isinstance(value, HostScalar) and name in specialized_in_body and spec.value is not None:
                # the body specializes it somewhere: its value is a constant of the variant
                # from the first line on, so uses before the hl.specialize call (Helion's
                # `n = seqlen // chunk` then `chunk = hl.specialize(chunk)`) see it too
                scope[name] = self.specialize(value)
        for name, value in captured.items():
            scope[name] = value
            params.append(name)
            arguments.append(value.symbol)
        previous = hl.set_active_tracer(self)
        try:
            with _TraceMode(self.recorder):
                returned = self.walker.run_kernel(self.fn_ast.body, self.statements)
        finally:
            hl.set_active_tracer(previous)
        with self.walker.user_code():  # errors point at the `return` statement
            result = self._result_structure(returned)
        return KernelIR(
            name=self.fn.__name__,
            source_file=self.filename,
            params=params,
            arguments=arguments,
            steps=self.recorder.host.steps,
            result=result,
            block_dims=self.dims.block_dims,
            block_sites=self.dims.block_sites,
            device_loops=self.statements.device_loops,
            jagged_sites=self.statements.jagged.sites,
            captured=tuple(self.captured),
            random_seed=self.recorder.random_seed,
        )

    def _initial_scope(self) -> dict[str, Any]:
        scope = kernel_scope(self.fn)
        if "min" not in scope:
            scope["min"] = self._traced_min
        if "max" not in scope:
            scope["max"] = self._traced_max
        return scope

    def _argument_proxy(self, name: str, spec: ArgSpec) -> Any:
        if spec.kind == "tensor":
            caller_dtype = spec.dtype if spec.kernel_dtype != spec.dtype else None
            return HostTensor(self.recorder, TensorSymbol(name, spec.shape, spec.kernel_dtype, "arg",
                                                          caller_dtype=caller_dtype, requires_grad=spec.requires_grad))
        if spec.kind == "scalar":
            dtype = torch.int32 if spec.python_type is int else torch.float32
            return HostScalar(self.recorder, ScalarSymbol(name, dtype), spec.python_type)
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

    # ---------------------------------------- hl functions (the active tracer) --

    @property
    def in_device(self) -> bool:
        """Whether the statement running is inside a device loop (not host code)."""
        return self.recorder.device is not None

    def specialize(self, value: Any) -> Any:
        if isinstance(value, HostScalar):
            self.specialized.add(value.symbol.name)
            index = parameter_names(self.fn_ast).index(value.symbol.name)
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

    def static_int(self, value: Any) -> Any:
        """An hl.static_range bound: `proxies.static_int`."""
        return static_int(value)

    def register_block_size(self, args: tuple) -> BlockSize:
        return self.dims.register_block_size(args, self.recorder.location)

    def register_tunable(self, name: Any, fragment: Any) -> Any:
        from ..config import check_tunable_name
        from ..language.tunables import tunable_value

        value = tunable_value(name, fragment, self.tunable_values)
        if self.tunables.get(name, fragment) != fragment:
            raise exc.UnsupportedSyntax(f"hl.register_tunable({name!r}, ...) is declared twice with "
                                        "different fragments.")
        self.tunables[name] = fragment
        check_tunable_name(name)
        return value

    def full(self, shape: Any, value: Any, dtype: torch.dtype) -> DeviceTensor:
        return device_values.full(self.recorder, shape, value, dtype)

    def barrier(self) -> None:
        """`hl.barrier()`: between top-level loops nothing to record (each is its own
        pallas_call, run in order); inside one, refused."""
        if self.recorder.device is not None:
            raise exc.UnsupportedOperation(hl.BARRIER_IN_DEVICE_CODE, forms_anchor=hl.REFUSED_ANCHOR)

    def arange(self, args: tuple, dtype: torch.dtype) -> DeviceTensor:
        return device_values.arange(self.recorder, args, dtype)

    def dot(self, a: Any, b: Any, acc: Any, out_dtype: torch.dtype | None) -> DeviceTensor:
        return device_values.dot(self.recorder, a, b, acc, out_dtype)

    def rand(self, shape: Any, seed: Any) -> DeviceTensor:
        return self.recorder.rand(shape, seed)

    def device_print(self, prefix: str, values: tuple) -> None:
        device_values.device_print(self.recorder, prefix, values)

    def associative_scan(self, combine_fn: Callable, values: Any, dim: int, reverse: bool) -> Any:
        return scans.associative_scan(self.recorder, combine_fn, values, dim, reverse)

    def cumulative(self, spelling: str, value: Any, dim: int, reverse: bool) -> Any:
        return scans.cumulative(self.recorder, spelling, value, dim, reverse)

    def split(self, value: Any) -> Any:
        if self.recorder.device is None:
            raise exc.UnsupportedSyntax("hl.split is for device values; use x.unbind(-1) in host code.")
        return lane_pairs.split(CompositeRecord(self.recorder, "hl.split"), value)

    def join(self, a: Any, b: Any) -> Any:
        if self.recorder.device is None:
            raise exc.UnsupportedSyntax("hl.join is for device values; use torch.stack([a, b], -1) in host code.")
        return lane_pairs.join(CompositeRecord(self.recorder, "hl.join"), a, b)

    def reduce(self, combine_fn: Callable, values: Any, dim: Any, other: Any, keep_dims: bool) -> Any:
        return scans.reduce(self.recorder, combine_fn, values, dim, other, keep_dims)

    def atomic_update(self, name: str, tensor: Any, key: tuple, combine: Any) -> DeviceTensor:
        return self.recorder.atomic_update(name, tensor, key, combine)

    def distinct_positions(self, index: Any) -> bool:
        """Whether no two lanes of the index vector `index` hold one position: a tile's positions,
        moved by a scalar or not (`start + tile.index`), so an atomic through it is a plain
        read-modify-write of distinct rows (and `frontend/moved_tiles.py` may make it a window)."""
        return isinstance(index, DeviceTensor) and moved_tile(index.value) is not None

    @contextlib.contextmanager
    def exact_products(self) -> Iterator[None]:
        """Contractions recorded inside are exact in float32 (HIGHEST precision on a TPU, whose
        default is one bfloat16 pass): the language's own one-hot sums."""
        previous, self.recorder.exact_products = self.recorder.exact_products, True
        try:
            yield
        finally:
            self.recorder.exact_products = previous

    @property
    def jagged_active(self) -> bool:
        """Whether an access now is inside hl.jagged_tile loops (and not the subscript an
        hl.load/hl.store applying their mask makes): as `ReferenceRunner.jagged_active`."""
        return self.statements.jagged.active

    def jagged_mask(self, tensor: Any, key: tuple) -> Any:
        """The implicit mask of the hl.jagged_tile loops around `tensor[key]`, or None."""
        return self.statements.jagged.mask(key, len(tensor.shape))

    def jagged_access(self):
        """An access applying its jagged mask: the subscript inside it is not masked again."""
        return self.statements.jagged.access()

    def masked_read(self, tensor: Any, key: tuple, masked: tuple = ()) -> Any:
        """`tensor[key]` of `hl.load(..., extra_mask=...)`: a tile past the tensor's end reads 0.
        `masked`: the index items hl.load set to 0 where the mask is off (the load's result is
        0 there), which a flat gather of rows may read as masked rows (frontend/flat_rows.py)."""
        self.recorder.load_masked = {id(item.value) for item in masked if isinstance(item, DeviceTensor)}
        try:
            return self.recorder.subscript(tensor, key, zero_past_end=True)
        finally:
            self.recorder.load_masked = set()

    def masked_scatter(self, tensor: Any, key: tuple, value: Any, lane_mask: Any) -> None:
        """`tensor[key] = value` through an index vector, only the lanes where `lane_mask` holds."""
        self.recorder.store(tensor, key, value, lane_mask=lane_mask)

    def remote_copy(self, src: Any, src_index: Any, device_id: Any, dst: Any, dst_index: Any) -> Any:
        return self.recorder.remote_copy(src, src_index, device_id, dst, dst_index)

    def remote_barrier(self, device_ids: Any, rank: Any = None) -> None:
        self.recorder.remote_barrier(device_ids, rank)

    def all_reduce(self, dst: Any, src: Any, peers: Any, rank: Any, algorithm: Any) -> None:
        collectives.all_reduce(self.walker, self.recorder, dst, src, peers, rank, algorithm)

    # ------------------------------------------ min/max of traced values --

    def _traced_min(self, *args: Any, **kwargs: Any) -> Any:
        return self._fold_builtin("minimum", builtins.min, args, kwargs)

    def _traced_max(self, *args: Any, **kwargs: Any) -> Any:
        return self._fold_builtin("maximum", builtins.max, args, kwargs)

    def _fold_builtin(self, op: str, python_fn: Callable, args: tuple, kwargs: dict) -> Any:
        items = list(args[0]) if len(args) == 1 and not isinstance(args[0], Traced) else list(args)
        if kwargs or not any(isinstance(i, (Traced, TileExtent)) for i in items):  # a partial tile's size too
            return python_fn(*args, **kwargs)
        result = items[0]
        for item in items[1:]:
            result = self.recorder.apply(op, None, (result, item), {}, display=f"{python_fn.__name__}()")
        if isinstance(result, HostScalar) and all(
                (isinstance(i, int) and not isinstance(i, bool)) or (isinstance(i, HostScalar) and i.is_int_argument)
                for i in items):  # it may size things: HostScalar._as_size
            result.static_value = lambda: python_fn(int(i) for i in items)
        return result


def parameter_names(fn_ast: ast.FunctionDef) -> list[str]:
    """The kernel's parameters in the order its call binds them (`inspect.signature`):
    positional ones, then keyword-only ones (`def k(x, *, alpha=2.0)`)."""
    arguments = fn_ast.args
    return [a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)]


def _specialized_parameters(fn_ast: ast.FunctionDef) -> frozenset[str]:
    """The parameters the kernel's body passes, by name, to `hl.specialize(...)`."""
    params = set(parameter_names(fn_ast))
    names = set()
    for node in ast.walk(fn_ast):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called == "specialize" and node.args[0].id in params:
                names.add(node.args[0].id)
    return frozenset(names)
