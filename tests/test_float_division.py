"""torch's rounding divisions of 16-bit floats (trial I): `torch.div(a, b, rounding_mode="trunc")`
truncates the quotient rounded to 16 bits (-3.75 / 0.1445 is -25.95, rounded -26.0, truncated
-26; we truncated the float32 quotient: -25), and floor division (`//`, rounding_mode="floor")
corrects the quotient by the remainder in 16-bit steps (`elementwise.floor_divide`; the float32
quotient floored differed by 1 in ~1% of bfloat16 lanes). float32 is as before.

Division by a number, a float argument or a broadcast divisor is IEEE's as torch's CPU divides
(trials BB, CC): XLA's CPU compiler multiplied by the reciprocal (`elementwise.true_divide`)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 512]))
def divisions(x, y):
    out = torch.empty([3, *x.shape], dtype=x.dtype, device=x.device)
    for t0, t1 in hl.tile(x.shape):
        out[0, t0, t1] = torch.div(x[t0, t1], y[t0, t1], rounding_mode="trunc")
        out[1, t0, t1] = torch.div(x[t0, t1], y[t0, t1], rounding_mode="floor")
        out[2, t0, t1] = x[t0, t1] // y[t0, t1]
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_rounding_divisions_match_torch(dtype):
    torch.manual_seed(0)
    x, y = torch.randn(8, 4096).to(dtype) * 10, torch.randn(8, 4096).to(dtype)
    x[0, :4] = torch.tensor([-3.75, 4.40625, -5.6796875, 2.5703125]).to(dtype)
    y[0, :4] = torch.tensor([0.14453125, 0.041259765625, 0.0014295578, -0.00097322464]).to(dtype)
    y[0, 4:6] = 0.0
    expected = torch.stack([torch.div(x, y, rounding_mode="trunc"), torch.div(x, y, rounding_mode="floor"), x // y])
    _, result = code_and_output(divisions, (x, y))
    torch.testing.assert_close(result, expected, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(run_ref(divisions, (x, y)), expected, rtol=0, atol=0, equal_nan=True)
    check_tpu_lowering(divisions, (x[:, :512], y[:, :512]))


@pallasite.kernel
def by_numbers(x):
    out = torch.empty([4, x.size(0)], dtype=x.dtype, device=x.device)
    for t in hl.tile(x.size(0)):
        out[0, t] = x[t] // 0.3
        out[1, t] = torch.div(x[t], 0.7, rounding_mode="floor")
        out[2, t] = 3.3 / x[t]
        out[3, t] = x[t] / 3.3
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_divisions_by_and_of_numbers_match_torch(dtype):
    """(trial K) torch floors `x // 0.3` of 16-bit x in float32 with the number as given (the
    16-bit steps of a tensor divisor differed in ~0.3% of lanes), and computes `3.3 / x` as
    x.reciprocal() * 3.3 (a direct float32 quotient differed in a quarter of the lanes)."""
    torch.manual_seed(0)
    x = (torch.randn(4096) * 5).to(dtype)
    expected = torch.stack([x // 0.3, torch.div(x, 0.7, rounding_mode="floor"), 3.3 / x, x / 3.3])
    _, result = code_and_output(by_numbers, (x,))
    torch.testing.assert_close(result, expected, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(run_ref(by_numbers, (x,)), expected, rtol=0, atol=0, equal_nan=True)
    check_tpu_lowering(by_numbers, (x[:512],))


@pallasite.kernel
def with_arguments(x, s: float):
    out = torch.empty([6, x.size(0)], dtype=x.dtype, device=x.device)
    for t in hl.tile(x.size(0)):
        out[0, t] = torch.div(x[t], 1.3, rounding_mode="trunc")
        out[1, t] = 7 // x[t]
        out[2, t] = x[t] // s
        out[3, t] = x[t] * s
        out[4, t] = s / x[t]
        out[5, t] = torch.div(x[t], s, rounding_mode="trunc")
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_arithmetic_with_float_arguments(dtype):
    """(trial L) a float kernel argument is a number to torch (taken in float32), not a 16-bit
    value: `x * s` rounded s first (~50% of lanes 1 ulp off); `7 // x` and `x // s` raised inside
    the generated module (AttributeError, NameError); trunc by a number truncates the float32
    quotient."""
    torch.manual_seed(0)
    x, s = (torch.randn(1000) * 5).to(dtype), 0.37
    expected = torch.stack([torch.div(x, 1.3, rounding_mode="trunc"), 7 // x, x // s, x * s, s / x,
                            torch.div(x, s, rounding_mode="trunc")])
    _, result = code_and_output(with_arguments, (x, s))
    torch.testing.assert_close(result, expected, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(run_ref(with_arguments, (x, s)), expected, rtol=0, atol=0, equal_nan=True)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8]))
def scaled_divisions(x, w, s: float):
    out = torch.empty([6, *x.shape], dtype=x.dtype, device=x.device)
    for t in hl.tile(x.size(0)):
        v = x[t, :]
        out[0, t, :] = v / 0.3
        out[1, t, :] = torch.div(v, 0.3, rounding_mode="trunc")
        out[2, t, :] = v / s
        out[3, t, :] = v / w[None, :]
        out[4, t, :] = 0.3 / v
        out[5, t, :] = torch.round(v / s)  # a quantizer's step
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_divisions_by_numbers_and_broadcast_divisors_are_ieee(dtype):
    """`x / 0.3` was 1 ulp off torch in ~20% of float32 lanes, and `torch.div(x, 0.3,
    rounding_mode="trunc")` a whole unit off (4.5 / 0.3: torch 14, compiled 15), as were a float
    argument, a row-vector divisor and `0.3 / x` (torch's reciprocal times 0.3)."""
    torch.manual_seed(1)
    x = torch.randn(16, 256) * 40
    x[0, :6] = torch.tensor([4.5, -4.5, 15.0, -37.5, 7.5, 16.5])
    x, w = x.to(dtype), torch.randn(256).to(dtype)
    expected = torch.stack([x / 0.3, torch.div(x, 0.3, rounding_mode="trunc"), x / 0.3, x / w[None, :], 0.3 / x,
                            torch.round(x / 0.3)])
    for result in (code_and_output(scaled_divisions, (x, w, 0.3))[1], run_ref(scaled_divisions, (x, w, 0.3))):
        torch.testing.assert_close(result, expected, rtol=0, atol=0, equal_nan=True)


@pallasite.kernel
def integer_rounding_divisions(x):
    out = torch.empty([3, *x.shape], dtype=x.dtype, device=x.device)
    for t in hl.tile(x.size(0)):
        out[0, t] = torch.div(x[t], 7, rounding_mode="trunc")
        out[1, t] = torch.div(x[t], -3, rounding_mode="trunc")
        out[2, t] = torch.div(x[t], -3, rounding_mode="floor")
    return out


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32])
def test_narrow_integer_rounding_divisions_by_numbers(dtype):
    """Trials BB and CC: trunc division of int8/uint8/int16 by a number raised JAX's TypeError
    ("lax.div requires arguments to have the same dtypes") compiled; reference mode divided
    uint8 by -3 as -3 (torch converts it to uint8: 253) in floor and trunc modes."""
    x = torch.tensor([0, 1, 7, 100, 127, -8, -100, -128], dtype=torch.int32)
    x = (x % 256 if dtype == torch.uint8 else x).to(dtype)
    expected = torch.stack([torch.div(x, 7, rounding_mode="trunc"), torch.div(x, -3, rounding_mode="trunc"),
                            torch.div(x, -3, rounding_mode="floor")])
    for result in (code_and_output(integer_rounding_divisions, (x,))[1], run_ref(integer_rounding_divisions, (x,))):
        assert torch.equal(result, expected)
