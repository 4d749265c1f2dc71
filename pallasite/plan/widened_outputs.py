"""int64 outputs: host allocations in torch's default integer type that the kernel fills.

`torch.empty([m], dtype=torch.long)` (argmax's indices, labels, positions) allocates int64,
which a TPU cannot hold in vectors. The tracer sees such an allocation as int32
(`TensorSymbol.caller_dtype` keeps the int64); this analysis decides whether that is exact:
the kernel writes int32 values into it and nothing reads them before the tensor is
returned, so the host widens the returned tensor to int64 after the call (every stored
value is an int32, which int64 holds exactly) and the caller sees torch's result.

What would show the narrowing is refused at the user's line (`exc.UnsupportedDtype`): a
device read of it (a load, an atomic update: torch would compute in int64 from the values
read), a float value stored into it (torch truncates to int64, here it would be int32),
host code computing with it or taking views of it, and a fill that does not fit int32.
The runtime (`CompiledKernel`) widens the returned tensors this analysis lists.
"""
from __future__ import annotations

from typing import Any, Iterable

import torch

from .. import exc
from ..ir import Allocate, DeviceLoopCall, HostOp, HostStore, KernelIR, Load, Store, TensorSymbol, Value, walk_nodes

_INT32 = torch.iinfo(torch.int32)


def plan_widened_outputs(ir: KernelIR) -> tuple[str, ...]:
    """The names of the host allocations returned widened to their caller dtype (int64)."""
    widened = {id(step.symbol): step for step in ir.steps
               if isinstance(step, Allocate) and step.symbol.caller_dtype is not None}
    if not widened:
        return ()
    written = {id(node.tensor) for step in ir.steps if isinstance(step, DeviceLoopCall)
               for node in walk_nodes(step.loop.body) if isinstance(node, Store)}
    # a 0-d constant (`torch.tensor(5)`): its one value, within int32, reads as torch's 0-d int64
    # does (a 0-d tensor takes the other operand's integer dtype in torch's promotion)
    constants = {key for key, step in widened.items() if not step.symbol.shape and step.symbol.fill is not None
                 and step.ramp is None and key not in written}
    for step in ir.steps:
        if isinstance(step, Allocate) and id(step.symbol) in widened:
            _check_fill(step)
        elif isinstance(step, DeviceLoopCall):
            _check_device_uses(walk_nodes(step.loop.body), {k: v for k, v in widened.items() if k not in constants})
        elif isinstance(step, (HostOp, HostStore)):
            used = next((s for s in _symbols(_host_operands(step)) if id(s) in widened), None)
            if used is not None:
                raise _narrowing_shows(used, "host code uses it (a view, a copy or arithmetic: "
                                             "torch would compute in int64)", step.location)
    return tuple(step.symbol.name for step in widened.values())


def _check_fill(step: Allocate) -> None:
    fill = step.symbol.fill
    if isinstance(fill, (int, float)) and not isinstance(fill, bool) and not _INT32.min <= fill <= _INT32.max:
        raise _narrowing_shows(step.symbol, f"is filled with {fill}, past int32", step.location)
    if step.ramp is not None:
        raise _narrowing_shows(step.symbol, "is an int64 torch.arange", step.location)


def _check_device_uses(nodes: Iterable[Any], widened: dict[int, Allocate]) -> None:
    for node in nodes:
        tensor = getattr(node, "tensor", None)
        if id(tensor) not in widened:
            continue
        if isinstance(node, Store) and node.kwargs.get("atomic") or not isinstance(node, (Load, Store)):
            raise _narrowing_shows(tensor, "updates it atomically (hl.atomic_*: torch would combine in int64)",
                                   node.location)
        if isinstance(node, Load):
            raise _narrowing_shows(tensor, "reads it in device code (torch would compute in int64 from "
                                           "the values read)", node.location)
        value = node.args[0] if node.args else None
        dtype = value.dtype if isinstance(value, Value) else type(value)
        if dtype in (torch.float32, torch.float16, torch.bfloat16, float):
            raise _narrowing_shows(tensor, "stores float values into it (torch truncates them to int64, "
                                           "which int32 may not hold); cast them to int32 first", node.location)


def _host_operands(step: HostOp | HostStore) -> tuple:
    if isinstance(step, HostStore):
        return (step.tensor, step.key, step.value)
    return (step.args, tuple(step.kwargs.values()), step.view_of)


def _symbols(items: Any) -> Iterable[TensorSymbol]:
    if isinstance(items, TensorSymbol):
        yield items
    elif isinstance(items, (tuple, list)):
        for item in items:
            yield from _symbols(item)
    elif isinstance(items, slice):
        yield from _symbols((items.start, items.stop, items.step))


def _narrowing_shows(symbol: TensorSymbol, what: str, location: Any) -> exc.UnsupportedDtype:
    return exc.UnsupportedDtype(
        f"'{symbol.name}' is an int64 tensor, which the kernel holds as int32 (TPU has no 64-bit vectors) "
        f"and returns widened to int64: exact while the kernel only stores integers into it, but the "
        f"kernel {what}. Allocate it as torch.int32 (and widen the result with .long() outside the "
        "kernel if you need int64).", location)
