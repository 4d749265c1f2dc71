"""Recording torch operations on proxies as IR (device nodes or host steps).

Every op goes through `apply`: look its spelling up in the op registry
(`ir/ops`), let the spelling's binder produce the canonical form (operands,
attrs, the result's shape/dtype from running torch on meta tensors), then
record it in the current context — a device loop body or the host program
(`host_program.py`). The recorder owns that context (the open device bodies,
the loop dims around them, the scalar arguments and tile attributes read so
far) and the dispatch; what a subscript or an assignment records is
`tensor_access.py`'s, the values `hl.full`/`hl.arange`/`hl.dot` and device
factories make are `device_values.py`'s, both through the recorder's public
methods (`record`, `append_node`, `device_operand`, `scalar_value`, `apply`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, Callable, Iterator

import torch

from .. import exc
from ..ir import (
    DeviceLoopCall, FullSlice, GatherIndex, IfBlock, NewAxis, Node, ScalarIndex, ScalarSymbol, ShiftedTile, StaticSlice,
    TileDim, TileLoop, TileSlice, Value, ops, walk_loops, walk_nodes,
)
from .op_arguments import (
    check_extreme_of_nothing, check_int32_numbers, constant_attr, masks_as_constants, wrapped_numbers,
)
from . import atomics, device_values, host_items, lane_pairs, random_values, remote, tensor_access, tensor_facts
from .host_program import HostProgram
from .indexing import whole_slice
from .proxies import DeviceTensor, HostScalar, HostTensor, TileProxy, Traced
from . import tile_sizes
from .tile_sizes import TileExtent
from .operands import (  # check_dtype: also for runtime/kernel.py
    check_dtype, has_proxy, reject_whole_host_tensors, size_of, symbolic_result_shape, to_meta,
    whole_host_tensor_error,
)
from .tensor_facts import python_numbers
from .torch_names import display_name, spelling_name, unsupported_hint

class OpRecorder:
    """Records each torch operation on proxies: a device `Node` in the open device body, or a
    host step (`host`, a `HostProgram`) outside device loops. `location` is the running statement's line."""

    def __init__(self) -> None:
        self.location: exc.SourceLocation | None = None
        # contractions recorded now are exact in float32 (`Tracer.exact_products`: an atomic's
        # one-hot sums), whatever the kernel's dot_precision
        self.exact_products = False
        self.host = HostProgram(self)  # what host code records
        self.device: DeviceLoopCall | None = None
        self._device_body_stack: list[list] = []
        self._dims_stack: list[list[TileDim]] = []  # the dims of each loop the body stack is in
        self.random_seed: ScalarSymbol | None = None  # torch.rand_like's per-call seed, once used
        self.random_streams = 0  # torch.rand_like calls recorded so far
        self._scalar_values: dict[int, Value] = {}
        self._tile_attrs: dict[tuple[int, str], tuple[Value, list]] = {}  # -> (value, body recorded in)
        # values and tile dims of inner loops that have ended (`close_loop`) -> the loop's line:
        # the code after a loop cannot read them (`_check_in_scope`)
        self._ended: dict[int, exc.SourceLocation | None] = {}
        self._in_meta = False
        self._composite = ""  # the composite whose steps are being recorded (Node.composite)
        self._remote_sites = 0
        # the walker's check of `x op= v` on a value another live name holds (set by the Tracer)
        self.check_in_place: Callable | None = None
        # flat accesses of whole rows (frontend/flat_rows.py): the rows views made (per loop
        # and width), how the open device loop uses each buffer (`RowsUse`, by root name), and
        # the buffers this trace reads element-wise (a loop conflicted: traced again)
        self.rows_views: dict[tuple, Any] = {}
        self.rows_uses: dict[str, Any] = {}
        self.rows_disabled: frozenset[str] = frozenset()
        self.load_masked: set[int] = set()  # ids of the index values hl.load masks (Tracer.masked_read)
        self.items: dict[tuple, Any] = {}  # (argument, index) -> the element's value (frontend/host_items.py)

    # ------------------------------------------------------------ context --

    def enter_device(self, call: DeviceLoopCall) -> None:
        self.device = call
        self.rows_uses = {}
        self._device_body_stack = [call.loop.body]
        self._dims_stack = [list(call.loop.dims)]
        self._scalar_values = {}
        self._tile_attrs = {}
        self._ended = {}

    def exit_device(self) -> None:
        self.device = None
        self._device_body_stack = []
        self._dims_stack = []

    @contextlib.contextmanager
    def host_step(self) -> Iterator[None]:
        """Record host code while a device loop is traced: its steps run before the loop's
        call (appended to the host program now; the call is appended when the loop ends)."""
        device, self.device = self.device, None
        try:
            yield
        finally:
            self.device = device

    def push_body(self, body: list, dims: list[TileDim]) -> None:
        """Record into `body` (the body of an inner loop over `dims`) until `pop_body`."""
        self._device_body_stack.append(body)
        self._dims_stack.append(list(dims))

    def pop_body(self) -> None:
        self._device_body_stack.pop()
        self._dims_stack.pop()

    def close_loop(self, loop: TileLoop) -> None:
        """`loop` has ended: its tiles and the values its body computed are out of scope (a
        loop's body runs per tile in a compiled loop; only its carried values come out)."""
        for dim in loop.dims:
            self._ended[dim.id] = loop.location
        for node in walk_nodes(loop.body):
            for value in getattr(node, "outputs", ()):
                self._ended[value.id] = loop.location
        for item in walk_loops(loop.body):
            for dim in item.dims:
                self._ended[dim.id] = item.location
        for item in loop.carried:
            self._ended[item.param.id] = loop.location
            if item.result is not None:
                self._ended[item.result.id] = loop.location

    def _check_in_scope(self, node: Any) -> None:
        """Every value and tile `node` reads is in scope here (not a body's of an ended loop)."""
        if not self._ended or isinstance(node, TileLoop):
            return
        operands = (node.condition,) if isinstance(node, IfBlock) else \
            (node.args, node.kwargs, getattr(node, "index", ()))
        for operand in _values_and_dims(operands):
            ended = self._ended.get(operand.id, False)
            if ended is False:
                continue
            line = f" at line {ended.lineno}" if ended is not None else ""
            producer = operand.producer if isinstance(operand, Value) else None
            if producer is not None and producer.op in TILE_ATTRIBUTE_OPS and producer.args \
                    and isinstance(producer.args[0], TileDim):  # `tn.begin` after the loop: the tile's
                operand = producer.args[0]
            if isinstance(operand, TileDim):
                what = "index" if operand.is_grid else "tile"
                raise exc.UnsupportedOperation(
                    f"'{operand.name}' is the {what} of the loop{line}, which has ended: a loop's {what}s exist "
                    "only inside it. Read what you need inside the loop, or carry a value out of it (assign "
                    "it before the loop, update it in the loop).", self.location)
            what = f"'{operand.name}'" if operand.name else "a value"
            raise exc.UnsupportedOperation(
                f"{what} is computed inside the loop{line} and read after that loop ended: a loop's body "
                "runs once per tile, and only the values it carries come out of it. To keep one, assign "
                "it before the loop and update it in the loop (a carried value).", self.location)

    def active_dims(self) -> list[TileDim]:
        """The dims of every loop around the current statement, outermost first."""
        return [dim for dims in self._dims_stack for dim in dims]

    def append_node(self, node: Any) -> None:
        self._check_in_scope(node)
        self._device_body_stack[-1].append(node)

    @property
    def current_body(self) -> list:
        """The body being recorded into."""
        return self._device_body_stack[-1]

    def open_bodies(self) -> list[list]:
        """The device loop's body and each open inner body in it, outermost first."""
        return list(self._device_body_stack)

    def is_open(self, body: list) -> bool:
        """Whether `body` is the current body or one it is nested in."""
        return any(open_body is body for open_body in self._device_body_stack)

    @contextlib.contextmanager
    def branch(self, body: list) -> Iterator[None]:
        """Record one branch of a device `if` into `body`. Tile attributes first read in the
        branch stay in it (the other branch and the code after the if read their own)."""
        tile_attrs = dict(self._tile_attrs)
        self.push_body(body, [])  # an if adds no loop dims
        try:
            yield
        finally:
            self.pop_body()
        self._tile_attrs = tile_attrs

    def next_remote_site(self) -> int:
        """A number for a new `hl.make_async_remote_copy` site."""
        self._remote_sites += 1
        return self._remote_sites - 1

    def record(self, op: str, args: tuple, kwargs: dict, shape: tuple, dtype: torch.dtype,
               name: str = "", node_type: type = Node, **fields: Any) -> Value:
        if node_type is Node:
            _check_registered(op)
            if not self._composite:  # softmax over a size-0 dim is empty in torch, not an error
                check_extreme_of_nothing(op, args, kwargs)
        value = Value(tuple(shape), dtype, name)
        node = node_type(op, tuple(args), dict(kwargs), [value], self.location, **fields)
        node.composite = self._composite
        value.producer = node
        self._check_in_scope(node)
        self._device_body_stack[-1].append(node)
        return value

    def _record_multi(self, op: str, args: tuple, kwargs: dict, metas: list[torch.Tensor]) -> list[Value]:
        _check_registered(op)
        values = [Value(tuple(m.shape), self._device_dtype(m.dtype), int64=m.dtype == torch.int64) for m in metas]
        node = Node(op, tuple(args), dict(kwargs), values, self.location, composite=self._composite)
        for v in values:
            v.producer = node
        self._check_in_scope(node)
        self._device_body_stack[-1].append(node)
        return values

    # ---------------------------------------------------------- dispatch --

    def torch_function(self, func: Callable, args: tuple, kwargs: dict) -> Any:
        internal = str(kwargs.get("device", "")) == "meta"  # our own shape bookkeeping
        name = spelling_name(func)
        if func is torch.rand_like and self.device is not None and not (self._in_meta or internal):
            return random_values.rand_like(self, args, kwargs)
        hint = unsupported_hint(getattr(func, "__name__", ""))
        if hint and name is None and self.device is not None and not (self._in_meta or internal):
            # torch.rand([8, 128]) takes no proxy, but would draw one tensor when traced
            raise exc.UnsupportedOperation(f"{display_name(func)} is not supported in device code.{hint}")
        if func in tensor_facts.DTYPE_QUESTIONS and len(args) == 1 and not kwargs and isinstance(args[0], Traced):
            return getattr(args[0].dtype, func.__name__)  # torch.is_floating_point(x): from the dtype
        if func is torch.numel and len(args) == 1 and isinstance(args[0], DeviceTensor) and not kwargs:
            return tile_sizes.numel(args[0])  # as v.numel() in the user's code
        if func is torch.arange and self.device is None and not (self._in_meta or internal):
            return self.host.arange(args, kwargs)  # a ramp of compile-time numbers: an allocation
        if (func is torch.tensor and self.device is None and not (self._in_meta or internal) and args
                and isinstance(args[0], (bool, int, float))):  # a 0-d constant: torch.full([], value)
            dtype = kwargs.get("dtype") or (torch.get_default_dtype() if isinstance(args[0], float) else None)
            return self.host.allocate(ops.FACTORIES["full"], ([], args[0]), {"dtype": dtype} if dtype else {})
        if self._in_meta or internal or not has_proxy(args, kwargs) and name not in ops.FACTORIES:
            return func(*args, **kwargs)
        self._reject_real_tensors(args, kwargs)
        if name is None:
            raise exc.UnsupportedOperation(
                f"{display_name(func)} is not supported by pallasite"
                + (" in device code." if self.device is not None else " in host code.") + hint
            )
        return self.apply(name, func, args, kwargs, display=display_name(func))

    def tensor_property(self, obj: Any, name: str) -> Any:
        """`x.is_cuda`, `x.requires_grad`: `tensor_facts.py:tensor_property`."""
        return tensor_facts.tensor_property(obj, name, self.device is not None)

    def call_method(self, obj: Any, name: str, args: tuple, kwargs: dict) -> Any:
        if name in ("is_floating_point", "is_complex", "is_signed") and not args and not kwargs:  # as torch's
            return getattr(obj.dtype, name)  # torch answers them from the dtype
        if (name == "item" and isinstance(obj, HostTensor) and self.device is not None and not args and not kwargs
                and all(type(size) is int and size == 1 for size in obj.symbol.shape)):
            # a one-element tensor's value in device code: thr.item() is thr[()], s.item() of shape [1] s[0]
            return self.subscript(obj, (0,) * len(obj.symbol.shape))
        if name == "item" and isinstance(obj, HostTensor) and self.device is not None:
            raise exc.ShapeMismatch(
                f"{obj.symbol.name}.item() of a tensor of shape {list(obj.symbol.shape)}: torch reads .item() of "
                f"one element only; index the element you mean (`{obj.symbol.name}[i]` reads it in device code).")
        if (name == "item" and isinstance(obj, HostTensor) and not obj.symbol.shape and self.device is None
                and not args and not kwargs):  # an argument's element read on the host: a constant
            return host_items.item_value(self.host, obj.symbol, self.items, unsupported_hint(name))
        spelling = spelling_name(getattr(torch.Tensor, name, None))
        if spelling is None:
            raise exc.UnsupportedOperation(
                f"Tensor.{name} is not supported by pallasite"
                + (" in device code." if self.device is not None else " in host code.")
                + unsupported_hint(name)
            )
        if name == "where":  # Tensor.where(condition, other) is torch.where(condition, self, other)
            return self.apply(spelling, torch.where, *_where_method_arguments(obj, args, kwargs),
                              display="Tensor.where")
        meta = lambda m, *a, **k: getattr(m, name)(*a, **k)  # noqa: E731
        return self.apply(spelling, meta, (obj, *args), kwargs, display=f"Tensor.{name}")

    def apply(self, spelling: str, function: Callable | None, args: tuple, kwargs: dict, display: str) -> Any:
        """Record one call of `spelling` (`function` is what the user called, if anything)."""
        self._reject_real_tensors(args, kwargs)
        # NumPy scalars (`1 / np.sqrt(d)` of host code) are the Python numbers torch takes them as
        args, kwargs = python_numbers(args), {key: python_numbers(value) for key, value in kwargs.items()}
        if spelling in ops.FACTORIES:
            factory = ops.FACTORIES[spelling]
            if self.device is not None:
                return device_values.factory_value(self, factory, args, kwargs)
            return self.host.allocate(factory, args, kwargs)
        run_meta = functools.partial(self._shape_rule, display=display)
        call = ops.Call(spelling, args, kwargs, function, display, to_meta, run_meta, size_of,
                        functools.partial(constant_attr, display=display), tile_sizes.fewest_valid)
        if spelling in ops.COMPOSITES:  # softmax: recorded as the ops it is made of
            outer, self._composite = self._composite, self._composite or spelling
            try:
                return ops.COMPOSITES[spelling].expand(call, CompositeRecord(self, display))
            finally:
                self._composite = outer
        if spelling not in ops.SPELLINGS:
            raise exc.UnsupportedOperation(f"{display} is not supported by pallasite.")
        op, bind = ops.SPELLINGS[spelling]
        bound = bind(op, call)
        if isinstance(bound, ops.Redirect):  # a subscript (x.narrow, x.split) goes where subscripts go
            results = []
            for name, a, k in bound.calls:
                a = tuple(results[item.index] if isinstance(item, ops.Earlier) else item for item in a)
                results.append(self.subscript(*a) if name == "getitem" else self.apply(name, None, a, k, display))
            return bound.pack(results)
        operands, attrs, meta_out = bound
        if self.device is not None:
            operands = masks_as_constants(op.name, operands)
            numbers = {key: constant_attr(value, key, display) for key, value in attrs.items()}
            changed = {id(attrs[key]): numbers[key] for key in attrs if numbers[key] is not attrs[key]}
            if changed:  # bound again with the numbers: torch's own checks of them (hardtanh's min <= max)
                bind(op, ops.Call(spelling, tuple(changed.get(id(a), a) for a in args),
                                  {k: changed.get(id(v), v) for k, v in kwargs.items()},
                                  function, display, to_meta, run_meta, size_of))
            attrs = numbers
            if op.name == "to" and function is not None:  # the user's own cast (not a composite's step)
                attrs = {**attrs, "written": True}
            return self._device_op(op, operands, attrs, meta_out, display)
        return self.host.op(op, operands, attrs, meta_out, display)

    def _reject_real_tensors(self, args: tuple, kwargs: dict) -> None:
        """A concrete torch tensor among traced operands: one the kernel reaches neither as a
        parameter nor by a global or closure name (those are captured, see
        `Kernel.captured_tensors`), so its values cannot be passed at call time."""
        if _has_real_tensor(args, kwargs):
            raise exc.UnsupportedOperation(
                "A torch tensor that is not a kernel argument is used in "
                + ("device" if self.device is not None else "host") + " code (one reached through an "
                "attribute, a container or a helper function; tensors the kernel names as globals or "
                "closure variables are passed automatically); pass it to the kernel as an argument.")

    def _shape_rule(self, meta_fn: Callable, args: tuple, kwargs: dict, display: str) -> Any:
        """A binder's shape rule run on the meta tensors of `args`."""
        if self.device is not None:
            # Before shape inference, whose broadcast error would hide the real problem.
            reject_whole_host_tensors(args, kwargs)
        return self.run_on_meta(meta_fn, args, kwargs, display)

    def run_on_meta(self, meta_fn: Callable, args: tuple, kwargs: dict, display: str) -> Any:
        metas = to_meta(args)
        meta_kwargs = {k: to_meta(v) for k, v in kwargs.items()}
        self._in_meta = True
        try:
            return meta_fn(*metas, **meta_kwargs)
        except exc.PallasiteError:
            raise
        except (RuntimeError, TypeError, ValueError, IndexError) as err:
            if ops.refuses_dtype(err):
                raise ops.dtype_refusal(display, [*args, *kwargs.values()], err) from None
            if _data_dependent(err):
                raise exc.UnsupportedOperation(
                    f"{display}: the result's shape depends on the values of a device tensor, which are "
                    "known only when the kernel runs; device code needs shapes known when compiling "
                    "(use torch.where to keep the shape).") from None
            raise exc.ShapeMismatch(f"{display}: {err}") from None
        finally:
            self._in_meta = False

    # ------------------------------------------------------------ device --

    def _device_dtype(self, dtype: torch.dtype) -> torch.dtype:
        """Device code computes indices in int32: torch's int64 results narrow to int32."""
        if dtype == torch.int64:
            return torch.int32
        check_dtype(dtype, "A device value")
        return dtype

    def device_operand(self, item: Any) -> Any:
        if isinstance(item, DeviceTensor):
            return item.value
        if isinstance(item, HostScalar):
            return self.scalar_value(item)
        if isinstance(item, HostTensor):
            if not item.symbol.shape:  # a 0-d tensor used whole: its one value, read as `t[()]` reads it
                return self.subscript(item, ()).value
            raise whole_host_tensor_error(item)
        if isinstance(item, TileProxy):
            raise exc.UnsupportedSyntax(
                f"Tile '{item.dim.name}' used as a value; use {item.dim.name}.index or .begin."
            )
        if isinstance(item, TileExtent):  # `x / v.size(1)`: the tile's extent
            return item.extent().value
        if isinstance(item, (list, tuple)):
            return type(item)(self.device_operand(i) for i in item)
        if isinstance(item, torch.Tensor):
            raise exc.UnsupportedOperation("A torch tensor constant cannot be used in device code.")
        return item

    def _device_op(self, op: ops.OpDef, operands, attrs, meta_out, display):
        operands = wrapped_numbers(op.name, [self.device_operand(o) for o in operands], attrs)
        float_result = any(getattr(meta, "dtype", torch.int32).is_floating_point
                           for meta in (meta_out if isinstance(meta_out, (tuple, list)) else (meta_out,)))
        check_int32_numbers(op.name, operands, display, float_result)
        if op.name == "reshape":  # the lane pairs of hl.join merged into lanes: their interleave
            interleaved = lane_pairs.merged(self.composite_record(display), operands[0], tuple(attrs["shape"]))
            if interleaved is not None:
                return interleaved
        if op.view is ops.ViewRule.SUBSCRIPT:
            attrs = {"key": _value_key(attrs["key"])}
        if isinstance(meta_out, (tuple, list)):
            values = self._record_multi(op.name, operands, attrs, list(meta_out))
            return type(meta_out)(DeviceTensor(self, v) for v in values)
        if self.exact_products and op.kind is ops.OpKind.CONTRACTION:
            attrs = {**attrs, "precision": "HIGHEST"}
        dtype = self._device_dtype(meta_out.dtype)
        shape = symbolic_result_shape(op, operands, tuple(meta_out.shape), attrs)
        value = self.record(op.name, operands, attrs, shape, dtype)
        value.int64 = meta_out.dtype == torch.int64  # torch's int64, held in int32 (plan/int64_values.py)
        return DeviceTensor(self, value)

    def scalar_value(self, scalar: HostScalar) -> Value:
        """The device Value of a runtime scalar argument (read once per loop)."""
        symbol = scalar.symbol
        if symbol.id not in self._scalar_values:
            body = self._device_body_stack
            self._device_body_stack = [self.device.loop.body]
            value = Value((), symbol.dtype, symbol.name)
            node = Node("scalar_arg", (symbol,), {}, [value], self.location)
            value.producer = node
            self.device.loop.body.insert(0, node)
            self._device_body_stack = body
            self.device.scalars.append(symbol)
            self._scalar_values[symbol.id] = value
        return self._scalar_values[symbol.id]

    def tile_attribute(self, dim: TileDim, attr: str) -> Any:
        if self.device is None:
            raise exc.DeviceValueInHostCode(f"{dim.name}.{attr} is only available inside its loop.")
        if attr == "begin":
            return DeviceTensor(self, dim.begin_value)
        if attr == "count" and dim.static_extent is not None:
            return dim.static_trips
        key = (dim.id, attr)
        value, body = self._tile_attrs.get(key, (None, None))
        if not any(body is open_body for open_body in self._device_body_stack):
            # never read, or read in an inner loop that has ended (its variable is out of scope)
            shape = (dim.block_size,) if attr == "index" else ()
            op = ops.TILE_ATTRIBUTES[attr].name
            value = self.record(op, (dim,), {}, shape, torch.int32, name=f"{dim.name}_{attr}")
            self._tile_attrs[key] = (value, self._device_body_stack[-1])
        return DeviceTensor(self, value)

    def composite_record(self, display: str) -> CompositeRecord:
        """What a program of several ops records its steps with (`ops.Record`)."""
        return CompositeRecord(self, display)

    def subscript(self, tensor: Any, key: Any, zero_past_end: bool = False) -> Any:
        return tensor_access.subscript(self, tensor, key, zero_past_end)

    def store(self, tensor: Any, key: Any, value: Any, atomic: bool = False, lane_mask: Any = None) -> None:
        tensor_access.store(self, tensor, key, value, atomic, lane_mask)

    def atomic_update(self, name: str, tensor: Any, key: tuple, combine: Any) -> DeviceTensor:
        return atomics.atomic_update(self, name, tensor, key, combine)

    def remote_copy(self, src: Any, src_index: Any, device_id: Any, dst: Any, dst_index: Any) -> Any:
        return remote.remote_copy(self, src, src_index, device_id, dst, dst_index)

    def remote_barrier(self, device_ids: Any, rank: Any = None) -> None:
        remote.remote_barrier(self, device_ids, rank)

    def rand(self, shape: Any, seed: Any) -> DeviceTensor:
        if self.device is None:
            raise exc.UnsupportedSyntax("hl.rand creates device values; call it inside a device loop.")
        return random_values.rand(self, shape, seed)


# ---------------------------------------------------------------- helpers --


class CompositeRecord:
    """What a composite records its steps with (`ops.Record`): `record(spelling, *args,
    **kwargs)` applies a torch spelling; `internal` records an op no spelling names (a
    scan's `shift_lanes`); `arange(n)` an int32 iota; `named(value, name)` names a step's result."""

    def __init__(self, recorder: OpRecorder, display: str):
        self.recorder = recorder
        self.display = display

    def __call__(self, spelling: str, *args: Any, **kwargs: Any) -> Any:
        return self.recorder.apply(spelling, None, args, kwargs, self.display)

    def _host_code_refusal(self) -> exc.UnsupportedOperation:
        return exc.UnsupportedOperation(f"{self.display} is not supported in host code (it is built on a device "
                                        "loop's steps): use it inside an hl.tile/hl.grid loop, or compute it "
                                        "before calling the kernel and pass the result.")

    def internal(self, op: str, operand: Any, **attrs: Any) -> DeviceTensor:
        recorder = self.recorder
        if recorder.device is None:
            raise self._host_code_refusal()
        value = recorder.device_operand(operand)
        return DeviceTensor(recorder, recorder.record(op, (value,), attrs, value.shape, value.dtype))

    def holds_int64(self, result: Any, spelling: str, operands: tuple, **attrs: Any) -> None:
        """`result` is what torch computes as int64 (`torch.cumsum` of integers): the call, to
        recompute it where interpret mode checks that it fits int32 (plan/int64_values.py)."""
        if isinstance(result, DeviceTensor) and result.value.producer is not None:
            result.value.int64 = True
            values = tuple(self.recorder.device_operand(item) for item in operands)
            result.value.producer.int64_of = (spelling, values, attrs)

    def named(self, value: Any, name: str) -> Any:
        """`value`, which the generated code calls `name` (a composite's step has no user name)."""
        if isinstance(value, DeviceTensor) and not value.value.name:
            value.value.name = name
        return value

    def arange(self, length: int) -> DeviceTensor:
        if self.recorder.device is None:
            raise self._host_code_refusal()
        return device_values.arange(self.recorder, (length,), torch.int32)


def _has_real_tensor(args: Any, kwargs: Any = None) -> bool:
    """Whether a concrete torch tensor (not a proxy, not our meta bookkeeping) is among the operands."""
    stack = list(args) + list((kwargs or {}).values())
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor) and not isinstance(item, Traced) and item.device.type != "meta":
            return True
        if isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def _data_dependent(err: Exception) -> bool:
    """Whether torch failed on meta tensors because the op needs their values (nonzero,
    item(), a data-dependent size): an internal limit of shape inference, not a shape error."""
    text = str(err)
    return any(marker in text for marker in (
        "meta tensors", "register_meta", "data-dependent", "data dependent", "item()", "Cannot determine"))


def _value_key(key: Any) -> tuple:
    """A device value's own subscript: only None, ':' , ints and Ellipsis."""
    items = key if isinstance(key, tuple) else (key,)
    for item in items:
        if item is None or item is Ellipsis or (isinstance(item, int) and not isinstance(item, bool)):
            continue
        if whole_slice(item):
            continue
        raise exc.IndexingError(
            "Narrowing a device value (slicing it with a tile, a range or a tensor) is not "
            "supported; index the host tensor instead."
        )
    return items


def _check_registered(op: str) -> None:
    """Every op the frontend records has an entry in the registry (and so a lowering)."""
    if op not in ops.OPS:
        raise AssertionError(f"op {op!r} is recorded but not defined in pallasite/ir/ops")


TILE_ATTRIBUTE_OPS = tuple(attribute.name for attribute in ops.TILE_ATTRIBUTES.values())
INDEX_ITEMS = (TileSlice, FullSlice, ScalarIndex, NewAxis, GatherIndex, ShiftedTile, StaticSlice)


def _values_and_dims(operand: Any) -> Iterator[Any]:
    """The Values and TileDims an operand holds (through containers and index items)."""
    if isinstance(operand, (Value, TileDim)):
        yield operand
    elif isinstance(operand, (tuple, list)):
        for item in operand:
            yield from _values_and_dims(item)
    elif isinstance(operand, dict):
        for item in operand.values():
            yield from _values_and_dims(item)
    elif isinstance(operand, INDEX_ITEMS):
        for field in dataclasses.fields(operand):
            yield from _values_and_dims(getattr(operand, field.name))


def _where_method_arguments(obj: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """`obj.where(condition, other)` as torch.where's arguments: (condition, obj, other)."""
    names = ("condition", "other")
    given = dict(zip(names, args), **kwargs)
    if len(args) > 2 or set(given) != set(names) or set(kwargs) & set(names[:len(args)]):
        raise exc.UnsupportedOperation("Tensor.where takes (condition, other), as torch.where(condition, self, other).")
    return (given["condition"], obj, given["other"]), {}
