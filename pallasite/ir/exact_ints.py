"""Torch's integer ops computed exactly, for the checks of values torch holds in int64.

Device integers are int32; where torch's result is int64, interpret mode recomputes the op
from its operands on the host, in Python integers (numpy object arrays: no width to wrap),
and checks that the number fits int32 (`plan/int64_values.py` decides where,
`runtime/checks.py:RangeChecks.fits_int32` runs it). `FILLS` gives the value a partial
tile's padding lanes of each operand take first, so they never decide the outcome: the
identity of a product, a divisor of 1, else 0.

Torch's number is needed only where a use needs it: `+`, `-`, `*`, sums, products, bitwise
ops, selections and views give, on operands wrapped to 32 bits, torch's result wrapped to 32
bits (`passes_wrapped`), so a value only such ops take on to a cast to int32 or an int32
store (a hash, a checksum) is torch's answer even where torch's int64 number left int32.
Comparisons, divisions, float casts, indices and int64 stores need the number itself.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .ops import OPS, OpKind


def _reduce(function: Callable) -> Callable:
    def run(x, dim=None, keepdim=False):
        axes = tuple(range(x.ndim)) if dim is None else tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
        result = x
        for axis in sorted((a % max(x.ndim, 1) for a in axes), reverse=True):
            result = function(result, axis=axis, keepdims=keepdim)
        return result
    return run


def _scan(function: Callable) -> Callable:
    def run(x, dim, reverse=False):
        if reverse:
            return np.flip(function(np.flip(x, dim), axis=dim), dim)
        return function(x, axis=dim)
    return run


def _floor_divide(a, b):
    return np.frompyfunc(lambda p, q: p // q if q else 0, 2, 1)(a, b)


def _truncated(a, b):
    return np.frompyfunc(lambda p, q: (abs(p) // abs(q)) * (1 if (p >= 0) == (q >= 0) else -1) if q else 0,
                         2, 1)(a, b)


def _power(a, b):
    return np.frompyfunc(lambda p, q: p ** q if q >= 0 else 0, 2, 1)(a, b)


def _shift(a, b):
    return np.frompyfunc(lambda p, q: p << q if 0 <= q < 64 else 0, 2, 1)(a, b)


def _truncated_float(value) -> int:
    """torch's int64 of a float: truncated toward zero; NaN and infinities are int64's minimum
    (what torch's CPU cast gives), far past int32."""
    number = float(value)
    return int(number) if math.isfinite(number) else -2**63


EXACT: dict[str, Callable[..., Any]] = {
    "add": lambda a, b, alpha=1: a + alpha * b,
    "sub": lambda a, b, alpha=1: a - alpha * b,
    "rsub": lambda a, b, alpha=1: b - alpha * a,
    "mul": lambda a, b: a * b,
    "neg": lambda a: -a,
    "abs": lambda a: np.frompyfunc(abs, 1, 1)(a),
    "pow": _power,
    "square": lambda a: a * a,
    "bitwise_left_shift": _shift,
    "floor_divide": _floor_divide,
    "div": lambda a, b, rounding_mode="floor": (_floor_divide if rounding_mode == "floor" else _truncated)(a, b),
    "addcmul": lambda a, b, c, value=1: a + value * b * c,
    "sum": _reduce(np.sum),
    "prod": _reduce(np.prod),
    "cumsum": _scan(np.cumsum),
    "cumprod": _scan(np.cumprod),
    "to": lambda a: np.frompyfunc(_truncated_float, 1, 1)(a),  # a float cast to int64 (`.long()`)
}

# The padding fill of each operand position that is not 0 (op -> {position: fill})
FILLS: dict[str, dict[int, int]] = {
    "prod": {0: 1}, "cumprod": {0: 1}, "floor_divide": {1: 1}, "div": {1: 1}, "pow": {1: 0},
}


# Ops whose integer result, modulo 2**32, depends on these operands (by position; None: all)
# only modulo 2**32 (a shift's amount, a power's exponent, a gather's index do not)
_WRAPPING_OPERANDS: dict[str, tuple[int, ...] | None] = {
    "add": None, "sub": None, "rsub": None, "mul": None, "neg": None, "pos": None, "square": None,
    "addcmul": None, "sum": None, "prod": None, "cumsum": None, "cumprod": None, "bitwise_and": None,
    "bitwise_or": None, "bitwise_xor": None, "bitwise_not": None, "where": (1, 2), "to": (0,), "clone": None,
    "cat": None, "stack": None, "masked_fill": (0, 2), "pow": (0,), "bitwise_left_shift": (0,), "gather": (0,),
    # integer identities
    "round": (0,), "trunc": (0,), "floor": (0,), "ceil": (0,), "nan_to_num": (0,),
}


def passes_wrapped(op: str, position: int, result: torch.dtype) -> bool:
    """Whether the op's result, wrapped to 32 bits, is torch's whatever operand `position`
    held past int32 (given that operand wrapped to 32 bits): an integer result of a ring
    operation (`+`, `-`, `*`, sums, products, bitwise ops), a selection, a view or a copy."""
    if result.is_floating_point or result.is_complex or result == torch.bool:
        return False
    definition = OPS.get(op)
    if definition is not None and definition.kind in (OpKind.VIEW, OpKind.STRUCTURAL) and position == 0:
        return True
    if op not in _WRAPPING_OPERANDS:
        return False
    positions = _WRAPPING_OPERANDS[op]
    return positions is None or position in positions


def drops_wrap(op: str, operands: Sequence[Any]) -> bool:
    """Whether the op's result is torch's number from its operands' low 32 bits alone: a mask
    by a non-negative literal (`h & 1023`), a remainder by a literal power of two (`h % 1024`)."""
    if len(operands) != 2:
        return False
    if op == "bitwise_and":  # either side
        return any(type(item) is int and 0 <= item <= _INT32_MAX for item in operands)
    literal = operands[1]
    return op == "remainder" and type(literal) is int and 0 < literal <= _INT32_MAX and literal & (literal - 1) == 0


_INT32_MAX = 2**31 - 1


def wrapped_to(number: int, dtype: torch.dtype) -> int:
    """The integer dtype's value of a Python int, as torch converts a number beside a tensor of
    it: modulo 2 ** bits (-3 beside uint8 is 253, 2654435761 beside int32 is -1640531535)."""
    bits = 8 * dtype.itemsize
    if dtype == torch.uint8:
        return number % (1 << bits)
    return (number + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))


def past_int32(what: str, lo: Any, hi: Any, use: str) -> str:
    """The error of a value torch holds in int64 whose number `use` needs and that left int32."""
    return (f"{what}: torch computes it in int64, and its values span [{lo}, {hi}], past int32, which device "
            f"integers are (TPU has no 64-bit vectors), and {use} needs the number; compute in float32 "
            "(`x.float()`), or cast its integer operands to int32 (`.sum(dim, dtype=torch.int32)`, "
            "`s.to(torch.int32) * k`: torch then wraps as the kernel does)")


# What a float cast's number is needed by: its values saturate at int32's ends, never wrap
SATURATED_USE = "every use (a float cast to an integer saturates at int32's ends where torch's int64 does not)"
_USE_KINDS = {"eq": "a comparison", "ne": "a comparison", "lt": "a comparison", "le": "a comparison",
              "gt": "a comparison", "ge": "a comparison", "div": "a division", "floor_divide": "a division",
              "remainder": "a division", "fmod": "a division", "true_divide": "a division",
              "bitwise_right_shift": "a right shift", "maximum": "a maximum", "minimum": "a minimum",
              "amax": "a maximum", "amin": "a minimum", "clamp": "a clamp", "abs": "abs"}


def needing_use(op: str, result: torch.dtype | None, location: Any) -> str:
    """`use` of `past_int32`: the kind of use (`a comparison`, `a float cast`, `a store into an
    int64 tensor`, ...) and its line."""
    if op in _USE_KINDS:
        kind = _USE_KINDS[op]
    elif op == "to" and result is not None:
        kind = f"a cast to {str(result).removeprefix('torch.')}"
    elif op == "store" and result is not None:
        kind = f"a store into a tensor of {str(result).removeprefix('torch.')}"
    else:
        kind = {"index": "an index", "bound": "a loop bound", "condition": "a device if's condition"}.get(op, op)
    where = f" at line {location.lineno} (`{location.text.strip()}`)" if location is not None else ""
    return kind + where


def exact(op: str, operands: list, attrs: dict) -> np.ndarray:
    """The op's result in Python integers, from operands given as arrays or numbers."""
    values = [np.asarray(item).astype(object) for item in operands]
    return np.asarray(EXACT[op](*values, **attrs), dtype=object)


__all__ = ["EXACT", "FILLS", "SATURATED_USE", "drops_wrap", "exact", "needing_use", "passes_wrapped", "past_int32"]
