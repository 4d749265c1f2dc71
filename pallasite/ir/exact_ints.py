"""Torch's integer ops computed exactly, for the checks of values torch holds in int64.

Device integers are int32; where torch's result is int64, interpret mode recomputes the op
from its operands on the host, in Python integers (numpy object arrays: no width to wrap),
and checks that the number fits int32 (`plan/int64_values.py` decides where,
`runtime/checks.py:RangeChecks.fits_int32` runs it). `FILLS` gives the value a partial
tile's padding lanes of each operand take first, so they never decide the outcome: the
identity of a product, a divisor of 1, else 0.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np


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
}

# The padding fill of each operand position that is not 0 (op -> {position: fill})
FILLS: dict[str, dict[int, int]] = {
    "prod": {0: 1}, "cumprod": {0: 1}, "floor_divide": {1: 1}, "div": {1: 1}, "pow": {1: 0},
}


def exact(op: str, operands: list, attrs: dict) -> np.ndarray:
    """The op's result in Python integers, from operands given as arrays or numbers."""
    values = [np.asarray(item).astype(object) for item in operands]
    return np.asarray(EXACT[op](*values, **attrs), dtype=object)


__all__ = ["EXACT", "FILLS", "exact"]
