"""Which int64 tensor arguments the host may narrow to int32: those read only as indices.

A TPU has no 64-bit vectors, yet offsets, labels and indices are int64 by default in
torch. The tracer sees such an argument as int32 (`TensorSymbol.caller_dtype` keeps the
caller's int64); this analysis decides whether that is exact. The host converts the
tensor before the call, checking that every value fits int32, so each value the kernel
reads is the caller's. The results agree with torch's as long as the kernel uses them as
positions: indices and gathers, offsets and loop bounds, masks, and — converted to a
float — a length dividing a sum (jagged mean). Where the kernel would produce int64 data
from them, the narrowing would show: values of the tensor (or integers computed from
them) stored into a tensor, the tensor itself written, copied to another device, or
computed with in host code (which returns whole int64 tensors in torch). Those are
`exc.UnsupportedDtype` at the user's line. The runtime (`CompiledKernel`) converts the
arguments this analysis lists and nothing else.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import torch

from .. import exc
from ..ir import (
    DeviceLoopCall, HostOp, HostStore, IfBlock, KernelIR, Load, Node, RemoteCopy, Store, TensorSymbol, TileLoop,
    Value, ops,
)


@dataclass(frozen=True)
class NarrowedArgument:
    """A tensor argument the host converts from `caller_dtype` to `kernel_dtype` before the
    call. `position`: its index among the host function's parameters (the kernel's, then
    the captured tensors). `values_read`: whether the kernel reads its values (not only
    its shape); only then must every value fit `kernel_dtype`, which the host checks."""

    name: str
    position: int
    caller_dtype: torch.dtype
    kernel_dtype: torch.dtype
    values_read: bool


def plan_narrowed_arguments(ir: KernelIR) -> tuple[NarrowedArgument, ...]:
    """The arguments the host narrows; `exc.UnsupportedDtype` where one is used as data."""
    narrowed = {id(symbol): symbol for symbol in ir.arguments
                if isinstance(symbol, TensorSymbol) and symbol.caller_dtype is not None}
    if not narrowed:
        return ()
    flow = _Provenance(narrowed)
    for step in ir.steps:
        if isinstance(step, DeviceLoopCall):
            flow.device_loop(step.loop)
        else:
            flow.host_step(step)
    flow.returned(ir.result)
    return tuple(NarrowedArgument(symbol.name, position, symbol.caller_dtype, symbol.dtype,
                                  symbol.name in flow.read)
                 for position, symbol in enumerate(ir.arguments) if id(symbol) in narrowed)


class _Provenance:
    """Follows the values of narrowed arguments forward through the program: `origin` maps
    each host symbol or device value holding (integers computed from) such an argument's
    values to that argument."""

    def __init__(self, narrowed: dict[int, TensorSymbol]):
        self.origin: dict[int, TensorSymbol] = dict(narrowed)
        self.arguments = set(narrowed)
        self.read: set[str] = set()

    def _of(self, item: Any) -> TensorSymbol | None:
        return self.origin.get(id(item))

    # ------------------------------------------------------------------ host --

    def host_step(self, step: Any) -> None:
        if isinstance(step, HostStore):
            self._key_read(step.key)
            for item, what in ((step.tensor, "writes it in host code"), (step.value, "stores its values in host code")):
                if self._of(item) is not None:
                    raise _data_use(self._of(item), what, step.location)
        elif isinstance(step, HostOp):
            self._host_op(step)

    def _host_op(self, step: HostOp) -> None:
        base, *rest = step.args or (None,)
        if step.op in ops.OPS and ops.OPS[step.op].kind is ops.OpKind.VIEW:  # views, parts, copies
            self._key_read(step.kwargs.get("key", ()))  # an index tensor in a host subscript: a position
            source = self._of(base)
            if source is not None and isinstance(step.result, TensorSymbol):
                self.origin[id(step.result)] = source  # a view or a part of it: still its values
                return
        for item in _flat((base, *rest, *step.kwargs.values())) if step.op != "getitem" else _flat(rest):
            if self._of(item) is not None:
                raise _data_use(self._of(item), "computes with it in host code, where torch's result would be int64",
                                step.location)

    def _key_read(self, key: Any) -> None:
        for item in _flat(key if isinstance(key, (tuple, list)) else (key,)):
            if self._of(item) is not None:
                self.read.add(self._of(item).name)

    def returned(self, result: Any) -> None:
        for item in _flat(result if isinstance(result, (tuple, list)) else (result,)):
            source = self._of(item)
            if source is not None and id(item) not in self.arguments:
                raise _data_use(source, "returns a part or view of it, which would be int32", None)

    # ---------------------------------------------------------------- device --

    def device_loop(self, loop: TileLoop) -> None:
        """Values computed from narrowed tensors, to a fixed point (an inner loop's carried
        value or an if's merged one may take them on in its body), then the stores."""
        before = -1
        while before != len(self.origin):
            before = len(self.origin)
            self._propagate(loop.body)
        self._check_writes(loop.body)

    def _propagate(self, body: list) -> None:
        for item in body:
            if isinstance(item, TileLoop):
                for carried in item.carried:
                    self._merge(carried.param, carried.init, carried.result)
                self._propagate(item.body)
                for carried in item.carried:
                    self._merge(carried.out, carried.init, carried.result)
            elif isinstance(item, IfBlock):
                for body_of_branch in item.bodies:
                    self._propagate(body_of_branch)
                for merged in item.outputs:
                    self._merge(merged.out, merged.then_value, merged.else_value)
            elif isinstance(item, Load):
                source = self._of(item.tensor)
                if source is not None:
                    self.read.add(source.name)
                    self.origin[id(item.output)] = source
            elif isinstance(item, Node):
                sources = [self._of(arg) for arg in _flat(_value_operands(item)) if isinstance(arg, Value)]
                source = next((s for s in sources if s is not None), None)
                if source is not None:
                    for out in item.outputs:
                        if _is_integer(out.dtype):  # a comparison or a float result leaves the positions
                            self.origin[id(out)] = source

    def _merge(self, target: Value | None, *values: Value | None) -> None:
        source = next((self._of(v) for v in values if v is not None and self._of(v) is not None), None)
        if target is not None and source is not None:
            self.origin[id(target)] = source

    def _check_writes(self, body: list) -> None:
        for item in _nodes(body):
            if isinstance(item, Store):
                if self._of(item.tensor) is not None:
                    raise _data_use(self._of(item.tensor), "writes it", item.location)
                value = item.args[0] if item.args else None
                if isinstance(value, Value) and self._of(value) is not None:
                    raise _data_use(self._of(value), "stores its values (or integers computed from them) as data",
                                    item.location)
            elif isinstance(item, RemoteCopy):
                for tensor in (item.src, item.dst):
                    if self._of(tensor) is not None:
                        raise _data_use(self._of(tensor), "copies it to another device", item.location)


def _value_operands(node: Node) -> tuple:
    """The operands whose values a node's result holds or computes from: not the positions a
    gather (`x[rows[t], cols[t]]`) or a narrowing read (`blk[i]`) reads at."""
    if node.op == "subview" or (node.op in ops.OPS and ops.OPS[node.op].kind is ops.OpKind.INDEXED):
        return node.args[:1]
    return node.args


def _nodes(body: list) -> Iterable[Node]:
    for item in body:
        if isinstance(item, TileLoop):
            yield from _nodes(item.body)
        elif isinstance(item, IfBlock):
            for branch in item.bodies:
                yield from _nodes(branch)
        else:
            yield item


def _flat(items: Iterable) -> Iterable:
    for item in items:
        if isinstance(item, (tuple, list)):
            yield from _flat(item)
        elif isinstance(item, slice):
            yield from _flat((item.start, item.stop, item.step))
        else:
            yield item


def _is_integer(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def _data_use(symbol: TensorSymbol, what: str, location: Any) -> exc.UnsupportedDtype:
    wide, narrow = (str(dtype).removeprefix("torch.") for dtype in (symbol.caller_dtype, symbol.dtype))
    return exc.UnsupportedDtype(
        f"'{symbol.name}' is an {wide} tensor, which the kernel can read only as {narrow} (TPU has no 64-bit "
        f"vectors): an {wide} tensor may index, offset and bound loops, but the kernel {what}. Pass "
        f"{symbol.name}.to(torch.{narrow}) if its values fit, or convert what it computes to float32.", location)
