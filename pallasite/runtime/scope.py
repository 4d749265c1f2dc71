"""What a kernel reads from its enclosing scope, read again at every call.

The trace runs the kernel's Python with its globals and closure variables, so every
non-tensor it reads there (`SCALE`, `if USE_RELU:`, `CFG.norm.eps`, `ACTIVATION(x)`) is
baked into the compiled variant. `read_scope` returns the tensors among those names
(implicit arguments, see `Kernel.captured_tensors`) and a *fingerprint* of the rest: equal
fingerprints mean the trace would read the same constants. The fingerprint is part of the
variant key (runtime/kernel.py) and, as `repr`, of the autotune cache key.

How a value is fingerprinted (`fingerprint`):
- None, bool, int, str, bytes by value with their type (5 and 5.0 differ); floats and
  complex numbers by their exact bits (`float.hex`: 0.0 and -0.0 differ, every NaN is
  the same NaN); NumPy scalars by dtype and bytes; `torch.dtype` by name.
- tuples, lists, dicts, sets and their subclasses (a NamedTuple, `torch.Size`) by type and
  contents, read at each call (a list changed in place is a new constant).
- dataclass instances and `types.SimpleNamespace` by type and fields.
- modules, functions, classes, methods (function + receiver) and enum members by
  identity; on disk by a stable name (module + qualified name + source hash,
  `autotune.settings.callable_identity`). A plain Python function of the user's (a
  helper the kernel calls) is read too: the constants it reads, and those of the helpers it
  calls, join the fingerprint under `(helper, name)` (library functions are not read).
- tensors inside a constant by identity, shape, dtype and (torch) version counter.
- any other object: by its own `__eq__`/`__hash__` when its class defines both (its way of
  saying two instances are interchangeable), else by identity (rebinding the name is
  seen; a change inside the object is not: read the fields the kernel needs as attribute
  chains, `CFG.eps`, which are read at each call, or pass them as arguments). On disk
  such an object is its type (and its repr without addresses, for value types).
An attribute chain rooted at a free name (`CFG.norm.eps`, `torch.relu`) is evaluated at
each call and its value fingerprinted; the root itself is fingerprinted only where the
kernel uses it whole. A chain that raises is fingerprinted by the exception's type.
"""
from __future__ import annotations

import builtins
import dataclasses
import enum
import os
import re
import sysconfig
import types
from typing import Any, Callable

import jax
import numpy
import torch

from .. import exc
from ..frontend.closures import free_values, is_plain_function
from ..frontend.source import ScopeReads, function_ast, scope_reads

_UNBOUND = object()  # a free name bound nowhere (yet)
_TENSOR_TYPES: dict[type, bool] = {}  # type -> is a torch or JAX tensor (isinstance on jax.Array is slow)


def read_scope(fn: Callable, reads: ScopeReads, constants: bool = True) -> tuple[dict[str, Any], tuple]:
    """The tensors among `fn`'s free names as bound now, and (`constants`) the fingerprint of
    the non-tensors it reads (names used whole, attribute chains). Runs at every call."""
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__)) if fn.__closure__ else {}
    module_globals = fn.__globals__
    values: dict[str, Any] = {}
    tensors: dict[str, Any] = {}
    key: list[tuple] = []
    for name in reads.names:
        value = _lookup(name, cells, module_globals)
        values[name] = value
        if _is_tensor(value):
            tensors[name] = value
        elif not constants:
            continue
        elif value is _UNBOUND:
            key.append((name, ("unbound",)))
        elif name in reads.whole:
            key.append((name, fingerprint(value)))
    if constants:
        for chain in reads.chains:
            value = values[chain[0]]
            if value is _UNBOUND or _is_tensor(value):
                continue  # an unbound root fails the trace; a tensor's shape is in the key already
            key.append((chain, fingerprint_chain(value, chain[1:])))
        _helper_constants(values.values(), key, {fn.__code__})
    return tensors, tuple(key)


def _helper_constants(values, key: list, seen: set) -> None:
    """The constants read by the user's helper functions among `values` (and the helpers they
    call), appended to `key` under `(helper, name)`: the trace runs a helper's Python too, so
    what it reads is baked in like the kernel's own reads."""
    for helper in values:
        reads = _user_helper_reads(helper)
        if reads is None or helper.__code__ in seen:
            continue
        seen.add(helper.__code__)
        cells = dict(zip(helper.__code__.co_freevars, helper.__closure__)) if helper.__closure__ else {}
        found = {name: _lookup(name, cells, helper.__globals__) for name in reads.names}
        prefix = helper.__qualname__
        for name, value in found.items():
            if name in reads.whole and not _is_tensor(value):
                key.append(((prefix, name), ("unbound",) if value is _UNBOUND else fingerprint(value)))
        for chain in reads.chains:
            root = found[chain[0]]
            if root is not _UNBOUND and not _is_tensor(root):
                key.append(((prefix, *chain), fingerprint_chain(root, chain[1:])))
        _helper_constants(found.values(), key, seen)


_LIBRARY_DIRS = tuple({os.path.realpath(path) + os.sep for name in ("stdlib", "platstdlib", "purelib", "platlib")
                       if (path := sysconfig.get_paths().get(name))}
                      | {os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep})
_HELPER_READS: dict[types.CodeType, ScopeReads | None] = {}


def _user_helper_reads(value: Any) -> ScopeReads | None:
    """The scope reads of a plain Python function of the user's (not a library's or
    pallasite's own), None for anything else or a function without source."""
    if type(value) is not types.FunctionType:
        return None
    code = value.__code__
    if code not in _HELPER_READS:
        reads = None
        filename = os.path.realpath(code.co_filename)
        if os.path.isfile(filename) and not filename.startswith(_LIBRARY_DIRS) and code.co_name != "<lambda>":
            try:
                reads = scope_reads(function_ast(value)[0])
            except (exc.PallasiteError, SyntaxError, OSError, TypeError):
                reads = None  # no source to read: compared by identity, as before
        _HELPER_READS[code] = reads
    return _HELPER_READS[code]


def changed_names(before: tuple, after: tuple) -> list[str]:
    """The names (or attribute chains) whose fingerprints differ between two `read_scope`s."""
    old, new = dict(before), dict(after)
    return [name if isinstance(name, str) else ".".join(name)
            for name in dict.fromkeys([*old, *new]) if old.get(name) != new.get(name)]


def _is_tensor(value: Any) -> bool:
    kind = type(value)
    known = _TENSOR_TYPES.get(kind)
    if known is None:
        known = _TENSOR_TYPES[kind] = isinstance(value, (torch.Tensor, jax.Array))
    return known


def _lookup(name: str, cells: dict, module_globals: dict) -> Any:
    if name in cells:
        try:
            return cells[name].cell_contents
        except ValueError:  # a closure variable not assigned yet
            return _UNBOUND
    if name in module_globals:
        return module_globals[name]
    return getattr(builtins, name, _UNBOUND)


def fingerprint_chain(value: Any, attributes: tuple[str, ...]) -> tuple:
    try:
        for attribute in attributes:
            value = getattr(value, attribute)
    except Exception as err:  # noqa: BLE001 - the trace meets the same error, or never reads it
        return ("unreadable", type(err).__name__)
    return fingerprint(value)


# ----------------------------------------------------------------- fingerprints --

class _Same:
    """A value compared by identity (held, so its id is not reused); its repr is a name
    that is stable across processes (the on-disk form)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)

    def __repr__(self) -> str:
        return stable_name(self.value)


class _Tensor(_Same):
    """A tensor inside a constant: identity, shape, dtype and version counter (an in-place
    change bumps it); on disk its shape and dtype."""

    __slots__ = ("state",)

    def __init__(self, value: Any):
        super().__init__(value)
        self.state = (tuple(value.shape), str(value.dtype), getattr(value, "_version", None))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Tensor) and other.value is self.value and other.state == self.state

    def __hash__(self) -> int:
        return hash((id(self.value), self.state))

    def __repr__(self) -> str:
        return f"tensor{list(self.state[0])}:{self.state[1]}"


class _ByValue:
    """An object whose class defines `__eq__` and `__hash__`: compared by them; on disk its
    type and its repr with memory addresses removed."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _ByValue) or type(other.value) is not type(self.value):
            return False
        try:
            return bool(other.value == self.value)
        except Exception:  # noqa: BLE001 - an __eq__ that raises or is not a truth value: unequal
            return other.value is self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"{stable_name(type(self.value))}:{re.sub(r' at 0x[0-9a-fA-F]+', '', repr(self.value))}"


def stable_name(value: Any) -> str:
    """A name of a value compared by identity that a second process gives it too."""
    from ..autotune.settings import callable_identity

    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    if isinstance(value, enum.Enum):
        return f"{stable_name(type(value))}.{value.name}"
    if callable(value) and (isinstance(value, type) or hasattr(value, "__qualname__")):
        return callable_identity(value)
    return f"object of {stable_name(type(value))}"


_PLAIN = (bool, int, str, bytes)
_THEMSELVES = frozenset({types.FunctionType, types.ModuleType, type})
_CONTAINERS = (tuple, list, dict, set, frozenset)
_IDENTITY = (types.ModuleType, types.FunctionType, type, enum.Enum, types.MethodDescriptorType,
             types.WrapperDescriptorType)


def fingerprint(value: Any, active: frozenset[int] = frozenset()) -> Any:
    """A hashable value equal for two values the trace cannot tell apart (module docstring);
    `active`: the ids of the containers being fingerprinted around it (cycles)."""
    kind = type(value)
    if value is None or kind in _PLAIN:
        return (kind.__name__, value)
    if kind is float:
        return ("float", value.hex())
    if kind in _THEMSELVES:  # compared by identity already; named on disk by `stable_text`
        return value
    if kind is types.BuiltinFunctionType and (value.__self__ is None or type(value.__self__) is types.ModuleType):
        return value  # `torch.relu`, `len` (a builtin *method* is a new object at each read: below)
    if id(value) in active:  # a container holding itself
        return ("cycle",)
    if isinstance(value, _CONTAINERS):
        return _container(value, active | {id(value)})
    if isinstance(value, (types.MethodType, types.BuiltinMethodType, types.MethodWrapperType)):
        return _method(value, active)
    if isinstance(value, (torch.Tensor, jax.Array)):
        return ("tensor", _Tensor(value))
    if isinstance(value, torch.dtype):
        return ("dtype", str(value))
    if isinstance(value, numpy.generic):
        return ("numpy", str(value.dtype), value.tobytes())
    if isinstance(value, _IDENTITY):
        return ("same", _Same(value))
    if isinstance(value, complex):
        return ("complex", _Same(kind), value.real.hex(), value.imag.hex())
    if isinstance(value, (float, *_PLAIN)):  # subclasses (an IntEnum is an Enum, above)
        base = next(b for b in (float, *_PLAIN) if isinstance(value, b))
        return ("subclass", _Same(kind), fingerprint(base(value)))
    if dataclasses.is_dataclass(value):
        inside = active | {id(value)}
        return ("dataclass", _Same(kind),
                tuple((f.name, fingerprint(getattr(value, f.name), inside)) for f in dataclasses.fields(value)))
    if kind is types.SimpleNamespace:
        inside = active | {id(value)}
        return ("namespace", tuple((k, fingerprint(v, inside)) for k, v in vars(value).items()))
    if _defines_value_equality(kind):
        try:
            hash(value)
        except Exception:  # noqa: BLE001 - an unhashable value: by identity
            return ("object", _Same(value))
        return ("value", _ByValue(value))
    return ("object", _Same(value))


def argument_fingerprint(value: Any) -> Any:
    """A non-tensor, non-scalar kernel argument in the variant key: its `fingerprint`, but a
    plain function (an epilogue) by `callable_fingerprint`, so a new lambda of the same
    code reading the same values is the same variant."""
    return callable_fingerprint(value) if is_plain_function(value) else fingerprint(value)


def callable_fingerprint(fn: types.FunctionType) -> tuple:
    """A function argument as the trace reads it: its code, its defaults and the values it
    reads by name (`frontend/closures.py:free_values`). Its tensors count only by name: they
    are captured inputs (`epilogue__bias`), whose shapes and dtypes the key holds, and
    whose data is passed at each call, so another tensor of the same shape reuses the
    variant and is read, never stale data."""
    reads = tuple((name, ("tensor",) if _is_tensor(value) else fingerprint(value))
                  for name, value in free_values(fn).items())
    return ("function", fn.__code__, fingerprint(fn.__defaults__), fingerprint(fn.__kwdefaults__), reads)


def _method(value: Any, active: frozenset[int]) -> tuple:
    """A function with its receiver. A builtin function's receiver is None or its module
    (`torch.relu`, `len`): the function itself, by identity. A builtin method is a new
    object at each attribute read: its receiver's type and the method's name."""
    receiver = getattr(value, "__self__", None)
    if receiver is None or isinstance(receiver, types.ModuleType):
        return ("same", _Same(value))
    function = getattr(value, "__func__", None)
    if function is None:
        return ("method", _Same(type(receiver)), value.__name__, fingerprint(receiver, active))
    return ("method", _Same(function), fingerprint(receiver, active))


def _container(value: Any, active: frozenset[int]) -> tuple:
    kind = type(value)
    tag = kind.__name__ if kind in (tuple, list, dict, set, frozenset) else _Same(kind)
    if isinstance(value, dict):
        return ("dict", tag, tuple((fingerprint(k, active), fingerprint(v, active)) for k, v in value.items()))
    if isinstance(value, (set, frozenset)):  # contents in a stable order (a str's hash differs per process)
        return ("set", tag, tuple(sorted((fingerprint(v, active) for v in value), key=repr)))
    return ("sequence", tag, tuple(fingerprint(v, active) for v in value))


def _defines_value_equality(kind: type) -> bool:
    return kind.__eq__ is not object.__eq__ and kind.__hash__ not in (None, object.__hash__)


def stable_text(key: Any) -> str:
    """A fingerprint as text that a second process writes too (the autotune cache key):
    what is compared by identity is written by `stable_name`."""
    if isinstance(key, tuple):
        return "(" + ", ".join(stable_text(item) for item in key) + ")"
    if key is None or isinstance(key, (str, int, bytes)) or isinstance(key, (_Same, _ByValue)):
        return repr(key)
    return stable_name(key)
