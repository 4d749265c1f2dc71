"""Map torch callables (functions, Tensor methods, dunders) to canonical op names."""
from __future__ import annotations

import operator
from typing import Any, Callable

import torch
import torch.nn.functional as F

from ..ir import ops

_ALIASES = {
    "true_divide": "div", "divide": "div", "multiply": "mul", "subtract": "sub",
    "negative": "neg", "absolute": "abs", "clip": "clamp", "greater": "gt",
    "greater_equal": "ge", "less": "lt", "less_equal": "le", "not_equal": "ne",
    "arcsin": "asin", "arccos": "acos", "arctan": "atan", "arctan2": "atan2",
    "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh", "fix": "trunc",
    "view": "reshape", "swapaxes": "transpose", "swapdims": "transpose",
    "contiguous": "identity", "clone": "identity", "detach": "identity",
    "special_expit": "sigmoid", "expit": "sigmoid", "exp2": "exp2",
}
# Tensor methods that are casts: method name -> dtype.
CAST_METHODS = {
    "float": torch.float32, "bfloat16": torch.bfloat16, "half": torch.float16,
    "int": torch.int32, "bool": torch.bool, "double": torch.float64, "long": torch.int64,
}
# Python operators on proxies: dunder -> (canonical name, reflected?).
DUNDERS = {
    "__add__": ("add", False), "__radd__": ("add", True),
    "__sub__": ("sub", False), "__rsub__": ("sub", True),
    "__mul__": ("mul", False), "__rmul__": ("mul", True),
    "__truediv__": ("div", False), "__rtruediv__": ("div", True),
    "__floordiv__": ("floor_divide", False), "__rfloordiv__": ("floor_divide", True),
    "__mod__": ("remainder", False), "__rmod__": ("remainder", True),
    "__pow__": ("pow", False), "__rpow__": ("pow", True),
    "__matmul__": ("matmul", False), "__rmatmul__": ("matmul", True),
    "__and__": ("bitwise_and", False), "__rand__": ("bitwise_and", True),
    "__or__": ("bitwise_or", False), "__ror__": ("bitwise_or", True),
    "__xor__": ("bitwise_xor", False), "__rxor__": ("bitwise_xor", True),
    "__lshift__": ("bitwise_left_shift", False), "__rshift__": ("bitwise_right_shift", False),
    "__lt__": ("lt", False), "__le__": ("le", False), "__gt__": ("gt", False),
    "__ge__": ("ge", False), "__eq__": ("eq", False), "__ne__": ("ne", False),
}
UNARY_DUNDERS = {"__neg__": "neg", "__pos__": "pos", "__abs__": "abs", "__invert__": "bitwise_not"}
# Meta (shape/dtype) functions for the dunders: plain Python operators.
DUNDER_META: dict[str, Callable[..., Any]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
    "floor_divide": operator.floordiv, "remainder": operator.mod, "pow": operator.pow,
    "matmul": operator.matmul, "bitwise_and": operator.and_, "bitwise_or": operator.or_,
    "bitwise_xor": operator.xor, "bitwise_left_shift": operator.lshift,
    "bitwise_right_shift": operator.rshift, "lt": operator.lt, "le": operator.le,
    "gt": operator.gt, "ge": operator.ge, "eq": operator.eq, "ne": operator.ne,
    "neg": operator.neg, "pos": operator.pos, "abs": operator.abs, "bitwise_not": operator.invert,
}

FACTORIES = frozenset({
    "empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like",
    "full_like", "new_empty", "new_zeros", "new_ones", "new_full", "empty_strided",
})


def _build() -> dict[Any, str]:
    table: dict[Any, str] = {}
    names = set(ops.ALL_OPS) | set(_ALIASES) | FACTORIES | set(CAST_METHODS) | {"type", "size", "dim"}
    for owner in (torch.special, F, torch.Tensor, torch):
        for name in names:
            fn = getattr(owner, name, None)
            if fn is not None and callable(fn):
                table[fn] = _ALIASES.get(name, name)
    return table


_TABLE = _build()


def canonical_name(func: Any) -> str | None:
    """The canonical op name of a torch callable, or None if pallasite does not know it."""
    try:
        return _TABLE.get(func)
    except TypeError:  # unhashable
        return None


def display_name(func: Any) -> str:
    """`torch.foo` / `Tensor.foo` for error messages."""
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    module = getattr(func, "__module__", "") or ""
    if qualname.startswith("TensorBase.") or qualname.startswith("Tensor."):
        return "Tensor." + qualname.split(".", 1)[1]
    if module.startswith("torch.nn.functional"):
        return f"torch.nn.functional.{qualname}"
    return f"torch.{qualname}"
