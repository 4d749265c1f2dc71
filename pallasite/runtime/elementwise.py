"""Elementwise functions generated kernels call that Mosaic has no primitive for (and
`true_divide`, which keeps interpret mode's float division IEEE's).

Mosaic (JAX 0.10's Pallas TPU lowering) lowers exp, log, log1p, sqrt, tanh, sin, cos,
atan2 and erf, but not expm1, sinh, cosh, asin, acos, atan, asinh, acosh, atanh or erfc:
interpret mode ran `jnp.expm1` and friends, and the same kernel failed to compile for a
TPU. Each function here is written with the primitives Mosaic lowers, in float32 (a bf16
or f16 input is widened and the result rounded back, as torch computes them), and chooses
forms that keep float32's accuracy where the textbook identity loses it:

- expm1: `(u - 1) * x / log(u)` with `u = exp(x)` (the rounding of `u` cancels), `x`
  itself where `u` rounds to 1;
- sinh, cosh: `e / 2 -+ 1 / (2 e)` with `e / 2 = (exp(|x| / 2) / 2) * exp(|x| / 2)`, finite
  as far as the result is; sinh of |x| < 1 through expm1 (no cancellation);
- asin, acos, atan: `atan2` of the legs `x` and `sqrt((1 - x)(1 + x))`;
- asinh, acosh: log1p forms, `log(|x|) + ln 2` where squaring would overflow;
- atanh: `log1p(2|x| / (1 - |x|)) / 2` with x's sign;
- erfc: `1 - erf(x)` below 0.5 (no cancellation there); above it
  `exp(-x^2) * g(2 / (2 + x))`, `g` a degree-10 polynomial fitted (least squares on a
  Chebyshev basis, weighted for relative error) to `erfc(x) * exp(x^2)` over [0.5, 10],
  within 3e-7 relative in float32 (tests/test_elementwise_lowering.py checks each function
  against float64 references);
- exp2: Mosaic and XLA compute it as `exp(x * ln 2)`, off by many ulps at large x and not
  exact at integers; here `exp(f * ln 2) * 2 ** n` with `x = n + f`, the power of two
  built from exponent bits;
- floor_divide: torch's floor division of 16-bit floats, each step rounded to 16 bits;
- int_power: an integer `x ** y` of a tensor (or runtime) exponent, squaring over every bit
  of it (jnp.power reads only its low 6 bits), 0 for negative exponents but of bases +-1;
- true_divide: float division kept IEEE's in interpret mode, where XLA's CPU compiler would
  multiply by a reciprocal.
"""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax

_LN2 = 0.6931471805599453
_TWO_OVER_SQRT_PI = 1.1283791670955126
_SQUARE_OVERFLOWS = 2.0 ** 60  # past this, x * x overflows float32: use log(|x|) + ln 2
# g(t) = erfc(x) * exp(x^2) at t = 2 / (2 + x), lowest power first (see the docstring)
_ERFC_SCALED = (2.58240678e-06, 0.282014118, 0.283198146, 0.238150068, 0.219693737, -0.0590089418,
                0.303627069, -0.468426654, 0.225495963, -0.0105840212, -0.0141830653)


def _in_f32(fn):
    """`fn` computed in float32, its result in the input's dtype."""
    def wrapped(x):
        x = jnp.asarray(x)
        return fn(x.astype(jnp.float32)).astype(x.dtype) if x.dtype != jnp.float32 else fn(x)

    wrapped.__name__, wrapped.__doc__ = fn.__name__, fn.__doc__
    return wrapped


def _expm1(x):
    u = jnp.exp(x)
    um1 = u - 1.0
    # log(u) is 0 where u is 1 and inf where u is; those take x and u themselves
    safe = jnp.where((u == 1.0) | jnp.isinf(u), 2.0, u)
    kahan = um1 * (x / jnp.log(safe))
    return jnp.where(u == 1.0, x, jnp.where(jnp.isinf(u) | (um1 == -1.0), um1, kahan))


def _half_exp(a):
    """exp(a) / 2 for a >= 0, finite past exp's own overflow: (exp(a/2) / 2) * exp(a/2)."""
    root = jnp.exp(0.5 * a)
    return (0.5 * root) * root


def _signed(x, magnitude):
    return jnp.where(x < 0, -magnitude, magnitude)


@_in_f32
def expm1(x):
    """exp(x) - 1."""
    return _expm1(x)


@_in_f32
def sinh(x):
    """(exp(x) - exp(-x)) / 2."""
    a = jnp.abs(x)
    s = _expm1(jnp.minimum(a, 1.0))
    small = 0.5 * (s + s / (s + 1.0))
    half = _half_exp(a)
    return _signed(x, jnp.where(a < 1.0, small, half - 0.25 / half))


@_in_f32
def cosh(x):
    """(exp(x) + exp(-x)) / 2."""
    half = _half_exp(jnp.abs(x))
    return half + 0.25 / half


@_in_f32
def asin(x):
    return jnp.arctan2(x, jnp.sqrt((1.0 - x) * (1.0 + x)))


@_in_f32
def acos(x):
    return jnp.arctan2(jnp.sqrt((1.0 - x) * (1.0 + x)), x)


@_in_f32
def atan(x):
    return jnp.arctan2(x, jnp.ones_like(x))


@_in_f32
def asinh(x):
    a = jnp.abs(x)
    bounded = jnp.minimum(a, _SQUARE_OVERFLOWS)
    near = jnp.log1p(bounded + bounded * bounded / (1.0 + jnp.sqrt(1.0 + bounded * bounded)))
    return _signed(x, jnp.where(a < _SQUARE_OVERFLOWS, near, jnp.log(a) + _LN2))


@_in_f32
def acosh(x):
    bounded = jnp.minimum(x, _SQUARE_OVERFLOWS)
    near = jnp.log1p((bounded - 1.0) + jnp.sqrt((bounded - 1.0) * (bounded + 1.0)))
    # below 1 there is none (the log1p form rounds to log1p(-1) = -inf for large negatives)
    return jnp.where(x < 1.0, jnp.nan, jnp.where(x < _SQUARE_OVERFLOWS, near, jnp.log(x) + _LN2))


@_in_f32
def atanh(x):
    a = jnp.abs(x)  # log1p of a positive argument: no cancellation near -1
    return _signed(x, 0.5 * jnp.log1p(2.0 * a / (1.0 - a)))


@_in_f32
def erfc(x):
    """1 - erf(x), accurate in the tail."""
    tail = jnp.clip(x, 0.5, 11.0)  # erfc(11) underflows float32: +inf gives 0, not inf - inf
    t = 2.0 / (2.0 + tail)
    scaled = jnp.full_like(t, _ERFC_SCALED[-1])
    for coefficient in reversed(_ERFC_SCALED[:-1]):
        scaled = scaled * t + coefficient
    # exp(-x^2) as exp(-h^2) * exp(-(x - h)(x + h)): h has 4 fractional bits, so h^2 is exact
    h = jnp.floor(tail * 16.0) / 16.0
    decay = jnp.exp(-h * h) * jnp.exp(-(tail - h) * (tail + h))
    return jnp.where(x < 0.5, 1.0 - lax.erf(x), decay * scaled)


@_in_f32
def erfinv(x):
    """torch.erfinv within 3 ulps of torch's: XLA's erf_inv (64 ulps off near +-1), then for
    |x| > 0.8 one Newton step on erfc(y) = 1 - |x| (1 - |x| is exact there, and erfc keeps
    its relative accuracy in the tail, where erf(y) - x would cancel)."""
    first = lax.erf_inv(x)
    a, y = jnp.abs(x), jnp.abs(first)
    refined = y + (erfc(y) - (1.0 - a)) / (_TWO_OVER_SQRT_PI * jnp.exp(-y * y))
    return jnp.where((a > 0.8) & jnp.isfinite(first), jnp.sign(x) * refined, first)


def _power_of_two(n):
    """2 ** n for integer-valued float32 n in [-126, 127], built from its exponent bits."""
    return lax.bitcast_convert_type((n.astype(jnp.int32) + 127) << 23, jnp.float32)


@_in_f32
def exp2(x):
    """2 ** x: exact at integers, within an ulp between (XLA's exp(x * ln 2) is not)."""
    n = jnp.clip(jnp.floor(x), -252.0, 254.0)  # past these the result is 0 or inf anyway
    half = jnp.floor(n * 0.5)  # 2 ** n in two normal factors: their product may be subnormal
    return jnp.exp((x - n) * _LN2) * _power_of_two(half) * _power_of_two(n - half)


def int_power(base, exponent, dtype):
    """torch's integer `base ** exponent` in `dtype` for an integer tensor exponent, wrapping as
    torch does: squaring over every bit of the exponent (jnp.power takes only its low 6 bits:
    3 ** 64 gave 1); a negative exponent gives 0, except 1 for base 1 and +-1 for base -1."""
    base, exponent = jnp.broadcast_arrays(jnp.asarray(base, dtype), jnp.asarray(exponent, dtype))
    bits = jnp.iinfo(exponent.dtype).bits - (1 if jnp.issubdtype(exponent.dtype, jnp.signedinteger) else 0)
    result, square, rest = jnp.ones_like(base), base, jnp.maximum(exponent, 0)
    for bit in range(bits):
        result = jnp.where((rest >> bit) & 1 == 1, result * square, result)
        if bit + 1 < bits:
            square = square * square
    negative = jnp.where(base == 1, 1, jnp.where(base == -1, jnp.where(exponent & 1 == 1, -1, 1), 0))
    return jnp.where(exponent < 0, negative.astype(base.dtype), result)


def floor_divide(a, b):
    """torch's floor division of 16-bit floats: the remainder's correction of the quotient, each
    step rounded to the operands' dtype as torch's CPU computes it (the float32 quotient
    floored, or jnp.floor_divide's rounding, differed from torch by 1 in ~1% of bfloat16 lanes)."""
    mod = jnp.fmod(a, b)
    div = (a - mod) / b
    div = jnp.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floor = jnp.floor(div)
    floor = jnp.where(div - floor > 0.5, floor + 1, floor)
    quotient = a / b
    negative = (quotient < 0) | (1 / quotient < 0)  # -0.0 too, as torch's copysign(0, a / b)
    floor = jnp.where(div == 0, jnp.where(negative, -0.0, 0.0).astype(quotient.dtype), floor)
    return jnp.where(b == 0, quotient, floor)


def true_divide(a, b, interpret):
    """IEEE's correctly rounded quotient `a / b`, torch's CPU division. XLA's CPU compiler, which
    runs interpret mode, multiplies by the reciprocal of a divisor that is a constant or a
    broadcast (`x / 0.3`, `exps / total`): one ulp off in ~20% of lanes, a whole unit once
    truncated or rounded. Interpreting (`interpret` not None), the divisor is held at the
    result's shape behind an optimization barrier, which the rewrite cannot see through; for a
    TPU this is Mosaic's own division."""
    if interpret is None:
        return a / b
    shape = jnp.broadcast_shapes(jnp.shape(a), jnp.shape(b))
    divisor = jnp.broadcast_to(jnp.asarray(b, jnp.result_type(a, b)), shape)
    return a / lax.optimization_barrier(divisor)


__all__ = ["acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "erfc", "exp2", "expm1", "floor_divide",
           "int_power", "sinh", "true_divide"]
