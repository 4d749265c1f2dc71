"""Recording host code: the host program's steps (allocations, host ops, host stores and,
from the tracer, device loop calls), in the order they run.

Host values are whole tensors (`HostTensor`) and runtime scalars (`HostScalar`); an op on
them is a `HostOp` whose result gets a temporary name (`_t3`) until the user's variable
names it (`TracedStatements.statement_executed`).
"""
from __future__ import annotations

from typing import Any, Iterator

import torch

from .. import exc
from ..ir import Allocate, HostOp, HostStore, ScalarSymbol, TensorSymbol, ops
from ..ir.sizes import SymbolicSize, same_shape
from .indexing import check_host_subscript
from .operands import check_dtype, shape_key, symbolic_result_shape
from .proxies import DeviceTensor, HostScalar, HostTensor, TileProxy


class HostProgram:
    """The steps of the host program; `recorder` is the proxies' `OpRecorder`, whose running
    statement's line each step carries and whose meta shape rules a store runs."""

    def __init__(self, recorder: Any):
        self.recorder = recorder
        self.steps: list = []
        self._temp_count = 0
        self.view_steps: dict[int, HostOp] = {}  # a view's id -> the step that made it (its base: view_of)
        # an int scalar computed from int arguments (`d = c + 1`) -> how to compute it (`_static_int`)
        self.static_scalars: dict[int, Any] = {}
        self.noncontiguous: set[str] = set()  # arguments the caller passed non-contiguous

    def root_of(self, symbol: TensorSymbol) -> TensorSymbol:
        """The buffer `symbol` views through host views (itself when it views none)."""
        while symbol.id in self.view_steps:
            symbol = self.view_steps[symbol.id].view_of
        return symbol

    def view_chain(self, symbol: TensorSymbol) -> Iterator[HostOp]:
        """The host view steps from `symbol` up to the buffer it views, nearest first."""
        while symbol.id in self.view_steps:
            step = self.view_steps[symbol.id]
            yield step
            symbol = step.view_of

    def same_order_view(self, symbol: TensorSymbol, shape: tuple) -> TensorSymbol | None:
        """A tensor `symbol` is a reshape of (through reshapes only, so with the same elements
        in the same order) that has `shape`, or None: `x` for `x.view(-1)` and (n, w). None
        for a non-contiguous argument's reshapes: torch copies them."""
        if self.root_of(symbol).name in self.noncontiguous:
            return None
        for step in self.view_chain(symbol):
            if same_shape(tuple(symbol.shape), tuple(shape)):
                return symbol
            if step.op != "reshape":
                return None
            symbol = step.view_of
        return symbol if same_shape(tuple(symbol.shape), tuple(shape)) else None

    def _copied_flat(self, op: ops.OpDef, operands: tuple, results: list) -> bool:
        """`x.reshape(-1)` of an argument the caller passed non-contiguous (`w.t()`): torch
        flattens it into a new tensor, not a view of x."""
        base = operands[0] if operands else None
        return (op.name == "reshape" and isinstance(base, TensorSymbol) and base.origin == "arg"
                and base.name in self.noncontiguous and len(results) == 1 and len(results[0].shape) == 1
                and sum(1 for extent in base.shape if extent != 1) > 1)

    def _temp_name(self) -> str:
        self._temp_count += 1
        return f"_t{self._temp_count}"

    def operand(self, item: Any) -> Any:
        """A host operand as the IR holds it: symbols for proxies."""
        if isinstance(item, (HostTensor, HostScalar)):
            return item.symbol
        if isinstance(item, (DeviceTensor, TileProxy)):
            raise exc.DeviceValueInHostCode(
                "A value from inside a device loop is used in host code; store it into a "
                "tensor inside the loop instead."
            )
        if isinstance(item, (list, tuple)):
            return type(item)(self.operand(i) for i in item)
        return item

    def op(self, op: ops.OpDef, operands, attrs, meta_out, display):
        """Record a bound op of host code as a `HostOp`; its results' proxies."""
        host_operands = tuple(self.operand(o) for o in operands)
        if op.view is ops.ViewRule.SUBSCRIPT:
            attrs = {"key": self.operand(attrs["key"])}
        metas = list(meta_out) if isinstance(meta_out, (tuple, list)) else [meta_out]
        base = host_operands[0] if host_operands else None
        if (op.name == "to" and isinstance(base, TensorSymbol) and not attrs.get("copy")
                and attrs.get("dtype") == (base.caller_dtype or base.dtype)):
            # a cast to the dtype it has is the tensor itself, as in torch: `x.float()` of a
            # float32 x, `idx.long()` of an int64 index argument
            return self._proxy(base)
        scalars_only = not any(isinstance(o, TensorSymbol) for o in host_operands)
        results = []
        for meta in metas:
            check_dtype(meta.dtype, f"The result of {display}")
            if scalars_only and meta.ndim == 0:
                results.append(ScalarSymbol(self._temp_name(), meta.dtype))
            else:
                shape = symbolic_result_shape(op, host_operands, tuple(meta.shape), attrs)
                results.append(TensorSymbol(self._temp_name(), shape, meta.dtype, "host_op"))
        copied_flat = self._copied_flat(op, host_operands, results)
        if copied_flat and display == "Tensor.view":
            raise exc.ShapeMismatch(
                f"{host_operands[0].name}.view(...): the caller passed '{host_operands[0].name}' non-contiguous, "
                "and torch cannot view it flat (it raises); use .reshape(...), which copies it.")
        is_view = op.kind is ops.OpKind.VIEW and not _copies(op, attrs) and not copied_flat
        view_of = host_operands[0] if is_view and isinstance(host_operands[0], TensorSymbol) else None
        if view_of is not None and op.name == "reshape" and len(results) == 1:
            same = self.same_order_view(view_of, results[0].shape)
            if same is not None:  # `x.view(-1).view(n, d)`, `x.view(x.shape)`: x itself, so a
                return self._proxy(same)  # device loop names one operand for the buffer, not two
        wide = next((o.caller_dtype for o in host_operands if isinstance(o, TensorSymbol) and o.caller_dtype), None)
        if wide is not None and op.kind in (ops.OpKind.VIEW, ops.OpKind.ELEMENTWISE) and op.name != "to":
            for symbol in results:  # a part of an int64 index tensor, or integers computed from it,
                if symbol.dtype == torch.int32:  # are int64 to host code too (torch's promotion)
                    symbol.caller_dtype = wide
        result = results[0] if len(results) == 1 and not isinstance(meta_out, (tuple, list)) else tuple(results)
        static = _static_int(op, operands, attrs, self.static_scalars) if scalars_only else None
        if static is not None:  # `d = c + 1` of int arguments: a shift `x[t.index - d]` makes it a constant
            self.static_scalars[result.id] = static
        step = HostOp(op.name, host_operands, attrs, result, self.recorder.location, view_of)
        if view_of is not None:
            self.view_steps.update((symbol.id, step) for symbol in results if isinstance(symbol, TensorSymbol))
        self.steps.append(step)
        proxies = [self._proxy(r) for r, _ in zip(results, operands)]
        if isinstance(meta_out, (tuple, list)):
            return type(meta_out)(proxies)
        return proxies[0]

    def store(self, tensor: HostTensor, key: Any, value: Any) -> None:
        """`tensor[key] = value` in host code: recorded as a `HostStore` of the whole tensor."""
        name = tensor.symbol.name
        check_host_subscript(key, name)
        if isinstance(value, (list, tuple)):
            raise exc.UnsupportedOperation(f"Cannot store a Python {type(value).__name__} into {name}; "
                                           "store a tensor or a number.")
        shape = self.recorder.run_on_meta(_indexed_after_store, (tensor, key, value), {}, f"{name}[...] = value")
        step = HostStore(tensor.symbol, self.operand(key), self.operand(value), tuple(shape),
                         self.recorder.location)
        self.steps.append(step)

    def _proxy(self, symbol: Any) -> Any:
        if isinstance(symbol, ScalarSymbol):
            return HostScalar(self.recorder, symbol, int if not symbol.dtype.is_floating_point else float)
        return HostTensor(self.recorder, symbol)

    def arange(self, args: tuple, kwargs: dict) -> HostTensor:
        """`torch.arange(...)` in host code of compile-time numbers (shapes, constants,
        specialized scalars): an `Allocate` of the ramp, built at each call like any
        allocation (so a device loop may read it as it reads an argument)."""
        names = ("start", "end", "step")
        given = dict(zip(("end",) if len(args) == 1 else names, args))
        given.update((name, kwargs[name]) for name in names if name in kwargs)
        start, end, step = given.get("start", 0), given.get("end"), given.get("step", 1)
        for value in (start, end, step):
            if isinstance(value, (HostScalar, HostTensor, DeviceTensor)):
                raise exc.UnsupportedOperation(
                    "torch.arange in host code takes compile-time numbers (sizes, constants); this bound is a "
                    "runtime value. hl.specialize it, or build the ramp in device code with hl.arange.")
        if end is None:
            raise exc.UnsupportedOperation("torch.arange() needs an end.")
        numbers = (start, end, step)
        floats = any(isinstance(v, float) for v in numbers)
        if any(isinstance(v, float) and not v.is_integer() for v in (start, step)):
            raise exc.UnsupportedOperation(
                "torch.arange in host code with a fractional start or step: its values are built from an int32 "
                "ramp, exact only for whole numbers. Scale a whole ramp instead, with the rounding you mean: "
                "`hl.arange(n).to(torch.float32) * step + start` in device code.", forms_anchor="allocations")
        start, step = (int(v) if isinstance(v, float) else v for v in (start, step))
        dtype = kwargs.get("dtype") or (torch.get_default_dtype() if floats else torch.int64)
        if dtype == torch.int64:
            raise exc.UnsupportedDtype(
                "torch.arange in host code gives int64 here, which a TPU kernel cannot hold in vectors; "
                "pass dtype=torch.int32.", forms_anchor="allocations")
        if dtype in (torch.bfloat16, torch.float16):
            raise exc.UnsupportedDtype(
                f"torch.arange in host code with dtype={dtype}: torch rounds a 16-bit ramp its own way (not "
                "each exact value to the nearest), which the kernel would not match bit for bit. Build it in "
                "float32 (or int32) and cast where you use it.", forms_anchor="allocations")
        check_dtype(dtype, "torch.arange(...)")
        if isinstance(end, SymbolicSize) or isinstance(start, SymbolicSize) or isinstance(step, SymbolicSize):
            if start != 0 or step != 1 or not isinstance(end, SymbolicSize):
                raise exc.UnsupportedOperation(
                    "torch.arange of a dynamic size (static_shapes=False) is supported as torch.arange(n) only.")
            length = end
        else:
            length = len(torch.arange(start, end, step, dtype=torch.float64 if floats else torch.int64))
            if length and not -2**31 <= min(start, start + (length - 1) * step) <= max(start, start + (length - 1) * step) < 2**31:
                raise exc.UnsupportedOperation(
                    f"torch.arange({start}, {end}, {step}) in host code has values past int32, the widest integer "
                    "a TPU kernel holds.")
        symbol = TensorSymbol(self._temp_name(), (length,), dtype, "alloc")
        self.steps.append(Allocate(symbol, self.recorder.location, ramp=(start, step)))
        return HostTensor(self.recorder, symbol)

    def allocate(self, factory: ops.Factory, args: tuple, kwargs: dict) -> HostTensor:
        """`torch.empty(...)`, `torch.zeros_like(x)`, ... in host code: an `Allocate`."""
        name = factory.name
        like = args[0] if factory.form != "size" else None
        rest = args[1:] if like is not None else args
        fill = factory.fill
        if factory.form == "like":
            shape = tuple(like.shape)
            if fill is ops.FILL_ARGUMENT:
                fill = rest[0] if rest else kwargs["fill_value"]
        else:
            if fill is ops.FILL_ARGUMENT:
                size_arg = rest[0] if rest else kwargs.get("size")
                fill = rest[1] if len(rest) > 1 else kwargs.get("fill_value")
            else:
                size_arg = rest[0] if len(rest) == 1 and isinstance(rest[0], (list, tuple, torch.Size)) else rest
                if not rest:
                    size_arg = kwargs.get("size")
            shape = tuple(s if isinstance(s, SymbolicSize) else int(s) for s in size_arg)
            if any(not isinstance(s, SymbolicSize) and s < 0 for s in shape):
                raise exc.ShapeMismatch(f"torch.{name} of size {list(shape)}: a size is negative.")
        if isinstance(fill, (HostScalar, HostTensor)):
            raise exc.UnsupportedOperation(f"torch.{name} with a runtime fill value is not supported; use hl.specialize.")
        dtype = kwargs.get("dtype") or (like.dtype if like is not None else
                                        (torch.bool if isinstance(fill, bool) else
                                         torch.int64 if isinstance(fill, int) and factory.fill is ops.FILL_ARGUMENT
                                         else torch.get_default_dtype()))
        caller_dtype = None
        if dtype == torch.int64:  # held as int32, returned widened (plan/widened_outputs.py decides if exact)
            dtype, caller_dtype = torch.int32, torch.int64
        check_dtype(dtype, f"torch.{name}(...)")
        symbol = TensorSymbol(self._temp_name(), shape, dtype, "alloc", fill, caller_dtype=caller_dtype)
        self.steps.append(Allocate(symbol, self.recorder.location))
        return HostTensor(self.recorder, symbol)


def _copies(op: ops.OpDef, attrs: dict) -> bool:
    """A VIEW op whose torch result is a new tensor: `clone`, and indexing with an index
    tensor or list (advanced indexing copies)."""
    if attrs.get("copy") or op.view is ops.ViewRule.CONCATENATE:  # torch.cat makes a new tensor
        return True
    if op.view is not ops.ViewRule.SUBSCRIPT:
        return False
    key = attrs["key"] if isinstance(attrs["key"], tuple) else (attrs["key"],)
    return any(isinstance(item, (TensorSymbol, list)) for item in key)


def _indexed_after_store(target: torch.Tensor, key: Any, value: Any) -> torch.Size:
    """torch's own checks of `target[key] = value` (on meta tensors); the indexed shape."""
    target, key = target.clone(), shape_key(key)
    target[key] = value
    return target[key].shape


def _static_int(op: ops.OpDef, operands: tuple, attrs: dict, known: dict) -> Any:
    """How to compute an int host scalar made with +, - or * of ints and int arguments (each
    argument then a constant of the variant, `HostScalar._as_size`), or None."""
    arithmetic = ops.scalar_arithmetic(op.name)
    if arithmetic is None or arithmetic.spelling not in ("+", "-", "*") or len(operands) != 2:
        return None
    parts = []
    for item in operands:
        if type(item) is int:
            parts.append(lambda item=item: item)
        elif isinstance(item, HostScalar) and item.is_int_argument:
            parts.append(item._as_size)
        elif isinstance(item, HostScalar) and item.symbol.id in known:
            parts.append(known[item.symbol.id])
        else:
            return None
    alpha = attrs.get("alpha", 1)
    return lambda: arithmetic.function(parts[0](), parts[1]() * alpha)
