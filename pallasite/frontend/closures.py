"""Tensors a function *argument* closes over (Helion's epilogues: `matmul(x, y, lambda acc,
tile: acc + bias[tile[1]])`).

The kernel calls such a function in device code, so the tensors it reads by name (its
closure variables and the globals its code loads) are implicit kernel inputs, like the
kernel's own captured tensors: each becomes a trailing parameter of the host function
named `<parameter>__<variable>` (`epilogue__bias`), read again at every call, with its
shape and dtype in the variant key (`runtime/scope.py:callable_fingerprint` keys the rest
of the function). The trace calls a copy of the function whose tensor variables are the
proxies of those parameters (`rebound`).

A list or tuple argument holding tensors (Helion's `bufs: list[torch.Tensor]`) is read the
same way: each tensor is a trailing parameter `<parameter>__item_<i>`, and the argument's
spec is a `TensorItems` (its length, its other items), which the trace fills with the
parameters' proxies.
"""
from __future__ import annotations

import dis
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from ..naming import SEPARATOR, captured_name, item_name


def is_plain_function(value: Any) -> bool:
    """A Python function or lambda (its closure and globals can be read and rebound)."""
    return type(value) is types.FunctionType


def _is_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    jax = sys.modules.get("jax")  # a jax.Array too, without importing JAX here
    return jax is not None and isinstance(value, jax.Array)


_GLOBAL_LOADS: dict[types.CodeType, tuple[str, ...]] = {}


def _global_loads(code: types.CodeType) -> tuple[str, ...]:
    """The global names `code` (and the functions nested in it) loads (read once per code
    object: a kernel call reads them at each call)."""
    names = _GLOBAL_LOADS.get(code)
    if names is None:
        names = _GLOBAL_LOADS[code] = tuple(dict.fromkeys(_loads(code)))
    return names


def _loads(code: types.CodeType) -> Iterator[str]:
    for instruction in dis.get_instructions(code):
        if instruction.opname == "LOAD_GLOBAL":
            yield instruction.argval
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _loads(const)


def free_values(fn: types.FunctionType) -> dict[str, Any]:
    """The values `fn` reads by name from outside: its closure variables (as bound now) and
    the globals its code loads, by variable name (an empty cell or a missing global is
    left out: calling `fn` fails the same way)."""
    values: dict[str, Any] = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            values[name] = cell.cell_contents
        except ValueError:
            continue
    for name in _global_loads(fn.__code__):
        if name not in values and name in fn.__globals__:
            values[name] = fn.__globals__[name]
    return values


def closure_tensors(fn: Any) -> dict[str, Any]:
    """The tensors a plain function reads by name (`free_values`), by variable name."""
    if not is_plain_function(fn):
        return {}
    return {name: value for name, value in free_values(fn).items() if _is_tensor(value)}


def argument_closure_tensors(parameters: list[str], values: list[Any]) -> dict[str, Any]:
    """Every tensor the function arguments of one call close over, and every tensor of a list
    or tuple argument, by `captured_name`."""
    found: dict[str, Any] = {}
    for parameter, value in zip(parameters, values):
        if is_plain_function(value):
            for variable, tensor in closure_tensors(value).items():
                found[captured_name(parameter, variable)] = tensor
        elif holds_tensors(value):
            for index, item in enumerate(value):
                if _is_tensor(item):
                    found[item_name(parameter, index)] = item
    return found


def holds_tensors(value: Any) -> bool:
    """A list or tuple argument with a tensor among its items (or theirs)."""
    return isinstance(value, (list, tuple)) and any(_is_tensor(item) or holds_tensors(item) for item in value)


_TENSOR = "tensor"


@dataclass(frozen=True)
class TensorItems:
    """A list or tuple argument holding tensors, as the variant key and the trace see it: its
    type and, per item, `_TENSOR` (an input of its own, by `captured_name`) or the constant."""

    kind: type
    items: tuple

    @classmethod
    def of(cls, value: list | tuple) -> TensorItems:
        return cls(type(value), tuple(_TENSOR if _is_tensor(item) else item for item in value))

    def rebuilt(self, parameter: str, proxy: Callable[[str], Any]) -> list | tuple:
        """The sequence the trace binds: each tensor's proxy (`proxy(captured name)`)."""
        items = [proxy(item_name(parameter, index)) if item == _TENSOR else item
                 for index, item in enumerate(self.items)]
        return self.kind(items)


def rebound(fn: types.FunctionType, replacements: dict[str, Any]) -> types.FunctionType:
    """A copy of `fn` that reads `replacements[name]` wherever it reads the free variable or
    global `name` (the trace's proxies for the tensors it closes over)."""
    if not replacements:
        return fn
    closure = None
    if fn.__closure__ is not None:
        closure = tuple(types.CellType(replacements[name]) if name in replacements else cell
                        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__))
    module_globals = fn.__globals__
    if any(name not in fn.__code__.co_freevars for name in replacements):
        module_globals = {**fn.__globals__, **{name: value for name, value in replacements.items()
                                               if name not in fn.__code__.co_freevars}}
    copy = types.FunctionType(fn.__code__, module_globals, fn.__name__, fn.__defaults__, closure)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = fn.__qualname__
    return copy
