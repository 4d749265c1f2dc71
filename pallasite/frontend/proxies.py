"""Stand-ins for tensors and scalars while a kernel is traced.

`HostTensor` is a whole tensor of host code (a kernel argument or a host
allocation); `DeviceTensor` is a value inside a device loop (a block, a
scalar read, a computed tile); `HostScalar` is a runtime scalar argument;
`TileProxy` is the loop variable of `hl.tile`. Every operation on them goes
to the active `Tracer`, which records IR.
"""
from __future__ import annotations

import math
import operator
import sys

from typing import Any, Callable

import torch

from .. import exc
from ..ir import ScalarSymbol, TensorSymbol, TileDim, Value, ops
from .tile_runs import constant_int, tile_run
from .tile_sizes import numel, sizes, user_frame


class Traced:
    """Operator plumbing shared by every proxy: each operator is one tracer call."""

    _tracer: Any

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        tracer = next(a._tracer for a in flatten_operands(args, kwargs) if isinstance(a, Traced))
        return tracer.torch_function(func, args, kwargs or {})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        tracer = self.__dict__.get("_tracer") if "_tracer" in self.__dict__ else None
        if tracer is None:
            raise AttributeError(name)
        python_type = self.__dict__.get("python_type")  # a HostScalar's: an int or float argument
        if python_type is not None and hasattr(python_type, name):
            raise exc.UnsupportedOperation(
                f"{python_type.__name__}.{name} of a runtime scalar argument: its value is not known while "
                f"compiling; hl.specialize() it (a constant of the variant) to use .{name}.")
        if not hasattr(torch.Tensor, name):
            raise exc.UnknownAttribute(f"'{(python_type or torch.Tensor).__name__}' object has no attribute "
                                       f"'{name}' (as Python says).")
        if not callable(getattr(torch.Tensor, name)):  # a property (x.requires_grad, x.is_cuda): its value
            return tracer.tensor_property(self, name)  # now, never a truthy stand-in for one

        def method(*args: Any, **kwargs: Any) -> Any:
            return tracer.call_method(self, name, args, kwargs)

        return method

    def __bool__(self) -> bool:
        raise exc.UnsupportedSyntax(
            "The truth value of a traced tensor is not known while the kernel is "
            "compiled. Use torch.where, or hl.specialize for host scalars."
        )

    def __iter__(self):
        raise exc.UnsupportedSyntax("Iterating over a traced tensor is not supported.")

    # numpy on a traced tensor: a ufunc (np.exp) or a function (np.sum) says what to write instead
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        raise _numpy_refusal(f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}"))

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        raise _numpy_refusal(f"numpy.{func.__name__}")

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise _numpy_refusal("a numpy conversion")


def _numpy_refusal(what: str) -> exc.UnsupportedOperation:
    """`numpy.exp(tile)` (what: "numpy.exp") or a conversion to an array: torch's op is the way."""
    advice = f"write torch.{what.split('.')[-1]}" if what.startswith("numpy.") else "write torch ops"
    return exc.UnsupportedOperation(
        f"{what} on a traced tensor: numpy computes on host arrays, not on a kernel's tensors; {advice} instead.")


def _make_binary(dunder: str, name: str, meta: Any, reflected: bool):
    def op(self, other):
        args = (other, self) if reflected else (self, other)
        return self._tracer.apply(name, meta, args, {}, display=f"operator {dunder}")

    op.__name__ = dunder
    return op


def _make_unary(dunder: str, name: str, meta: Any):
    def op(self):
        return self._tracer.apply(name, meta, (self,), {}, display=f"operator {dunder}")

    op.__name__ = dunder
    return op


def _install_operator(op: ops.OpDef) -> None:
    """`a + b` on proxies records the op whose Python operator spelling `+` is."""
    spelled = op.operator
    if len(op.signature.operands) == 1:
        setattr(Traced, spelled.dunder, _make_unary(spelled.dunder, op.name, spelled.function))
        return
    setattr(Traced, spelled.dunder, _make_binary(spelled.dunder, op.name, spelled.function, False))
    if spelled.reflected is not None:
        setattr(Traced, spelled.reflected, _make_binary(spelled.reflected, op.name, spelled.function, True))


for _op in ops.OPS.values():
    if _op.operator is not None:
        _install_operator(_op)
Traced.__hash__ = object.__hash__  # __eq__ is traced; identity hashing stays

# `x op= v` on a device value: torch's in-place update (DeviceTensor installs these)
AUGMENTED_OPERATORS = {"__iadd__": ("__add__", "+"), "__isub__": ("__sub__", "-"), "__imul__": ("__mul__", "*"),
                       "__itruediv__": ("__truediv__", "/"), "__ifloordiv__": ("__floordiv__", "//"),
                       "__imod__": ("__mod__", "%"), "__ipow__": ("__pow__", "**"), "__iand__": ("__and__", "&"),
                       "__ior__": ("__or__", "|"), "__ixor__": ("__xor__", "^"),
                       "__ilshift__": ("__lshift__", "<<"), "__irshift__": ("__rshift__", ">>")}


def _make_augmented(binary: str, symbol: str):
    def op(self, other):
        check = self._tracer.check_in_place  # refuses when another live name holds this value
        if check is not None:
            check(self, symbol)
        result = getattr(self, binary)(other)
        if not isinstance(result, _TensorLike):
            return result
        producer = result.value.producer if isinstance(result, DeviceTensor) else None
        if producer is not None and producer.args and producer.args[0] is getattr(self, "value", None):
            producer.in_place = True  # torch keeps x's dtype: int32 x += an int64 value wraps
        cast = ops.augmented_dtype(tuple(self.meta.shape), self.dtype, tuple(result.meta.shape), result.dtype, symbol)
        if cast is None:
            return result
        return self._tracer.apply("to", None, (result, cast), {}, display=f"x {symbol}= v")

    return op


def flatten_operands(args: Any, kwargs: Any = None):
    for item in list(args) + list((kwargs or {}).values()):
        if isinstance(item, (list, tuple)):
            yield from flatten_operands(item)
        else:
            yield item


class _TensorLike(Traced):
    """Shape queries answered from a meta tensor (static shapes)."""

    meta: torch.Tensor

    @property
    def shape(self) -> torch.Size:
        return self.meta.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.meta.dtype

    @property
    def ndim(self) -> int:
        return self.meta.ndim

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def size(self, dim: int | None = None) -> Any:
        return self.meta.size() if dim is None else self.meta.size(dim)

    def dim(self) -> int:
        return self.meta.dim()

    def numel(self) -> int:
        return self.meta.numel()

    def element_size(self) -> int:
        return self.meta.element_size()

    def stride(self, dim: int | None = None) -> Any:
        return self.meta.stride() if dim is None else self.meta.stride(dim)

    def is_contiguous(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def __len__(self) -> int:
        return self.meta.shape[0]

    @property
    def T(self) -> Any:  # noqa: N802 - torch's spelling
        return self._tracer.call_method(self, "t", (), {})

    @property
    def mT(self) -> Any:  # noqa: N802
        return self._tracer.call_method(self, "transpose", (-2, -1), {})

    @property
    def data(self) -> Any:
        """`x.data`: the same tensor (nothing here records gradients)."""
        return self

    @property
    def real(self) -> Any:
        """`x.real` of a real tensor: the tensor itself, as in torch."""
        if self.dtype.is_complex:
            raise exc.UnsupportedDtype(f"{self.dtype} tensors are not supported.")
        return self

    def __getitem__(self, key: Any) -> Any:
        return self._tracer.subscript(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._tracer.store(self, key, value)


class HostTensor(_TensorLike):
    """A whole tensor of host code."""

    def __init__(self, tracer: Any, symbol: TensorSymbol):
        self._tracer = tracer
        self.symbol = symbol
        self.meta = torch.empty(symbol.shape, dtype=symbol.dtype, device="meta")

    def __repr__(self) -> str:
        return f"HostTensor({self.symbol!r})"

    @property
    def dtype(self) -> torch.dtype:
        """The caller's dtype: an int64 index tensor the kernel reads as int32 is still int64
        to host code (`torch.empty_like(offsets)` would allocate int64, as in torch)."""
        return self.symbol.caller_dtype or self.meta.dtype

    # Sizes come from the symbol, so a dynamic size (static_shapes=False) stays symbolic.
    @property
    def shape(self) -> tuple:
        return tuple(self.symbol.shape)

    def size(self, dim: int | None = None) -> Any:
        return tuple(self.symbol.shape) if dim is None else self.symbol.shape[dim]

    def numel(self) -> int:
        total = 1
        for extent in self.symbol.shape:
            total = total * extent
        return total

    def __len__(self) -> int:
        return self.meta.shape[0]

    def __int__(self) -> Any:
        """`int(offsets[-1])`: the element's value, as `.item()` reads it in host code."""
        return self._tracer.call_method(self, "item", (), {})

    __index__ = __int__


def _whole(tensor: HostTensor) -> Any:
    """The index of every element of `tensor` (`...` for a 0-d one)."""
    return (slice(None),) * len(tensor.shape) if tensor.shape else ...


def _make_host_augmented(binary: str, symbol: str):
    """`x op= v` in host code updates the tensor x names in place, as torch does: the caller
    sees it (an argument) and so does every view or other name of it (`v = x.view(-1);
    v += 1`), not only the name x."""
    augmented = _make_augmented(binary, symbol)

    def op(self, other):
        result = augmented(self, other)
        if not isinstance(result, _TensorLike):
            return result
        self[_whole(self)] = result
        return self

    return op


for _dunder, (_binary, _symbol) in AUGMENTED_OPERATORS.items():
    setattr(HostTensor, _dunder, _make_host_augmented(_binary, _symbol))


def _host_in_place_methods() -> dict[str, Any]:
    """torch's in-place methods in host code, each the in-place update its operator or
    `x[...] = v` spelling makes (so the caller and every view see it)."""
    def zero_(self):
        self[_whole(self)] = 0
        return self

    def fill_(self, value):
        self[_whole(self)] = value
        return self

    def copy_(self, src, non_blocking=False):
        self[_whole(self)] = src
        return self

    def add_(self, other, *, alpha=1):
        return self.__iadd__(other if alpha == 1 else other * alpha)

    def sub_(self, other, *, alpha=1):
        return self.__isub__(other if alpha == 1 else other * alpha)

    def mul_(self, other):
        return self.__imul__(other)

    def div_(self, other, *, rounding_mode=None):
        if rounding_mode is None:
            return self.__itruediv__(other)
        return self.copy_(self._tracer.torch_function(torch.div, (self, other), {"rounding_mode": rounding_mode}))

    return {fn.__name__: fn for fn in (zero_, fill_, copy_, add_, sub_, mul_, div_)}


for _name, _method in _host_in_place_methods().items():
    setattr(HostTensor, _name, _method)


class DeviceTensor(_TensorLike):
    """A value inside a device loop."""

    # `tile + c` (TileProxy): an axis of a subscript, not an index tensor (paired_indexing)
    tile_axis = False

    def __init__(self, tracer: Any, value: Value):
        self._tracer = tracer
        self.value = value
        self.meta = torch.empty(value.shape, dtype=value.dtype, device="meta")

    def __repr__(self) -> str:
        return f"DeviceTensor({self.value!r})"

    # To the user's code, sizes along a tile with a partial tail are that tile's
    # (frontend/tile_sizes.py: its extent in arithmetic, its axis in a shape), as in torch.
    # pallasite's own code (composites, language functions) reasons in whole blocks, whose
    # padding the mask planner handles, and sees the block shape.
    @property
    def shape(self) -> Any:
        return sizes(self) if user_frame(sys._getframe(1)) else self.meta.shape

    def size(self, dim: int | None = None) -> Any:
        shape = sizes(self) if user_frame(sys._getframe(1)) else self.meta.shape
        return shape if dim is None else shape[dim]

    def numel(self) -> Any:
        return numel(self) if user_frame(sys._getframe(1)) else self.meta.numel()

    def __len__(self) -> int:
        return operator.index(sizes(self)[0]) if user_frame(sys._getframe(1)) else self.meta.shape[0]

    def item(self) -> "DeviceTensor":
        """`t.item()` in device code: the one element as a device scalar (it has no Python
        value while tracing; it computes, indexes and bounds loops as one)."""
        if math.prod(self.value.shape) != 1:
            raise exc.UnsupportedOperation(
                f"item() of a device value of shape {list(self.value.shape)}: only a one-element value "
                "has an item (as in torch).")
        return self if self.value.shape == () else self._tracer.call_method(self, "reshape", ([],), {})

    @property
    def tile_shift(self) -> int | None:
        """c when this is a tile's positions shifted by a constant (`tile.index + c`, a
        `ShiftedTile` index), else None."""
        run = tile_run(self.value, int_argument_value)
        return None if run is None else run[1]

    # A device scalar used as a Python index or int needs a compile-time value.
    def __index__(self) -> int:
        raise exc.UnsupportedSyntax(
            "A device value (read from a tensor, or computed from one) was used where a compile-time integer "
            "is needed (a Python `range`, a size, an index of a list). Loop over it with "
            "`for i in hl.grid(n[0])` or `hl.tile(0, n[0])` (a bound read when the kernel runs), or pass the "
            "number as an int argument.")


for _dunder, (_binary, _symbol) in AUGMENTED_OPERATORS.items():
    setattr(DeviceTensor, _dunder, _make_augmented(_binary, _symbol))


class HostScalar(Traced):
    """A runtime int/float kernel argument: its value is not known while compiling."""

    # `min(256, n)` of ints and int arguments (the tracer's builtin min/max): how to compute the
    # value when compiling, making those arguments constants of the variant (None: unknown)
    static_value: Callable[[], int] | None = None

    def __init__(self, tracer: Any, symbol: Any, python_type: type):
        self._tracer = tracer
        self.symbol = symbol
        self.python_type = python_type
        dtype = torch.int32 if python_type is int else torch.float32
        self.meta = torch.empty((), dtype=dtype, device="meta")

    @property
    def dtype(self) -> torch.dtype:
        return self.meta.dtype

    def _needs_specialize(self, *_: Any) -> Any:
        name = self.symbol.name
        what = (f"Scalar argument '{name}' is" if not name.startswith("_t") else
                "A value computed from a scalar argument is")
        raise exc.UnsupportedSyntax(
            f"{what} a runtime value, so it cannot size, shape or branch host code. Wrap the "
            "argument in hl.specialize(...) to make it a compile-time constant (the kernel then "
            "recompiles per value)."
        )

    @property
    def is_int_argument(self) -> bool:
        """An int kernel argument itself (not a value host code computed from one)."""
        return self.python_type is int and not self.symbol.name.startswith("_t")

    def _as_size(self) -> int:
        """An int argument used where an int is needed (`torch.zeros([m, width])`, `x[:, :width]`):
        made a constant of its variant, as `hl.specialize(width)` would (Helion needs no call for
        a scalar that only sizes tensors), and so is a builtin `min`/`max` of ints and int
        arguments (`hl.register_block_size(min(256, block_m))`, flex attention) and `+`, `-`, `*`
        of them (`width + 1`); another value computed from one still needs hl.specialize."""
        value = self.constant_of_variant()
        return self._needs_specialize() if value is None else value

    def constant_of_variant(self) -> int | None:
        """The int this scalar is when compiling, its int arguments made constants of the
        variant (an int argument, a builtin `min`/`max`, or `+`, `-`, `*` of ints and int
        arguments in host code: `n - c`), else None."""
        from .. import language as hl

        tracer = hl.active_tracer()
        if tracer is None or self.python_type is not int:
            return None
        if self.is_int_argument:
            return hl.specialize(self)
        if self.static_value is not None:
            return self.static_value()
        static = tracer.recorder.host.static_scalars.get(self.symbol.id)  # `d = c + 1` in host code
        return None if static is None else static()

    __index__ = __int__ = _as_size

    def __float__(self) -> float:
        """`float(n)` of a scalar argument in host code (ragged attention's `1.0 / float(max_seq_len)`):
        its value, made a constant of the variant as `hl.specialize` would (reference mode
        reads the value too); another value computed from one still needs hl.specialize."""
        from .. import language as hl

        if not self.symbol.name.startswith("_t") and hl.active_tracer() is not None:
            return float(hl.specialize(self))
        if self.static_value is not None and hl.active_tracer() is not None:
            return float(self.static_value())
        return self._needs_specialize()

    def __bool__(self) -> bool:
        return self._needs_specialize()

    def __repr__(self) -> str:
        return f"HostScalar({self.symbol.name})"


class BlockSize(int):
    """An int returned by `hl.register_block_size`, remembering its config slot."""

    block_id: int

    def __new__(cls, value: int, block_id: int) -> BlockSize:
        obj = super().__new__(cls, value)
        obj.block_id = block_id
        return obj


def static_int(value: Any) -> Any:
    """`value` as an int when it is built of ints and int kernel arguments (`h`, `n - h`,
    `k - 1`: the arguments made constants of the variant), else `value` itself (for the caller
    to refuse): a slice bound, an hl.static_range bound."""
    number = None
    if isinstance(value, HostScalar):
        number = value.constant_of_variant()
    elif isinstance(value, DeviceTensor) and not value.value.shape:
        number = constant_int(value.value, int_argument_value)
    return value if number is None else number


def int_argument_value(symbol: ScalarSymbol) -> int | None:
    """The value of an int kernel argument, made a constant of the variant (`tile.index - back`
    as an index), or None for another scalar (a float, a value host code computed)."""
    from .. import language as hl

    tracer = hl.active_tracer()
    if tracer is None or symbol.dtype != torch.int32:
        return None
    return HostScalar(tracer.recorder, symbol, int).constant_of_variant()


class TileProxy:
    """The loop variable of `hl.tile`: a run of indices of one dimension."""

    def __init__(self, tracer: Any, dim: TileDim):
        self._tracer = tracer
        self.dim = dim

    @property
    def begin(self) -> Any:
        return self._tracer.tile_attribute(self.dim, "begin")

    @property
    def end(self) -> Any:
        return self._tracer.tile_attribute(self.dim, "end")

    @property
    def block_size(self) -> int:
        return self.dim.block_size

    @property
    def index(self) -> Any:
        return self._tracer.tile_attribute(self.dim, "index")

    @property
    def id(self) -> Any:
        return self._tracer.tile_attribute(self.dim, "id")

    @property
    def count(self) -> Any:
        return self._tracer.tile_attribute(self.dim, "count")

    def __add__(self, other: Any) -> Any:
        """`tile + c`: the tile moved by c (an index that reads 0 outside the tensor). In a
        subscript it is an axis, as the tile is, never an index tensor paired with others
        (`x[tm.index + 1, tn + 1]` is a block, as in Helion); in arithmetic the positions
        tile.index + c."""
        return self._moved(self.index + self._offset(other, "+"))

    def __radd__(self, other: Any) -> Any:
        return self._moved(self.index + self._offset(other, "+"))

    def __sub__(self, other: Any) -> Any:
        return self._moved(self.index - self._offset(other, "-"))

    @staticmethod
    def _moved(positions: "DeviceTensor") -> "DeviceTensor":
        positions.tile_axis = True
        return positions

    def _offset(self, other: Any, symbol: str) -> int:
        if isinstance(other, HostScalar) and other.is_int_argument:  # `x[t + shift]`: a constant of
            return other._as_size()  # the variant, as a size is (reference mode reads the value)
        computed = (int_argument_value(other.symbol) if isinstance(other, HostScalar) and other.python_type is int
                    else constant_int(other.value, int_argument_value) if isinstance(other, DeviceTensor) else None)
        if computed is not None:  # `x[t + (c + 1)]`: of int arguments and ints
            return computed
        if isinstance(other, bool) or not isinstance(other, int):
            shown = (other.value.name if isinstance(other, DeviceTensor) and other.value.name else
                     "s" if isinstance(other, (DeviceTensor, torch.Tensor)) else repr(other))
            raise exc.UnsupportedSyntax(
                f"{self.dim.name} {symbol} {shown}: a tile shifts by a compile-time int; for other "
                f"arithmetic use {self.dim.name}.index (a vector of indices, `{shown} + {self.dim.name}.index` "
                f"in a subscript is the tile's window there) or {self.dim.name}.begin.")
        return other

    def __index__(self) -> int:
        raise exc.UnsupportedSyntax(
            f"Tile '{self.dim.name}' is a run of indices; use {self.dim.name}.begin or "
            f"{self.dim.name}.index for numbers."
        )

    def __repr__(self) -> str:
        return f"Tile({self.dim.name})"


__all__ = [
    "BlockSize", "DeviceTensor", "HostScalar", "HostTensor", "TileProxy",
]
