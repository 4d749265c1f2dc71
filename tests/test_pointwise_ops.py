"""Pointwise torch ops and operators on tiles match torch eager, dtypes included.

Every case runs the same two-input kernel: load one (8, 128) block of `x` and
`y`, apply the op, store the result into an output whose dtype is the one torch
eager gives for the same op (int64 narrowed to int32: TPUs have no 64-bit
vectors). Matching dtypes is part of the check: `assert_close` compares them.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import pallasite
import pallasite.language as hl
from pallasite.testing import check_tpu_lowering

SHAPE = (8, 128)


def pointwise_kernel(op, out_dtype: torch.dtype):
    """A kernel computing `out[tile] = op(x[tile], y[tile])` over one 2-D tile loop."""

    @pallasite.kernel
    def pointwise(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty(x.shape, dtype=out_dtype)
        for tile_m, tile_n in hl.tile(x.shape):
            out[tile_m, tile_n] = op(x[tile_m, tile_n], y[tile_m, tile_n])
        return out

    return pointwise


def torch_result_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.int32 if dtype == torch.int64 else dtype


def check_against_torch(op, x, y, atol=None, rtol=None):
    expected = op(x, y)
    expected = expected.to(torch_result_dtype(expected.dtype))
    result = pointwise_kernel(op, expected.dtype)(x, y)
    assert result.dtype == expected.dtype
    torch.testing.assert_close(result, expected, atol=atol, rtol=rtol, equal_nan=True)


# ------------------------------------------------------------------- inputs --


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def normal_inputs():
    return torch.randn(SHAPE, generator=_gen(0)), torch.randn(SHAPE, generator=_gen(1))


def positive_inputs():
    return torch.rand(SHAPE, generator=_gen(2)) * 4 + 0.1, torch.rand(SHAPE, generator=_gen(3)) * 2 + 0.5


def unit_inputs():
    """In (-0.95, 0.95): the domain of asin/acos/atanh."""
    return torch.rand(SHAPE, generator=_gen(4)) * 1.9 - 0.95, torch.rand(SHAPE, generator=_gen(5)) * 1.9 - 0.95


def wide_inputs():
    """Normal values scaled up so they cross integers and the activation thresholds."""
    return torch.randn(SHAPE, generator=_gen(6)) * 8, torch.randn(SHAPE, generator=_gen(7)) * 3


def quarter_inputs():
    """Multiples of 0.25, so rounding hits exact halves (torch rounds half to even)."""
    x = torch.randint(-40, 40, SHAPE, generator=_gen(8)).float() / 4
    return x, torch.randn(SHAPE, generator=_gen(9))


def special_inputs():
    """Normal values with nan, +inf, -inf and signed zeros mixed in."""
    x, y = normal_inputs()
    x = x.clone()
    x[0, :16] = float("nan")
    x[1, :16] = float("inf")
    x[2, :16] = float("-inf")
    x[3, :16] = -0.0
    return x, y


def int_inputs():
    x = torch.randint(-50, 50, SHAPE, dtype=torch.int32, generator=_gen(10))
    y = torch.randint(1, 9, SHAPE, dtype=torch.int32, generator=_gen(11))
    y = torch.where(torch.rand(SHAPE, generator=_gen(12)) < 0.5, -y, y)  # nonzero, both signs
    return x, y


def bf16_inputs():
    x, y = normal_inputs()
    return x.to(torch.bfloat16), y.to(torch.bfloat16)


def bf16_f32_inputs():
    x, y = normal_inputs()
    return x.to(torch.bfloat16), y


def int_f32_inputs():
    x, _ = int_inputs()
    return x, torch.randn(SHAPE, generator=_gen(13))


INPUTS = {
    "normal": normal_inputs, "positive": positive_inputs, "unit": unit_inputs,
    "wide": wide_inputs, "quarter": quarter_inputs, "special": special_inputs,
    "int": int_inputs, "bf16": bf16_inputs, "bf16_f32": bf16_f32_inputs, "int_f32": int_f32_inputs,
}

# ---------------------------------------------------------- float operators --

# (id, op, inputs): float32 results, compared at float32 tolerance.
FLOAT_BINARY = [
    ("add", lambda x, y: x + y, "normal"),
    ("sub", lambda x, y: x - y, "normal"),
    ("mul", lambda x, y: x * y, "normal"),
    ("truediv", lambda x, y: x / y, "positive"),
    ("floordiv", lambda x, y: x // y, "wide"),
    ("mod", lambda x, y: x % y, "wide"),
    ("pow_tensor", lambda x, y: x ** y, "positive"),
    ("pow_int_scalar", lambda x, y: x ** 2, "normal"),
    ("pow_float_scalar", lambda x, y: x ** 0.5, "positive"),
    ("reflected_sub", lambda x, y: 2 - x, "normal"),
    ("reflected_add", lambda x, y: 1.5 + x, "normal"),
    ("reflected_mul", lambda x, y: 3 * x, "normal"),
    ("reflected_div", lambda x, y: 2.0 / x, "positive"),
    ("reflected_floordiv", lambda x, y: 7.0 // y, "positive"),
    ("reflected_mod", lambda x, y: 5.0 % y, "positive"),
    ("reflected_pow", lambda x, y: 2 ** x, "normal"),
    ("torch_add_alpha", lambda x, y: torch.add(x, y, alpha=0.5), "normal"),
    ("torch_sub_alpha", lambda x, y: torch.sub(x, y, alpha=2), "normal"),
    ("torch_rsub", lambda x, y: torch.rsub(x, y), "normal"),
    ("torch_mul", lambda x, y: torch.mul(x, y), "normal"),
    ("div_floor_mode", lambda x, y: torch.div(x, y, rounding_mode="floor"), "wide"),
    ("div_trunc_mode", lambda x, y: torch.div(x, y, rounding_mode="trunc"), "wide"),
    ("fmod", lambda x, y: torch.fmod(x, y), "wide"),
    ("remainder", lambda x, y: torch.remainder(x, y), "wide"),
    ("maximum", lambda x, y: torch.maximum(x, y), "normal"),
    ("minimum", lambda x, y: torch.minimum(x, y), "normal"),
    ("max_binary", lambda x, y: torch.max(x, y), "normal"),
    ("min_binary", lambda x, y: torch.min(x, y), "normal"),
    ("atan2", lambda x, y: torch.atan2(x, y), "normal"),
    ("copysign", lambda x, y: torch.copysign(x, y), "normal"),
    ("hypot", lambda x, y: torch.hypot(x, y), "normal"),
    ("lerp_scalar_weight", lambda x, y: torch.lerp(x, y, 0.3), "normal"),
    ("lerp_tensor_weight", lambda x, y: torch.lerp(x, y, torch.sigmoid(y)), "normal"),
    ("addcmul", lambda x, y: torch.addcmul(x, x, y, value=0.5), "normal"),
    ("addcdiv", lambda x, y: torch.addcdiv(y, x, y, value=2), "positive"),
    ("where_tensors", lambda x, y: torch.where(x > y, x, y), "normal"),
    ("where_scalar_other", lambda x, y: torch.where(x > 0, x, 0.0), "normal"),
    ("where_two_scalars", lambda x, y: torch.where(x > y, 1.0, -1.0), "normal"),
    ("clamp_both", lambda x, y: torch.clamp(x, -0.5, 0.5), "normal"),
    ("clamp_min_only", lambda x, y: torch.clamp(x, min=0.25), "normal"),
    ("clamp_max_only", lambda x, y: x.clamp(max=-0.25), "normal"),
    ("clamp_tensor_bounds", lambda x, y: torch.clamp(x, min=y - 1, max=y + 1), "normal"),
    ("clip", lambda x, y: torch.clip(x, -1, 1), "normal"),
    ("chained_expression", lambda x, y: (x * 2 - y) / (1 + y * y) + 0.5, "normal"),
]

# (id, op, inputs[, atol, rtol]): unary float ops, second input unused.
FLOAT_UNARY = [
    ("neg", lambda x, y: -x, "normal"),
    ("pos", lambda x, y: +x, "normal"),
    ("torch_neg", lambda x, y: torch.neg(x), "normal"),
    ("builtin_abs", lambda x, y: abs(x), "normal"),
    ("abs", lambda x, y: torch.abs(x), "normal"),
    ("exp", lambda x, y: torch.exp(x), "normal"),
    ("exp2", lambda x, y: torch.exp2(x), "normal"),
    ("expm1", lambda x, y: torch.expm1(x), "normal"),
    ("log", lambda x, y: torch.log(x), "positive"),
    ("log2", lambda x, y: torch.log2(x), "positive"),
    ("log10", lambda x, y: torch.log10(x), "positive"),
    ("log1p", lambda x, y: torch.log1p(x), "positive"),
    ("sqrt", lambda x, y: torch.sqrt(x), "positive"),
    ("rsqrt", lambda x, y: torch.rsqrt(x), "positive"),
    ("sin", lambda x, y: torch.sin(x), "normal"),
    ("cos", lambda x, y: torch.cos(x), "normal"),
    ("tan", lambda x, y: torch.tan(x), "unit"),
    ("tanh", lambda x, y: torch.tanh(x), "normal"),
    ("sinh", lambda x, y: torch.sinh(x), "normal"),
    ("cosh", lambda x, y: torch.cosh(x), "normal"),
    ("asin", lambda x, y: torch.asin(x), "unit"),
    ("acos", lambda x, y: torch.acos(x), "unit"),
    ("atan", lambda x, y: torch.atan(x), "normal"),
    ("asinh", lambda x, y: torch.asinh(x), "normal"),
    ("atanh", lambda x, y: torch.atanh(x), "unit"),
    ("sigmoid", lambda x, y: torch.sigmoid(x), "wide"),
    ("tensor_sigmoid", lambda x, y: x.sigmoid(), "normal"),
    ("relu", lambda x, y: torch.relu(x), "normal"),
    ("F_relu", lambda x, y: F.relu(x), "normal"),
    ("relu6", lambda x, y: F.relu6(x), "wide"),
    ("erf", lambda x, y: torch.erf(x), "normal"),
    ("erfc", lambda x, y: torch.erfc(x), "normal"),
    ("gelu_exact", lambda x, y: F.gelu(x), "wide"),
    ("gelu_tanh", lambda x, y: F.gelu(x, approximate="tanh"), "wide"),
    ("silu", lambda x, y: F.silu(x), "wide"),
    ("mish", lambda x, y: F.mish(x), "normal"),
    ("softplus", lambda x, y: F.softplus(x), "wide"),
    ("softplus_beta_threshold", lambda x, y: F.softplus(x, beta=2.0, threshold=5.0), "wide"),
    ("leaky_relu_default", lambda x, y: F.leaky_relu(x), "normal"),
    ("leaky_relu_slope", lambda x, y: F.leaky_relu(x, negative_slope=0.2), "normal"),
    ("elu", lambda x, y: F.elu(x, alpha=0.7), "normal"),
    ("hardtanh", lambda x, y: F.hardtanh(x, -0.5, 0.75), "normal"),
    ("hardsigmoid", lambda x, y: F.hardsigmoid(x), "wide"),
    ("hardswish", lambda x, y: F.hardswish(x), "wide"),
    ("logsigmoid", lambda x, y: F.logsigmoid(x), "wide"),
    ("floor", lambda x, y: torch.floor(x), "wide"),
    ("ceil", lambda x, y: torch.ceil(x), "wide"),
    ("trunc", lambda x, y: torch.trunc(x), "wide"),
    ("round_half_even", lambda x, y: torch.round(x), "quarter"),
    ("round_decimals", lambda x, y: torch.round(x, decimals=1), "wide"),
    ("sign", lambda x, y: torch.sign(x), "special"),
    ("reciprocal", lambda x, y: torch.reciprocal(x), "positive"),
    ("square", lambda x, y: torch.square(x), "normal"),
    ("nan_to_num_default", lambda x, y: torch.nan_to_num(x), "special"),
    ("nan_to_num_values", lambda x, y: torch.nan_to_num(x, nan=0.5, posinf=9.0, neginf=-9.0), "special"),
    ("tensor_method_exp", lambda x, y: x.exp(), "normal"),
]

# (id, op, inputs): ops with a bool result.
BOOL_RESULT = [
    ("lt", lambda x, y: x < y, "normal"),
    ("le", lambda x, y: x <= y, "quarter"),
    ("gt", lambda x, y: x > y, "normal"),
    ("ge", lambda x, y: x >= 0.0, "quarter"),
    ("eq", lambda x, y: x == 0.5, "quarter"),
    ("ne", lambda x, y: x != 0.5, "quarter"),
    ("torch_eq_tensor", lambda x, y: torch.eq(x, x * 1.0), "normal"),
    ("isnan", lambda x, y: torch.isnan(x), "special"),
    ("isinf", lambda x, y: torch.isinf(x), "special"),
    ("isfinite", lambda x, y: torch.isfinite(x), "special"),
    ("signbit", lambda x, y: torch.signbit(x), "special"),
    ("and_operator", lambda x, y: (x > 0) & (y > 0), "normal"),
    ("or_operator", lambda x, y: (x > 0) | (y > 0), "normal"),
    ("xor_operator", lambda x, y: (x > 0) ^ (y > 0), "normal"),
    ("invert_operator", lambda x, y: ~(x > 0), "normal"),
    ("logical_and", lambda x, y: torch.logical_and(x > 0, y > 0), "normal"),
    ("logical_or", lambda x, y: torch.logical_or(x, y > 0), "quarter"),
    ("logical_xor", lambda x, y: torch.logical_xor(x > 0, y > 0), "normal"),
    ("logical_not", lambda x, y: torch.logical_not(x), "quarter"),
]

# (id, op): int32 inputs (x in [-50, 50), y nonzero of both signs).
INT_OPS = [
    ("int_add", lambda x, y: x + y),
    ("int_mul_scalar", lambda x, y: x * 3 - 1),
    ("int_floordiv", lambda x, y: x // y),
    ("int_mod", lambda x, y: x % y),
    ("int_remainder_scalar", lambda x, y: torch.remainder(x, 7)),
    ("int_fmod", lambda x, y: torch.fmod(x, y)),
    ("int_div_trunc", lambda x, y: torch.div(x, y, rounding_mode="trunc")),
    ("int_div_floor", lambda x, y: torch.div(x, y, rounding_mode="floor")),
    ("int_and", lambda x, y: x & y),
    ("int_or", lambda x, y: x | y),
    ("int_xor", lambda x, y: x ^ y),
    ("int_invert", lambda x, y: ~x),
    ("int_left_shift", lambda x, y: x << 2),
    ("int_right_shift", lambda x, y: x >> 1),
    ("int_abs", lambda x, y: torch.abs(x)),
    ("int_neg", lambda x, y: -x),
    ("int_maximum", lambda x, y: torch.maximum(x, y)),
    ("int_clamp", lambda x, y: torch.clamp(x, -10, 10)),
    ("int_where", lambda x, y: torch.where(x > 0, x, y)),
    ("int_sign", lambda x, y: torch.sign(x)),
    ("int_square", lambda x, y: torch.square(x)),
    ("int_pow_scalar", lambda x, y: x ** 2),
]

# (id, op, inputs[, atol, rtol]): the result dtype follows torch's promotion rules.
PROMOTION = [
    # int32 tensor and a Python float -> float32
    ("int_plus_float_scalar", lambda x, y: x + 1.5, "int"),
    ("int_times_float_scalar", lambda x, y: x * 0.25, "int"),
    ("float_scalar_minus_int", lambda x, y: 0.5 - x, "int"),
    # int32 tensor and a Python int stays int32
    ("int_plus_int_scalar", lambda x, y: x + 2, "int"),
    # true division of ints is float32
    ("int_truediv_int", lambda x, y: x / y, "int"),
    ("int_truediv_int_scalar", lambda x, y: x / 4, "int"),
    # int32 tensor with a float32 tensor -> float32
    ("int_plus_float_tensor", lambda x, y: x + y, "int_f32"),
    # bf16 with a float32 tensor -> float32
    ("bf16_times_f32", lambda x, y: x * y, "bf16_f32"),
    ("bf16_plus_f32", lambda x, y: x + y, "bf16_f32"),
    # bf16 with Python scalars stays bf16
    ("bf16_times_float_scalar", lambda x, y: x * 2.5, "bf16"),
    ("bf16_plus_int_scalar", lambda x, y: x + 3, "bf16"),
    ("bf16_reflected_sub", lambda x, y: 1 - x, "bf16"),
    ("bf16_times_bf16", lambda x, y: x * y, "bf16"),
    ("bf16_exp", lambda x, y: torch.exp(x), "bf16", 1e-2, 1e-2),
    ("bf16_sigmoid", lambda x, y: torch.sigmoid(x), "bf16", 1e-2, 1e-2),
    # comparisons of mixed dtypes compare in the promoted dtype
    ("int_lt_float_scalar", lambda x, y: x < 0.5, "int"),
    ("int_eq_float_scalar", lambda x, y: x == 3.0, "int"),
    ("int_gt_float_tensor", lambda x, y: x > y * 20, "int_f32"),
    ("bf16_lt_f32", lambda x, y: x < y, "bf16_f32"),
    ("bf16_eq_f32", lambda x, y: x == y, "bf16_f32"),
    # bool arithmetic
    ("bool_plus_int_scalar", lambda x, y: (x > y) + 1, "normal"),
    ("bool_times_float_tensor", lambda x, y: (x > 0) * y, "normal"),
    ("bool_plus_int_tensor", lambda x, y: (x > 0) + y, "int"),
    # where with mixed dtypes
    ("where_int_and_float_scalar", lambda x, y: torch.where(x > 0, x, 0.5), "int"),
    ("where_bf16_and_f32", lambda x, y: torch.where(x > 0, x, y), "bf16_f32"),
]

# (id, op, inputs): casts.
CASTS = [
    ("to_bfloat16", lambda x, y: x.to(torch.bfloat16), "normal"),
    ("bfloat16_method", lambda x, y: x.bfloat16(), "normal"),
    ("float_method_from_bf16", lambda x, y: x.float(), "bf16"),
    ("to_float32_from_int", lambda x, y: x.to(torch.float32), "int"),
    ("float_method_from_int", lambda x, y: x.float() / 3, "int"),
    ("int_method_truncates", lambda x, y: x.int(), "wide"),
    ("to_int32_truncates", lambda x, y: x.to(torch.int32), "wide"),
    ("to_int32_from_bf16", lambda x, y: (x * 8).to(torch.int32), "bf16"),
    ("to_bool", lambda x, y: x.to(torch.bool), "int"),
    ("bool_method", lambda x, y: x.bool(), "quarter"),
    ("to_dtype_of_other", lambda x, y: x.to(y.dtype), "bf16_f32"),
    ("to_dtype_keyword", lambda x, y: x.to(dtype=torch.bfloat16), "normal"),
    ("type_method", lambda x, y: x.type(torch.int32), "wide"),
    ("bool_to_float", lambda x, y: (x > y).float(), "normal"),
    ("bool_to_int", lambda x, y: (x > y).to(torch.int32), "normal"),
    ("same_dtype_cast_is_noop", lambda x, y: x.to(torch.float32) + x.float(), "normal"),
    ("cast_round_trip", lambda x, y: x.to(torch.bfloat16).to(torch.float32), "normal"),
]


def _case_params(cases, default_tolerance=(None, None)):
    params = []
    for case in cases:
        name, op, inputs, *tolerance = case
        atol, rtol = tolerance if tolerance else default_tolerance
        params.append(pytest.param(op, inputs, atol, rtol, id=name))
    return params


@pytest.mark.parametrize("op, inputs, atol, rtol", _case_params(FLOAT_BINARY))
def test_float_binary_op_matches_torch(op, inputs, atol, rtol):
    x, y = INPUTS[inputs]()
    check_against_torch(op, x, y, atol, rtol)


@pytest.mark.parametrize("op, inputs, atol, rtol", _case_params(FLOAT_UNARY, (1e-5, 1e-5)))
def test_float_unary_op_matches_torch(op, inputs, atol, rtol):
    x, y = INPUTS[inputs]()
    check_against_torch(op, x, y, atol, rtol)


@pytest.mark.parametrize("op, inputs, atol, rtol", _case_params(BOOL_RESULT))
def test_bool_result_op_matches_torch(op, inputs, atol, rtol):
    x, y = INPUTS[inputs]()
    check_against_torch(op, x, y, atol, rtol)


@pytest.mark.parametrize("op", [pytest.param(op, id=name) for name, op in INT_OPS])
def test_int32_op_matches_torch(op):
    x, y = int_inputs()
    check_against_torch(op, x, y)


@pytest.mark.parametrize("op, inputs, atol, rtol", _case_params(PROMOTION))
def test_dtype_promotion_matches_torch(op, inputs, atol, rtol):
    x, y = INPUTS[inputs]()
    check_against_torch(op, x, y, atol, rtol)


@pytest.mark.parametrize("op, inputs, atol, rtol", _case_params(CASTS))
def test_cast_matches_torch(op, inputs, atol, rtol):
    x, y = INPUTS[inputs]()
    check_against_torch(op, x, y, atol, rtol)


# ----------------------------------------------------- whole-kernel examples --


@pallasite.kernel
def gelu_variants(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    exact = torch.empty_like(x)
    approximate = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.shape):
        block = x[tile_m, tile_n].float()
        exact[tile_m, tile_n] = F.gelu(block).to(x.dtype)
        approximate[tile_m, tile_n] = F.gelu(block, approximate="tanh").to(x.dtype)
    return exact, approximate


def test_gelu_both_approximations_in_bf16_with_partial_tiles():
    x = (torch.randn(20, 200, generator=_gen(20)) * 3).to(torch.bfloat16)
    exact, approximate = gelu_variants(x)
    torch.testing.assert_close(exact, F.gelu(x.float()).to(torch.bfloat16), atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(
        approximate, F.gelu(x.float(), approximate="tanh").to(torch.bfloat16), atol=1e-2, rtol=1e-2
    )


@pallasite.kernel
def scaled_activation(x: torch.Tensor, scale: float, shift: int) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.shape):
        v = x[tile_m, tile_n]
        out[tile_m, tile_n] = torch.where(v > 0, v * scale, F.leaky_relu(v) + shift)
    return out


def test_scalar_arguments_promote_like_python_numbers():
    x = torch.randn(16, 256, generator=_gen(21))
    result = scaled_activation(x, 0.5, 2)
    torch.testing.assert_close(result, torch.where(x > 0, x * 0.5, F.leaky_relu(x) + 2))


@pallasite.kernel
def softplus_silu(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=torch.float32)
    for tile_m, tile_n in hl.tile(x.shape):
        a = x[tile_m, tile_n]
        b = y[tile_m, tile_n]
        out[tile_m, tile_n] = F.softplus(a) * F.silu(b.float()) + torch.rsqrt(a * a + 1) - (a // 1) % 3
    return out


def test_mixed_pointwise_expression_lowers_to_mosaic():
    x = torch.randn(16, 256, generator=_gen(22))
    y = torch.randn(16, 256, generator=_gen(23)).to(torch.bfloat16)
    expected = F.softplus(x) * F.silu(y.float()) + torch.rsqrt(x * x + 1) - (x // 1) % 3
    torch.testing.assert_close(softplus_silu(x, y), expected, atol=1e-5, rtol=1e-5)
    check_tpu_lowering(softplus_silu, (x, y))


@pallasite.kernel
def int_and_bool_math(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    quotient = torch.empty(x.shape, dtype=torch.float32)
    flags = torch.empty(x.shape, dtype=torch.bool)
    for tile_m, tile_n in hl.tile(x.shape):
        a = x[tile_m, tile_n]
        b = y[tile_m, tile_n]
        quotient[tile_m, tile_n] = a / b + (a // b) * 0.5
        flags[tile_m, tile_n] = ((a % b) == 0) | (a < 0)
    return quotient, flags


def test_int_division_and_bool_outputs_lower_to_mosaic():
    x, y = int_inputs()
    quotient, flags = int_and_bool_math(x, y)
    torch.testing.assert_close(quotient, x / y + (x // y) * 0.5)
    torch.testing.assert_close(flags, ((x % y) == 0) | (x < 0))
    check_tpu_lowering(int_and_bool_math, (x, y))


def test_nan_propagates_through_maximum_like_torch():
    x, y = special_inputs()
    check_against_torch(lambda a, b: torch.maximum(a, b) + torch.minimum(b, a), x, y)


def test_ops_between_reflected_python_scalars_and_math_constants():
    x, y = normal_inputs()
    check_against_torch(lambda a, b: math.pi * a - math.e / (2 + b * b), x, y, 1e-5, 1e-5)


# Ops whose torch answers on nan, +-inf and -0.0 the kernel must reproduce.
SPECIAL_VALUE_OPS = [
    ("neg", lambda x, y: -x), ("abs", lambda x, y: torch.abs(x)),
    ("relu", lambda x, y: torch.relu(x)), ("sigmoid", lambda x, y: torch.sigmoid(x)),
    ("exp", lambda x, y: torch.exp(x)), ("tanh", lambda x, y: torch.tanh(x)),
    ("floor", lambda x, y: torch.floor(x)), ("round", lambda x, y: torch.round(x)),
    ("sign", lambda x, y: torch.sign(x)), ("clamp", lambda x, y: torch.clamp(x, -1, 1)),
    ("maximum", lambda x, y: torch.maximum(x, y)), ("minimum", lambda x, y: torch.minimum(x, y)),
    ("where_isnan", lambda x, y: torch.where(torch.isnan(x), y, x)),
    ("lerp", lambda x, y: torch.lerp(x, y, 0.25)),
    ("leaky_relu", lambda x, y: F.leaky_relu(x)), ("softplus", lambda x, y: F.softplus(x)),
    ("silu", lambda x, y: F.silu(x)), ("reciprocal", lambda x, y: torch.reciprocal(x)),
]


@pytest.mark.parametrize("op", [pytest.param(op, id=name) for name, op in SPECIAL_VALUE_OPS])
def test_nan_inf_and_signed_zero_match_torch(op):
    x, y = special_inputs()
    check_against_torch(op, x, y, 1e-5, 1e-5)


@pallasite.kernel
def lerp(start: torch.Tensor, end: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(start)
    for tile_m, tile_n in hl.tile(start.shape):
        out[tile_m, tile_n] = torch.lerp(start[tile_m, tile_n], end[tile_m, tile_n], weight[tile_m, tile_n])
    return out


def test_lerp_is_exact_at_both_ends_like_torch():
    start = torch.full(SHAPE, 1e8)
    end = torch.randn(SHAPE, generator=_gen(24))
    weight = torch.tensor([0.0, 1.0, 0.75, 0.25]).repeat(SHAPE[0], SHAPE[1] // 4)
    result = lerp(start, end, weight)
    torch.testing.assert_close(result, torch.lerp(start, end, weight))
    torch.testing.assert_close(result[:, 1::4], end[:, 1::4], atol=0, rtol=0)
