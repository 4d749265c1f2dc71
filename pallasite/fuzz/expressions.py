"""Random pointwise chains over mixed dtypes, with PyTorch's promotion tracked by hand.

Only forms whose two evaluations (XLA keeping f32 intermediates, eager torch
rounding each bf16 op) stay within a few ulps are generated: functions with
bounded derivatives, no float → int casts, and comparisons only between loaded
inputs (a computed value one ulp apart would flip a branch).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from .cases import DTYPE_NAMES, Line

FLOATS = (torch.float32, torch.bfloat16)
_RANK = {torch.bool: 0, torch.int32: 1, torch.bfloat16: 2, torch.float32: 3}


def promote(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    """Tensor-tensor promotion for the dtypes we generate (same category order as torch)."""
    return a if _RANK[a] >= _RANK[b] else b


@dataclass(frozen=True)
class Value:
    name: str
    dtype: torch.dtype
    leaf: bool = False  # a loaded input, exact in both modes


_FLOAT_UNARY = (
    "torch.sigmoid({a})", "torch.tanh({a})", "torch.relu({a})", "torch.abs({a})", "-{a}",
    "torch.exp(-torch.abs({a}))", "torch.rsqrt(torch.abs({a}) + 1.0)", "torch.log(torch.abs({a}) + 1.0)",
    "{a} * 0.5", "{a} + 1.5", "{a} * 3", "{a} / 0.3", "torch.logaddexp({a}, -{a})",
    "torch.xlogy(torch.abs({a}), torch.abs({a}) + 1.0)",
    # composites (ir/ops/pointwise_composites.py)
    "torch.nn.functional.softsign({a})", "torch.nn.functional.hardshrink({a}, 0.3)",
    "torch.nn.functional.threshold({a}, 0.1, -2.0)", "torch.fmax({a}, torch.abs({a}) - 1.0)",
    "torch.fmin({a} * 2, -{a})", "torch.nn.functional.selu({a})", "torch.nn.functional.celu({a}, 0.7)",
    "torch.logit(torch.sigmoid({a}) * 0.5 + 0.25)", "torch.deg2rad({a})", "torch.sinc({a} * 0.1)",
    "torch.erfinv(torch.tanh({a}) * 0.5)", "torch.nn.functional.softshrink({a}, 0.4)",
)
_INT_UNARY = ("torch.abs({a})", "-{a}", "{a} + 3", "{a} * 2", "{a} - 1", "{a} % 2654435761",
              "3 ** torch.remainder({a}, 80)")  # an integer power of a tensor exponent: every bit of it
_BINARY = ("{a} + {b}", "{a} - {b}", "{a} * {b}", "torch.maximum({a}, {b})", "torch.minimum({a}, {b})",
           # spellings whose keywords or argument order mean something: other - alpha * input
           "torch.rsub({a}, {b}, alpha=2)", "torch.sub({a}, other={b}, alpha=3)", "torch.maximum({a}, other={b})")
_INT_DIVISIONS = ("{a} // (torch.abs({b}) + 1)", "{a} % (torch.abs({b}) + 1)", "torch.fmod({a}, torch.abs({b}) + 1)",
                  "torch.div({a}, torch.abs({b}) + 1, rounding_mode='trunc')",
                  "torch.div({a}, 7, rounding_mode='trunc')", "torch.div({a}, -3, rounding_mode='floor')")
_INT_TO_FLOAT = ("{a} * 0.25", "{a}.to(torch.float32)", "{a}.to(torch.bfloat16)", "{a}.float()")
_FLOAT_CASTS = ("{a}.to(torch.float32)", "{a}.to(torch.bfloat16)")
# of a loaded input only: a computed value's rounding differs by a last bit between the modes
_LEAF_UNARY = ("torch.round({a}, decimals=1)", "torch.pow({a}, exponent=2)", "torch.frac({a})",
               "torch.div({a}, 0.3, rounding_mode='trunc')", "torch.round({a} / 0.7)")


class ChainBuilder:
    """Appends `vN = <op>` lines to a kernel body, reading earlier values."""

    def __init__(self, rng: random.Random, indent: int, leaves: list[Value], prefix: str = "v"):
        self.rng = rng
        self.indent = indent
        self.values = list(leaves)
        self.leaves = [v for v in leaves if v.leaf]
        self.lines: list[Line] = []
        self.prefix = prefix
        self._count = 0

    def _new(self, text: str, dtype: torch.dtype) -> Value:
        name = f"{self.prefix}{self._count}"
        self._count += 1
        self.lines.append(Line(self.indent, f"{name} = {text}", droppable=True))
        value = Value(name, dtype)
        self.values.append(value)
        return value

    def _augmented(self, a: Value, b: Value, symbol: str) -> Value:
        """`vN = a.clone()` then `vN op= b`: torch's in-place update keeps a's dtype (bf16 += f32
        is bf16). A copy: after `vN = a`, torch's `vN op= b` would change `a` too (refused)."""
        value = self._new(f"{a.name}.clone()", a.dtype)
        self.lines.append(Line(self.indent, f"{value.name} {symbol}= {b.name}", droppable=True))
        return value

    def _pick(self, recent_bias: bool = True) -> Value:
        if recent_bias and self.rng.random() < 0.6:
            return self.values[-1]
        return self.rng.choice(self.values)

    def step(self, float_only: bool = False) -> Value:
        """One random op; `float_only` keeps the result floating."""
        rng = self.rng
        a = self._pick()
        choice = rng.random()
        if choice < 0.35:
            if a.dtype in FLOATS:
                return self._new(rng.choice(_FLOAT_UNARY).format(a=a.name), a.dtype)
            if float_only or rng.random() < 0.5:
                text = rng.choice(_INT_TO_FLOAT).format(a=a.name)
                return self._new(text, torch.bfloat16 if "bfloat16" in text else torch.float32)
            return self._new(rng.choice(_INT_UNARY).format(a=a.name), torch.int32)
        if choice < 0.8:
            b = self._pick(recent_bias=False)
            dtype = promote(a.dtype, b.dtype)
            if rng.random() < 0.25 and (a.dtype == dtype or a.dtype in FLOATS and dtype in FLOATS):
                return self._augmented(a, b, rng.choice(("+", "-", "*")))
            if float_only and dtype not in FLOATS:
                return self._new(f"{a.name} * 0.5 + {b.name}", torch.float32)
            if a.dtype == b.dtype == torch.int32 and rng.random() < 0.2:
                # an integer power of a tensor exponent: every bit of it, negative ones too
                return self._new(f"torch.pow({a.name}, torch.remainder({b.name}, 80) - 4)", torch.int32)
            if a.dtype == b.dtype == torch.int32 and rng.random() < 0.2:
                # a divisor planning cannot prove nonzero (interpret mode checks it; never 0 here)
                return self._new(rng.choice(_INT_DIVISIONS).format(a=a.name, b=b.name), torch.int32)
            return self._new(rng.choice(_BINARY).format(a=a.name, b=b.name), dtype)
        if choice < 0.9 and len(self.leaves) >= 2:
            x, y = rng.sample(self.leaves, 2)
            b = self._pick(recent_bias=False)
            op = rng.choice((">", "<", ">=", "!="))
            dtype = promote(a.dtype, b.dtype)
            if float_only and dtype not in FLOATS:
                dtype = torch.float32
                return self._new(f"torch.where({x.name} {op} {y.name}, {a.name}, {b.name}).float()", dtype)
            if self.rng.random() < 0.3:  # Tensor.where(condition, other) is torch.where(condition, self, other)
                return self._new(f"{a.name}.where({x.name} {op} {y.name}, {b.name})", dtype)
            return self._new(f"torch.where({x.name} {op} {y.name}, {a.name}, {b.name})", dtype)
        if a.leaf and a.dtype in FLOATS and rng.random() < 0.5:
            return self._new(rng.choice(_LEAF_UNARY).format(a=a.name), a.dtype)
        if a.dtype in FLOATS:
            text = rng.choice(_FLOAT_CASTS).format(a=a.name)
            return self._new(text, torch.bfloat16 if "bfloat16" in text else torch.float32)
        text = rng.choice(_INT_TO_FLOAT).format(a=a.name)
        return self._new(text, torch.bfloat16 if "bfloat16" in text else torch.float32)

    def chain(self, steps: int, float_only: bool = False) -> Value:
        """`steps` ops; the result is the last value (floating if `float_only`)."""
        result = self.values[-1]
        for _ in range(steps):
            result = self.step(float_only)
        if float_only and result.dtype not in FLOATS:
            result = self._new(f"{result.name}.to(torch.float32)", torch.float32)
        return result


# the 8/16-bit and bool inputs each reducer may take (torch has no argmax of bool)
NARROW_EXTREMES = {"amax": (torch.int8, torch.uint8, torch.int16, torch.bool),
                   "amin": (torch.int8, torch.uint8, torch.int16, torch.bool),
                   "argmax": (torch.int8, torch.uint8, torch.int16), "sum": (), "mean": (), "norm": ()}


def fill_of(dtype: torch.dtype) -> str:
    """How an input of `dtype` is filled (`InputSpec.fill`)."""
    return {torch.int32: "randint", torch.int8: "randint", torch.int16: "randint", torch.uint8: "bytes",
            torch.bool: "bool"}.get(dtype, "randn")


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES[dtype]
