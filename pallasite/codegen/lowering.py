"""One lowering rule per op: canonical op name -> JAX expression text.

Rules are shared by device code (inside the Pallas kernel) and host code
(the jitted wrapper). A rule sees an `OpCall`: the operands (`Arg`: text,
shape and dtype, the operand itself), the op's attrs, and the result type; it
returns one expression. `RULES` is keyed by the registry's canonical names
(`ir/ops`): every op that is not structural has exactly one rule, here (pointwise,
reductions, views) or in codegen/matmul_rules.py (gathers along a dim, contractions,
creation), which this module loads; the machinery (`OpCall`, `rule`, `lower`) is
codegen/op_calls.py, re-exported here.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import torch

from ..ir.exact_ints import wrapped_to
from ..ir.ops import OPS, Accumulator, Partials
from ..plan.tpu_tiling import aligned_concatenation
from .op_calls import (  # noqa: F401  (re-exported: codegen imports the machinery from here)
    IMPORTS, JNP_DTYPES, RULES, Arg, OpCall, Rule, jnp_dtype, literal, lower, rule, runtime_imports,
)
from .runtime_imports import ELEMENTWISE, INTEGER_ARG_EXTREME, PROD_BY_HALVES, RELAYOUT

_LOW_PRECISION = (torch.bfloat16, torch.float16)
_NARROW_INTS = (torch.int8, torch.int16, torch.uint8)
# Mosaic reduces 32-bit values only: a max/min (and its position) of these is taken in int32
NARROW_EXTREMES = (*_NARROW_INTS, torch.bool)

# -------------------------------------------------------------- pointwise --

_UNARY_TEMPLATES = {
    "neg": "-{0}", "pos": "{0}", "abs": "jnp.abs({0})", "exp": "jnp.exp({0})",
    "log": "jnp.log({0})",
    "log2": "jnp.log2({0})", "log10": "jnp.log10({0})", "log1p": "jnp.log1p({0})",
    "sqrt": "jnp.sqrt({0})", "rsqrt": "lax.rsqrt({0})", "sin": "jnp.sin({0})",
    "cos": "jnp.cos({0})", "tan": "jnp.tan({0})", "tanh": "jnp.tanh({0})",
    "sigmoid": "jax.nn.sigmoid({0})", "relu": "jnp.maximum({0}, 0)",
    "silu": "({0} * jax.nn.sigmoid({0}))", "erf": "lax.erf({0})",
    "floor": "jnp.floor({0})", "ceil": "jnp.ceil({0})", "trunc": "jnp.trunc({0})",
    "reciprocal": "(1 / {0})", "square": "({0} * {0})",
    "isnan": "jnp.isnan({0})", "isinf": "jnp.isinf({0})", "isfinite": "jnp.isfinite({0})",
    "relu6": "jnp.clip({0}, 0, 6)", "mish": "({0} * jnp.tanh(jax.nn.softplus({0})))",
    "logsigmoid": "jax.nn.log_sigmoid({0})", "signbit": "jnp.signbit({0})",
    "logical_not": "jnp.logical_not({0})",
}
# Functions Mosaic has no primitive for, written with those it has (pallasite/runtime/
# elementwise.py, imported by a module that uses them as `elementwise`).
_ELEMENTWISE_TEMPLATES = {
    name: f"elementwise.{name}({{0}})"
    for name in ("expm1", "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "erfc", "exp2", "erfinv")
}
# torch's own formulas, dividing by 6 as torch does (IEEE's quotient: `elementwise.true_divide`);
# x * clip / 6 overflows to inf past 5.7e37, as torch's does
_ELEMENTWISE_TEMPLATES.update({
    "hardsigmoid": "elementwise.true_divide(jnp.clip({0} + 3, 0, 6), 6.0, INTERPRET)",
    "hardswish": "elementwise.true_divide({0} * jnp.clip({0} + 3, 0, 6), 6.0, INTERPRET)",
})


def _unary(call: OpCall) -> str:
    dtype = call.compute_dtype() if OPS[call.op].elementwise.predicate else call.out_dtype
    if call.op in ("isfinite", "isinf") and dtype in _LOW_PRECISION:  # Mosaic's take float32 only (exact)
        dtype = torch.float32
    template = _UNARY_TEMPLATES.get(call.op) or _ELEMENTWISE_TEMPLATES[call.op]
    if call.op == "abs" and not (dtype.is_floating_point or dtype == torch.bool):
        # torch's abs of the lowest integer is itself (it wraps); XLA's simplifier takes jnp.abs
        # as never negative (`abs(x) < 0` folded to False, `abs(x) // 2` wrong for -128)
        template = "jnp.where({0} < 0, -{0}, {0})"
    return template.format(call.cast(0, dtype))


rule(*_UNARY_TEMPLATES)(_unary)
rule(*_ELEMENTWISE_TEMPLATES, imports=ELEMENTWISE)(_unary)


@rule("bitwise_not")
def _bitwise_not(call: OpCall) -> str:
    if call.out_dtype == torch.bool:
        return f"jnp.logical_not({call.args[0].text})"
    return f"(~{call.cast(0, call.out_dtype)})"


@rule("sign")
def _sign(call: OpCall) -> str:
    # torch.sign(nan) is 0 where jnp.sign(nan) is nan; comparisons give torch's answer.
    x, dtype = call.cast(0, call.out_dtype), jnp_dtype(call.out_dtype)
    if call.out_dtype == torch.bool:
        return x
    return f"(({x} > 0).astype({dtype}) - ({x} < 0).astype({dtype}))"


@rule("round", imports=ELEMENTWISE, when=lambda node: node.kwargs.get("decimals", 0) != 0)
def _round(call: OpCall) -> str:
    decimals = call.attrs.get("decimals", 0)
    if decimals == 0:
        return f"jnp.round({call.cast(0, call.out_dtype)})"
    # torch's steps in float32 (16-bit values too: scaling in bfloat16 lands a step off):
    # x * 10**d rounded, then divided by 10**d (IEEE's quotient); for d < 0 divided, then multiplied
    x, scale = call.cast(0, torch.float32), literal(float(torch.tensor(10.0 ** abs(decimals), dtype=torch.float32)))
    if decimals > 0:
        return _rounded(_true_divide(f"jnp.round({x} * {scale})", scale), call.out_dtype)
    return _rounded(f"(jnp.round({_true_divide(x, scale)}) * {scale})", call.out_dtype)


@rule("gelu", imports=ELEMENTWISE)
def _gelu(call: OpCall) -> str:
    if call.attrs.get("approximate", "none") == "tanh":  # (a 16-bit result: in float32, by `lower`)
        return f"jax.nn.gelu({call.cast(0, call.out_dtype)}, approximate=True)"
    # x * Phi(x) in float32, rounded once as torch does; Phi through erfc (accurate in the
    # lower tail; Mosaic has no erfc primitive)
    x = call.cast(0, torch.float32)
    return _rounded(f"({x} * 0.5 * elementwise.erfc({x} * -0.7071067811865476))", call.out_dtype)


def _rounded(text: str, dtype: torch.dtype) -> str:
    """A float32 expression's value in `dtype`."""
    return text if dtype == torch.float32 else f"{text}.astype({jnp_dtype(dtype)})"


@rule("leaky_relu")
def _leaky_relu(call: OpCall) -> str:
    # in float32 with the slope as given, rounded once (torch's 16-bit kernel; the slope rounded
    # to 16 bits first was an ulp off in ~20% of lanes)
    x = call.cast(0, torch.float32)
    return _rounded(f"jnp.where({x} >= 0, {x}, {x} * {literal(call.attrs['negative_slope'])})", call.out_dtype)


@rule("elu", imports=ELEMENTWISE)
def _elu(call: OpCall) -> str:
    x = call.cast(0, torch.float32)  # in float32, rounded once as torch does
    return _rounded(f"jnp.where({x} > 0, {x}, {literal(call.attrs['alpha'])} * elementwise.expm1({x}))",
                    call.out_dtype)


def _scalar_of(value, dtype: torch.dtype):
    """A Python number argument (alpha, value, min_val) as torch takes it for `dtype`: an
    integer or bool result casts it (truncating), so the arithmetic keeps that dtype."""
    if dtype == torch.bool:
        return bool(value)
    return value if dtype.is_floating_point else int(value)


@rule("hardtanh")
def _hardtanh(call: OpCall) -> str:
    low, high = (_scalar_of(call.attrs[key], call.out_dtype) for key in ("min_val", "max_val"))
    return f"jnp.clip({call.cast(0, call.out_dtype)}, {literal(low)}, {literal(high)})"


@rule("softplus")
def _softplus(call: OpCall) -> str:
    x = call.cast(0, call.out_dtype)
    beta, threshold = call.attrs["beta"], call.attrs["threshold"]
    scaled = x if beta == 1 else f"({x} * {literal(beta)})"
    soft = f"jax.nn.softplus({scaled})" if beta == 1 else f"(jax.nn.softplus({scaled}) / {literal(beta)})"
    return f"jnp.where({scaled} > {literal(threshold)}, {x}, {soft})"


@rule("nan_to_num")
def _nan_to_num(call: OpCall) -> str:
    """The replacements converted to the result's dtype as torch converts them (float16's 1e5 is
    inf; jnp.nan_to_num would clip it to 65504)."""
    dtype = call.out_dtype

    def number(value):
        return literal(float(torch.tensor(float(value), dtype=torch.float32).to(dtype)))

    a = call.attrs
    if not dtype.is_floating_point:
        return call.args[0].text  # integers and bools hold no NaN or infinity
    x, finite = call.args[0].text, torch.finfo(dtype)
    posinf = number(finite.max if a["posinf"] is None else a["posinf"])
    neginf = number(finite.min if a["neginf"] is None else a["neginf"])
    # each replacement read off the input (a NaN made inf stays inf, as in torch)
    return (f"jnp.where(jnp.isnan({x}), {number(a['nan'])}, jnp.where({x} == jnp.inf, {posinf}, "
            f"jnp.where({x} == -jnp.inf, {neginf}, {x}))).astype({jnp_dtype(dtype)})")


_BINARY_OPERATORS = {
    "add": "+", "sub": "-", "mul": "*", "div": "/", "floor_divide": "//",
}
_BINARY_FUNCTIONS = {
    "remainder": "jnp.remainder", "fmod": "jnp.fmod", "pow": "jnp.power",
    "maximum": "jnp.maximum", "minimum": "jnp.minimum", "atan2": "jnp.arctan2",
    "bitwise_left_shift": "jnp.left_shift", "bitwise_right_shift": "jnp.right_shift",
    "copysign": "jnp.copysign", "hypot": "jnp.hypot",
    "logical_and": "jnp.logical_and", "logical_or": "jnp.logical_or",
    "logical_xor": "jnp.logical_xor",
}


def _wide_scalar(call: OpCall, dtype: torch.dtype) -> bool:
    """Whether a 16-bit float product `x * c` or quotient `x / c` has a Python number c with no
    exact value in that dtype (`x * 0.1` of bfloat16 x): torch's CPU kernels for these two take
    the number in float32 and round the result once, where JAX would round the number to 16 bits
    first (torch's add and sub do round it first, as JAX does)."""
    if dtype not in (torch.bfloat16, torch.float16) or call.attrs.get("rounding_mode") is not None:
        return False
    scalars = call.args if call.op == "mul" else call.args[1:]
    if any(_number_like(arg) and not arg.is_constant for arg in scalars):
        return True  # a float32 scalar (a float argument)
    numbers = [arg.raw for arg in scalars if arg.is_constant]
    return any(isinstance(number, (int, float)) and not isinstance(number, bool) and math.isfinite(number)
               and float(torch.tensor(number, dtype=dtype)) != number for number in numbers)


def _sixteen_bit(dtype: torch.dtype) -> bool:
    return dtype in (torch.bfloat16, torch.float16)


def _number_like(arg: Arg) -> bool:
    """A Python number, or a 32-bit scalar (a float or int argument): torch takes either as a
    number beside a 16-bit value (in float32 where its kernel does)."""
    return arg.is_constant or (arg.shape == () and arg.dtype in (torch.float32, torch.int32))


def _elementwise_binary(node) -> bool:
    """A binary op whose lowering calls `elementwise`: an integer power of a tensor exponent, a
    float division not rounded down (`elementwise.true_divide`), or a floor division of 16-bit
    floats by a tensor."""
    if node.op != "pow":
        outputs = getattr(node, "outputs", None)  # the rule's dtype: the result's (a HostOp's `result`)
        dtype = outputs[0].dtype if outputs else getattr(getattr(node, "result", None), "dtype", None)
        if dtype is None:
            dtype = functools.reduce(torch.promote_types, [arg.dtype for arg in node.args[:2] if hasattr(arg, "dtype")])
        if node.op == "div" and getattr(node, "kwargs", {}).get("rounding_mode") != "floor":
            return dtype.is_floating_point
        return _sixteen_bit(dtype) and (
            node.op == "floor_divide" or getattr(node, "kwargs", {}).get("rounding_mode") == "floor") and (
            hasattr(node.args[1], "dtype")) and not (  # by a number or 32-bit scalar: jnp.floor_divide
            tuple(getattr(node.args[1], "shape", (1,))) == () and node.args[1].dtype in (torch.float32, torch.int32))
    return _tensor_int_power(node)


def _tensor_int_power(node) -> bool:
    """An integer power whose exponent is a value (not a number): `elementwise.int_power`."""
    base, exponent = node.args[:2]
    if isinstance(exponent, (bool, int, float)) or isinstance(base, float):
        return False
    outputs = getattr(node, "outputs", None)  # the rule's dtype: the result's (`7 ** b` of bool b is int)
    dtype = outputs[0].dtype if outputs else (
        exponent.dtype if isinstance(base, int) else torch.promote_types(base.dtype, exponent.dtype))
    return not dtype.is_floating_point and dtype != torch.bool


@rule(*(op for op in _BINARY_OPERATORS if op not in ("div", "floor_divide")),
      *(op for op in _BINARY_FUNCTIONS if op != "pow"), "rsub")
def _binary(call: OpCall) -> str:
    op = call.op
    dtype = call.compute_dtype() if OPS[op].elementwise.predicate else call.out_dtype
    if op in ("mul", "div") and _wide_scalar(call, dtype):
        wide = OpCall(op, call.args, call.attrs, call.out_shape, torch.float32)
        return _rounded(_binary(wide), dtype)
    a, b = call.cast(0, dtype), call.cast(1, dtype)
    if op == "pow" and dtype.is_floating_point:  # torch rounds a number beside a 16-bit x to its dtype
        a, b = call.sixteen_bit_scalar(0, dtype), call.sixteen_bit_scalar(1, dtype)
    alpha = _scalar_of(call.attrs.get("alpha", 1), dtype)
    if op == "rsub":  # other - alpha * input
        return f"({b} - {literal(alpha)} * {a})" if alpha != 1 else f"({b} - {a})"
    if alpha != 1:
        b = f"({literal(alpha)} * {b})"
    if op == "pow" and call.args[1].is_constant and call.args[1].raw in (0.5, -0.5) and dtype.is_floating_point and (
            call.args[0].dtype != torch.float16):
        # torch takes x ** 0.5 as sqrt (and ** -0.5 as rsqrt): NaN at -inf, where pow gives inf;
        # float16's kernel is pow itself (inf at -inf, +0 at -0)
        return f"jnp.sqrt({a})" if call.args[1].raw == 0.5 else f"lax.rsqrt({a})"
    if op == "pow" and dtype == torch.bool:  # Mosaic has no bool power; torch's x ** e is x or not e
        return f"jnp.logical_or({a}, jnp.logical_not({b}))"
    if op == "pow" and not dtype.is_floating_point and dtype != torch.bool and not call.args[1].is_constant:
        return f"elementwise.int_power({a}, {b}, {jnp_dtype(dtype)})"
    if (op == "floor_divide" or call.attrs.get("rounding_mode") == "floor") and _sixteen_bit(dtype):
        if _number_like(call.args[1]):
            # torch's floor division by a number (or float scalar): in float32, rounded once
            return _rounded(f"jnp.floor_divide({call.cast(0, torch.float32)}, {call.cast(1, torch.float32)})", dtype)
        return f"elementwise.floor_divide({a}, {b})"
    if op == "div" and _number_like(call.args[0]) and _sixteen_bit(call.args[1].dtype) and (
            call.attrs.get("rounding_mode") is None):
        # `c / x` is torch's x.reciprocal() * c: the reciprocal rounded to 16 bits, the product in
        # float32, rounded once (div computes in float32: `lower` rounds the result)
        return f"((1 / {call.args[1].text}).astype(jnp.float32) * {a})"
    if op == "div" and call.attrs.get("rounding_mode") == "floor":
        return f"jnp.floor_divide({a}, {b})"
    if op == "div" and call.attrs.get("rounding_mode") == "trunc" and _sixteen_bit(dtype) and _number_like(
            call.args[1]):
        # by a number, torch truncates the float32 quotient (a tensor divisor: the 16-bit one)
        return _rounded(f"jnp.trunc({_true_divide(call.cast(0, torch.float32), call.cast(1, torch.float32))})", dtype)
    if op == "div" and call.attrs.get("rounding_mode") == "trunc":
        if dtype.is_floating_point:
            return f"jnp.trunc({_true_divide(a, b)})"
        return f"lax.div({a}, {_typed(call, 1, dtype)})"
    if op == "div" and dtype.is_floating_point and _number_like(call.args[0]) and not _number_like(call.args[1]):
        return f"((1 / {b}) * {a})"  # `c / x` is torch's x.reciprocal() * c
    if op == "div" and dtype.is_floating_point:
        return _true_divide(a, b)
    if op in _BINARY_OPERATORS:
        return f"({a} {_BINARY_OPERATORS[op]} {b})"
    if op in ("maximum", "minimum") and dtype == torch.bool:  # Mosaic has no bool max/min
        return f"jnp.logical_{'or' if op == 'maximum' else 'and'}({a}, {b})"
    return f"{_BINARY_FUNCTIONS[op]}({a}, {b})"


rule("pow", "div", "floor_divide", imports=ELEMENTWISE, when=_elementwise_binary)(_binary)


def _typed(call: OpCall, i: int, dtype: torch.dtype) -> str:
    """Operand i in `dtype`, a number too (lax's ops take no weakly typed Python int beside an
    int8 value); a negative number beside uint8 wraps, as torch converts it (-7 is 249)."""
    arg = call.args[i]
    if arg.is_constant and type(arg.raw) in (int, bool):
        return f"{jnp_dtype(dtype)}({wrapped_to(int(arg.raw), dtype)})"
    return call.cast(i, dtype)


def _true_divide(a: str, b: str) -> str:
    """IEEE's float quotient also where interpret mode's XLA would multiply by a reciprocal."""
    return f"elementwise.true_divide({a}, {b}, INTERPRET)"


@rule("bitwise_and", "bitwise_or", "bitwise_xor")
def _bitwise(call: OpCall) -> str:
    symbol = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}[call.op]
    dtype = call.out_dtype
    return f"({call.cast(0, dtype)} {symbol} {call.cast(1, dtype)})"


_COMPARISON_OPERATORS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


@rule(*_COMPARISON_OPERATORS)
def _compare(call: OpCall) -> str:
    symbol = _COMPARISON_OPERATORS[call.op]
    dtype = call.compute_dtype()
    return f"({call.cast(0, dtype)} {symbol} {call.cast(1, dtype)})"


@rule("where")
def _where(call: OpCall) -> str:
    cond = call.cast(0, torch.bool)
    return f"jnp.where({cond}, {call.cast(1, call.out_dtype)}, {call.cast(2, call.out_dtype)})"


@rule("clamp")
def _clamp(call: OpCall) -> str:
    x = call.cast(0, call.out_dtype)
    low = "None" if call.args[1].raw is None else call.cast(1, call.out_dtype)
    high = "None" if call.args[2].raw is None else call.cast(2, call.out_dtype)
    if call.out_dtype == torch.bool:  # Mosaic has no bool max/min: or with the low, and with the high
        low_text = x if low == "None" else f"jnp.logical_or({x}, {low})"
        return low_text if high == "None" else f"jnp.logical_and({low_text}, {high})"
    return f"jnp.clip({x}, {low}, {high})"


@rule("frac")
def _frac(call: OpCall) -> str:
    x = call.cast(0, call.out_dtype)
    return f"({x} - jnp.trunc({x}))"


@rule("logaddexp")
def _logaddexp(call: OpCall) -> str:
    a, b = call.all_cast(call.out_dtype)
    # torch's form: the larger plus log1p of the smaller's share; equal infinities are themselves
    return (f"jnp.where(jnp.isinf({a}) & ({a} == {b}), {a}, "
            f"jnp.maximum({a}, {b}) + jnp.log1p(jnp.exp(-jnp.abs({a} - {b}))))")


@rule("xlogy")
def _xlogy(call: OpCall) -> str:
    """x * log(y), each step rounded to a 16-bit result's dtype as torch's kernel rounds it (the
    log, then the product; a number rounded to it first), computed in float32."""
    dtype = call.out_dtype
    if not _sixteen_bit(dtype):
        x, y = call.all_cast(dtype)
        return f"jnp.where(jnp.isnan({y}), jnp.nan, jnp.where({x} == 0, 0.0, {x} * jnp.log({y})))"
    x, y = (call.sixteen_bit_scalar(i, torch.float32) if call.args[i].is_constant or not call.args[i].shape
            else f"{call.cast(i, dtype)}.astype(jnp.float32)" for i in (0, 1))
    log = f"jnp.log({y}).astype({jnp_dtype(dtype)}).astype(jnp.float32)"
    return _rounded(f"jnp.where(jnp.isnan({y}), jnp.nan, jnp.where({x} == 0, 0.0, {x} * {log}))", dtype)


@rule("lerp")
def _lerp(call: OpCall) -> str:
    a, b, w = call.all_cast(call.out_dtype)
    # torch's two-sided form: exact at weight 0 and 1, and inf-safe on either side.
    return f"jnp.where(jnp.abs({w}) < 0.5, {a} + {w} * ({b} - {a}), {b} - ({b} - {a}) * (1 - {w}))"


@rule("addcmul", "addcdiv")
def _addc(call: OpCall) -> str:
    a, t1, t2 = call.all_cast(call.out_dtype)
    op = "*" if call.op == "addcmul" else "/"
    # torch's order: (value * t1) op t2, then the add
    return f"({a} + {literal(_scalar_of(call.attrs['value'], call.out_dtype))} * {t1} {op} {t2})"


@rule("to")
def _to(call: OpCall) -> str:
    return call.cast(0, call.out_dtype)


# ------------------------------------------------------------- reductions --

_REDUCE_FUNCTIONS = {
    "sum": "jnp.sum", "mean": "jnp.mean", "amax": "jnp.max", "amin": "jnp.min",
    "all": "jnp.all", "any": "jnp.any", "logsumexp": "jax.nn.logsumexp",
}
_PROD_FUNCTIONS = {"prod": "prod_by_halves"}  # Mosaic has no product reduction
_PICK_FUNCTIONS = {"argmax": "jnp.argmax", "argmin": "jnp.argmin"}  # an integer source: integer_arg_extreme
_REDUCTION_FUNCTIONS = {**_REDUCE_FUNCTIONS, **_PROD_FUNCTIONS, **_PICK_FUNCTIONS}


def _integer_source(node) -> bool:
    return not node.args[0].dtype.is_floating_point


def _axis_text(dims) -> str:
    if dims is None:
        return "None"
    return str(dims[0]) if len(dims) == 1 else literal(tuple(dims))


@rule(*_REDUCE_FUNCTIONS)
@rule(*_PROD_FUNCTIONS, imports=PROD_BY_HALVES)
@rule(*_PICK_FUNCTIONS, imports=INTEGER_ARG_EXTREME, when=_integer_source)
def _reduce(call: OpCall) -> str:
    reduction, function = OPS[call.op].reduction, _REDUCTION_FUNCTIONS[call.op]
    dims, keepdim = call.attrs["dim"], call.attrs["keepdim"]
    source_dtype = call.args[0].dtype
    x = call.args[0].text
    # Mosaic reduces every axis of a vector through a scalar, and has no 16-bit scalars: a
    # 16-bit float reduced over all its axes is compared in float32 too (exact for amax/amin)
    every_axis = dims is None or len(dims) == len(call.args[0].shape)
    widened = source_dtype in _LOW_PRECISION and (reduction.accumulator.widens_half_floats or every_axis)
    if widened:
        x = f"{x}.astype(jnp.float32)"  # accumulate in f32 as torch does
    elif reduction.accumulator is Accumulator.RESULT and call.out_dtype != source_dtype:
        x = call.cast(0, call.out_dtype)
    elif source_dtype in _NARROW_INTS or source_dtype == torch.bool and _picks_extreme(reduction):
        x = call.cast(0, torch.int32)  # Mosaic reduces 32-bit values only
    elif reduction.flat_index and source_dtype in _LOW_PRECISION:  # Mosaic's take float32 only (exact)
        x = call.cast(0, torch.float32)
    if reduction.flat_index and not source_dtype.is_floating_point:
        # Mosaic's argmax/argmin take float32 only (pallasite/runtime/reductions.py)
        axis = "None" if dims is None else str(dims[0])
        flat = f"integer_arg_extreme({x}, {axis}, {keepdim}, largest={reduction.partials is Partials.ARGMAX})"
        if dims is None and "extents" in call.attrs:
            return _valid_flat_index(flat, call.args[0].shape, call.attrs["extents"])
        return flat
    if reduction.flat_index:
        axis = "None" if dims is None else str(dims[0])
        if dims is None:
            flat = f"{function}({x}.reshape(-1)).astype(jnp.int32)"
            if "extents" in call.attrs:  # a partial tile: torch flattens only its valid elements
                return _valid_flat_index(flat, call.args[0].shape, call.attrs["extents"])
            return flat
        return f"{function}({x}, axis={axis}, keepdims={keepdim}).astype(jnp.int32)"
    if reduction.averages and "count" in call.attrs:
        text = f"(jnp.sum({x}, axis={_axis_text(dims)}, keepdims={keepdim}) / {call.attrs['count']})"
    else:
        text = f"{function}({x}, axis={_axis_text(dims)}, keepdims={keepdim})"
    if source_dtype in NARROW_EXTREMES and call.out_dtype == source_dtype:  # amax/amin: back to its dtype
        return f"{text}.astype({jnp_dtype(source_dtype)})"
    if widened:
        return f"{text}.astype({jnp_dtype(call.out_dtype)})"
    return text


def _picks_extreme(reduction) -> bool:
    """amax/amin/argmax/argmin: the result is (the position of) one of the values."""
    return reduction.partials in (Partials.MAXIMUM, Partials.MINIMUM, Partials.ARGMAX, Partials.ARGMIN)


def _valid_flat_index(flat: str, block: tuple[int, ...], extents: list[str]) -> str:
    """The flat index into the valid elements (`extents` per axis) of the element at
    `flat` in the row-major block: each coordinate times the valid elements after it."""
    terms = []
    for axis, size in enumerate(block):
        stride = math.prod(block[axis + 1:])
        coordinate = f"({flat} // {stride}) % {size}" if axis else f"{flat} // {stride}"
        after = " * ".join(extents[axis + 1:])
        terms.append(f"({coordinate}) * {after}" if after else f"({coordinate})")
    return " + ".join(terms)


# ------------------------------------------------------------------ views --


@rule("reshape")
def _reshape(call: OpCall) -> str:
    return f"{call.args[0].text}.reshape({literal(tuple(call.attrs['shape']))})"


@rule("expand")
def _expand(call: OpCall) -> str:
    return f"jnp.broadcast_to({call.args[0].text}, {literal(tuple(call.attrs['shape']))})"


@rule("permute")
def _permute(call: OpCall) -> str:
    return f"jnp.transpose({call.args[0].text}, {literal(tuple(call.attrs['perm']))})"


@rule("shift_lanes")
def _shift_lanes(call: OpCall) -> str:
    """A scan step's shift: `pltpu.roll`, the TPU's lane/sublane rotate (jnp.roll's direction)."""
    source = call.args[0]
    axis = call.attrs["axis"]
    return f"pltpu.roll({source.text}, {call.attrs['shift'] % source.shape[axis]}, {axis})"


def _unaligned_cat(node) -> bool:
    """A kernel's `cat` node or a host code's `HostOp` (its operands: Values or TensorSymbols)."""
    dtype = functools.reduce(torch.promote_types, [arg.dtype for arg in node.args])
    return not aligned_concatenation([tuple(int(size) for size in arg.shape) for arg in node.args], dtype,
                                     node.kwargs["dim"])


@rule("cat", imports=RELAYOUT, when=_unaligned_cat)
def _cat(call: OpCall) -> str:
    """torch.cat: `jnp.concatenate` where Mosaic takes it (`aligned_concatenation`), else
    built by selects (`pallasite/runtime/relayout.py`). Operands are first cast to the
    result's dtype (torch promotes them)."""
    dim = call.attrs["dim"]
    pieces = ", ".join(call.all_cast(call.out_dtype))
    if aligned_concatenation([a.shape for a in call.args], call.out_dtype, dim):
        return f"jnp.concatenate([{pieces}], axis={dim})"
    return f"relayout.concatenate(({pieces},), {dim})"

@rule("pad")
def _pad(call: OpCall) -> str:
    """F.pad, constant mode: fill lanes before and after each padded axis (Mosaic lowers
    `lax.pad` as a concatenation with the fill)."""
    source = call.args[0]
    widths = tuple(tuple(pair) for pair in call.attrs["widths"])
    fill = literal(call.attrs["value"])
    return f"jnp.pad({source.text}, {literal(widths)}, constant_values={jnp_dtype(call.out_dtype)}({fill}))"


@rule("identity")
def _identity(call: OpCall) -> str:
    return call.args[0].text


def key_text(key: Any) -> str:
    """A subscript's items as JAX indexing text. Host code's index tensors and scalars
    come as `Arg`s (their variables); a list of ints is an index array, as in torch."""
    items = key if isinstance(key, tuple) else (key,)
    return ", ".join(_key_item_text(i) for i in items)


def _key_item_text(item: Any) -> str:
    if isinstance(item, Arg):
        return item.text
    if item is None:
        return "None"
    if item is Ellipsis:
        return "..."
    if isinstance(item, slice):
        parts = ["" if p is None else str(p) for p in (item.start, item.stop)]
        return ":".join(parts) + (f":{item.step}" if item.step is not None else "")
    if isinstance(item, list):
        return f"jnp.array({item!r}, jnp.int32)"
    return literal(item)


@rule("getitem")
def _getitem(call: OpCall) -> str:
    source = call.args[0]
    if call.out_shape == () and source.shape and source.dtype in _LOW_PRECISION:
        # Mosaic has no 16-bit scalars: an element is read from the float32 vector, then rounded
        return f"{source.text}.astype(jnp.float32)[{key_text(call.attrs['key'])}].astype({jnp_dtype(call.out_dtype)})"
    return f"{source.text}[{key_text(call.attrs['key'])}]"


from . import matmul_rules  # noqa: E402,F401  (registers the gather, contraction and creation rules)
