"""The interpreted kernel's jaxpr, mended where XLA's CPU compiler and runtime differ from a TPU.

16-bit dots: float32 operands for XLA's CPU runtime.

XLA's CPU runtime cannot run every 16-bit dot it compiles: inside a loop, a bfloat16 (or
float16) dot with a float32 result whose left operand is contracted along its first axis
(`x[tk, tm].T @ y[tk, tn]` after a mask) fails at run time ("Unsupported element type for
DotThunk::Execute: BF16 x BF16 = F32"). A TPU runs the generated code as written, so the
generated code keeps its 16-bit MXU inputs; only the interpreted kernel's jaxpr is rewritten:
each such dot takes its operands converted to float32 first. That changes no value: a
product of two 16-bit floats is exact in float32, and the result accumulates in float32
either way.

NaN in max/min: XLA's CPU compiler drops a NaN from a float `reduce_max`/`reduce_min` over
4096 or more elements (a 32x128 block's row max of a row holding NaN is 0, an all-NaN row's
-inf), where a TPU and torch give NaN. Each such reduction also reduces `x != x` with `or`
and gives NaN where that holds (`nan_propagating_extremes`).

16-bit arithmetic rounded at each op: XLA's CPU compiler computes a bfloat16 (or float16)
op in float32 and, inside a fusion, may hand the float32 value to the next op without
rounding it to 16 bits (`(a * b).float().sum(1)` of bfloat16 a, b summed the exact
products; torch, and a TPU, round each product to bfloat16 first), even with excess
precision disabled. Each such op computes in float32 explicitly and passes through a
`reduce_precision` to the 16-bit format's bits, which no pass removes (`rounded_narrow`; a
float16 subnormal, which reduce_precision would flush, is rounded by hand).
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax._src import core as jax_core

_NARROW = (jnp.bfloat16, jnp.float16)


def widened_dots(jaxpr: jax_core.Jaxpr) -> jax_core.Jaxpr:
    """`jaxpr` (and the jaxprs in its equations' parameters) with each 16-bit dot that has a
    float32 result computed from float32 operands; `jaxpr` itself when it has none."""
    eqns, changed = [], False
    for eqn in jaxpr.eqns:
        params = {name: _widened_param(value) for name, value in eqn.params.items()}
        changed |= any(params[name] is not eqn.params[name] for name in params)
        if _narrow_dot(eqn):
            eqns.extend(_widened_dot(eqn))
            changed = True
        elif _narrow_arithmetic(eqn):
            eqns.extend(_rounded_narrow(eqn.replace(params=params)))
            changed = True
        elif _float_extreme(eqn):
            eqns.extend(_nan_propagating(eqn.replace(params=params)))
            changed = True
        else:
            eqns.append(eqn.replace(params=params) if params != eqn.params else eqn)
    return jaxpr.replace(eqns=eqns) if changed else jaxpr


def _widened_param(value: Any) -> Any:
    if isinstance(value, jax_core.Jaxpr):
        return widened_dots(value)
    if isinstance(value, jax_core.ClosedJaxpr):
        inner = widened_dots(value.jaxpr)
        return value if inner is value.jaxpr else jax_core.ClosedJaxpr(inner, value.consts)
    if isinstance(value, tuple) and any(isinstance(v, (jax_core.Jaxpr, jax_core.ClosedJaxpr)) for v in value):
        widened = tuple(_widened_param(v) for v in value)
        return value if all(a is b for a, b in zip(widened, value)) else widened
    return value


def _narrow_dot(eqn) -> bool:
    if eqn.primitive is not lax.dot_general_p:
        return False
    lhs, rhs = (v.aval for v in eqn.invars[:2])
    return (lhs.dtype in _NARROW and rhs.dtype in _NARROW
            and eqn.outvars[0].aval.dtype == jnp.float32)


# Elementwise primitives whose 16-bit result XLA's CPU compiler computes in float32; ops that
# only move or pick values (convert, select, max, neg, ...) are exact in any format.
_ROUNDING = frozenset(getattr(lax, name) for name in (
    "add_p", "sub_p", "mul_p", "div_p", "rem_p", "pow_p", "integer_pow_p", "square_p", "sqrt_p", "rsqrt_p",
    "cbrt_p", "exp_p", "exp2_p", "log_p", "log1p_p", "expm1_p", "tanh_p", "logistic_p", "sin_p", "cos_p",
    "tan_p", "atan2_p", "asin_p", "acos_p", "atan_p", "sinh_p", "cosh_p", "asinh_p", "acosh_p", "atanh_p",
    "erf_p", "erfc_p", "erf_inv_p", "lgamma_p", "digamma_p") if hasattr(lax, name))
_BITS = {jnp.dtype(jnp.bfloat16): (8, 7), jnp.dtype(jnp.float16): (5, 10)}  # exponent, mantissa


def _narrow_arithmetic(eqn) -> bool:
    return (eqn.primitive in _ROUNDING and len(eqn.outvars) == 1
            and eqn.outvars[0].aval.dtype in _BITS and eqn.outvars[0].aval.shape is not None)


def _rounded_narrow(eqn) -> list:
    """The op on float32 operands, its result rounded to the 16-bit format (`_rounding`)."""
    (result,) = eqn.outvars
    steps, operands = [], []
    for var in eqn.invars:
        if var.aval.dtype in _BITS:
            wide = _f32_var(var.aval.shape)
            steps.append(_convert(var, wide, eqn))
            var = wide
        operands.append(var)
    wide_result = _f32_var(result.aval.shape)
    steps.append(eqn.replace(invars=operands, outvars=[wide_result]))
    return steps + _spliced(_rounding(result.aval.shape, result.aval.dtype), wide_result, result)


def _rounding(shape: tuple, dtype) -> jax_core.ClosedJaxpr:
    """float32 -> `dtype` through `reduce_precision`, which flushes what would be a subnormal
    of the format: a float16 subnormal (below 2 ** -14) is rounded to its multiple of 2 ** -24
    instead, exactly (bfloat16's subnormals are float32's). Traced where the kernel is, as
    `_nan_helper`."""
    exponent, mantissa = _BITS[jnp.dtype(dtype)]

    def rounded(x):
        normal = lax.reduce_precision(x, exponent_bits=exponent, mantissa_bits=mantissa)
        if jnp.dtype(dtype) == jnp.float16:
            steps = lax.round(x * 2.0 ** 24, lax.RoundingMethod.TO_NEAREST_EVEN) * 2.0 ** -24
            normal = jnp.where(jnp.abs(x) < 2.0 ** -14, steps, normal)
        return normal.astype(dtype)
    return jax.make_jaxpr(rounded)(jax.ShapeDtypeStruct(shape, jnp.float32))


def _spliced(helper: jax_core.ClosedJaxpr, source, result) -> list:
    """A traced one-input helper's equations, its input and output variables `source`, `result`."""
    inner_in, inner_out = helper.jaxpr.invars[0], helper.jaxpr.outvars[0]
    return [inner.replace(invars=[source if var is inner_in else var for var in inner.invars],
                          outvars=[result if var is inner_out else var for var in inner.outvars])
            for inner in helper.jaxpr.eqns]


def _f32_var(shape: tuple) -> jax_core.Var:
    return jax_core.Var(jax_core.ShapedArray(shape, jnp.float32))


def _convert(source, target, eqn):
    params = dict(new_dtype=jnp.dtype(target.aval.dtype), weak_type=False, sharding=None)
    return jax_core.new_jaxpr_eqn([source], [target], lax.convert_element_type_p, params, set(),
                                  eqn.source_info, eqn.ctx)


def _float_extreme(eqn) -> bool:
    return eqn.primitive in (lax.reduce_max_p, lax.reduce_min_p) and jnp.issubdtype(
        eqn.invars[0].aval.dtype, jnp.floating)


def _nan_propagating(eqn) -> list:
    """The reduction's equations, and NaN where its operand holds one along the reduced axes:
    a traced helper's equations, its input and output variables the equation's own."""
    (source,), (result,) = eqn.invars, eqn.outvars
    helper = _nan_helper(eqn.primitive, eqn.params["axes"], source.aval.shape, source.aval.dtype)
    if helper.consts:
        return [eqn]
    return _spliced(helper, source, result)


def _nan_helper(primitive, axes: tuple, shape: tuple, dtype) -> jax_core.ClosedJaxpr:
    """The reduction with NaN restored, traced where the kernel is (not cached: its values
    carry the mesh a kernel under `jax.shard_map` is traced in)."""
    def extreme(x):
        reduced = primitive.bind(x, axes=axes)
        nan = lax.reduce_or_p.bind(lax.ne(x, x), axes=axes)
        return lax.select(nan, jnp.full_like(reduced, jnp.nan), reduced)
    return jax.make_jaxpr(extreme)(jax.ShapeDtypeStruct(shape, dtype))


def _widened_dot(eqn) -> list:
    """The dot's operands converted to float32, then the dot of those."""
    converts, operands = [], []
    for var in eqn.invars[:2]:
        wide = _f32_var(var.aval.shape)
        converts.append(_convert(var, wide, eqn))
        operands.append(wide)
    return [*converts, eqn.replace(invars=[*operands, *eqn.invars[2:]])]
