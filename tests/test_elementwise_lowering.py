"""Functions Mosaic has no primitive for (expm1, sinh, cosh, asin, acos, atan, asinh, acosh,
atanh, erfc; gelu and elu through them) are written with those it has
(pallasite/runtime/elementwise.py): they lower for TPU and keep float32's accuracy where the
textbook identities lose it (expm1 near 0, erfc's tail, sinh/cosh near overflow, atanh near
-1, asinh/acosh past the square's overflow)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.testing import check_tpu_lowering

FUNCTIONS = ("expm1", "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "erfc")


@pallasite.kernel
def special_functions(x, unit, big):
    """Each function on its domain: `x` any float, `unit` in [-1, 1], `big` >= 1."""
    (n,) = x.size()
    out = torch.empty([10, n], dtype=x.dtype, device=x.device)
    for tile in hl.tile(n):
        v, u, b = x[tile], unit[tile], big[tile]
        out[0, tile] = torch.expm1(v)
        out[1, tile] = torch.sinh(v)
        out[2, tile] = torch.cosh(v)
        out[3, tile] = torch.asin(u)
        out[4, tile] = torch.acos(u)
        out[5, tile] = torch.atan(v)
        out[6, tile] = torch.asinh(v)
        out[7, tile] = torch.acosh(b)
        out[8, tile] = torch.atanh(u)
        out[9, tile] = torch.erfc(v)
    return out


def _inputs(dtype: torch.dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.cat([
        torch.randn(128, generator=g) * 4,
        torch.logspace(-30, 1.94, 128), -torch.logspace(-30, 1.94, 128),  # to past exp's overflow
        torch.linspace(0.5, 9.5, 128),  # erfc's tail, down to 1e-40
        torch.tensor([0.0, -0.0, 1e-38, 88.0, 89.0, 89.4, -89.4, 1e20, -3e38] + [0.0] * 119),
    ])
    unit = torch.cat([torch.rand(512, generator=g) * 2 - 1,
                      torch.tensor([-0.9999, -0.9994, 0.9994, 0.9999, -1e-20, 1e-20] + [0.5] * 122)])
    big = torch.cat([1 + torch.rand(512, generator=g) * 10, torch.logspace(0, 38, 128)])
    return tuple(t.to(dtype) for t in (x, unit, big))


def _expected(x, unit, big):
    d, u, b = x.double(), unit.double(), big.double()
    # float64 math, except atanh of +-1 and erfc, which float64 torch gives as well
    return torch.stack([torch.expm1(d), torch.sinh(d), torch.cosh(d), torch.asin(u), torch.acos(u),
                        torch.atan(d), torch.asinh(d), torch.acosh(b), torch.atanh(u), torch.erfc(d)])


def test_each_function_is_accurate_in_float32_and_lowers():
    args = _inputs(torch.float32)
    result = special_functions(*args)
    expected = _expected(*args).to(torch.float32)  # the float32 the exact value rounds to
    for row, name in enumerate(FUNCTIONS):
        # within the accuracy of the exp and log they are built on (interpret mode's unfused XLA
        # exp is ~30 ulps off at exp(-64)); values below float32's normal range (erfc's far
        # tail) flush to 0
        torch.testing.assert_close(result[row], expected[row], rtol=4e-6, atol=1.2e-38, equal_nan=True,
                                   msg=lambda text, name=name: f"{name}: {text}")
    check_tpu_lowering(special_functions, args)


def test_bfloat16_inputs_are_computed_in_float32_and_rounded_once():
    args = _inputs(torch.bfloat16)
    result = special_functions(*args)
    expected = _expected(*args).to(torch.bfloat16)
    torch.testing.assert_close(result, expected, rtol=2 ** -8, atol=1e-37, equal_nan=True)


@pallasite.kernel
def activations(x):
    (n,) = x.size()
    gelu = torch.empty_like(x)
    elu = torch.empty_like(x)
    for tile in hl.tile(n):
        gelu[tile] = torch.nn.functional.gelu(x[tile])
        elu[tile] = torch.nn.functional.elu(x[tile], alpha=0.7)
    return gelu, elu


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_exact_gelu_and_elu_lower_and_match_torch(dtype):
    x = torch.cat([torch.randn(384, generator=torch.Generator().manual_seed(1)) * 6,
                   torch.tensor([-40.0, -12.0, -1e-30, 0.0, 1e-30, 12.0, 40.0] + [0.0] * 121)]).to(dtype)
    gelu, elu = activations(x)
    tolerance = dict(rtol=1e-6, atol=1e-7) if dtype == torch.float32 else dict(rtol=2 ** -8, atol=1e-7)
    torch.testing.assert_close(gelu, torch.nn.functional.gelu(x.double()).to(dtype), **tolerance)
    torch.testing.assert_close(elu, torch.nn.functional.elu(x.double(), alpha=0.7).to(dtype), **tolerance)
    check_tpu_lowering(activations, (x,))


@pallasite.kernel
def named_like_the_helpers(x, idx):
    """User variables named like the runtime functions the generated module imports."""
    (n,) = x.size()
    out = torch.empty([3, n], dtype=x.dtype, device=x.device)
    for tile in hl.tile(n):
        elementwise, prod_by_halves = x[tile], x[tile].unsqueeze(0)
        integer_arg_extreme = idx[tile].unsqueeze(0)
        out[0, tile] = torch.expm1(elementwise)
        out[1, tile] = prod_by_halves.prod(0)
        out[2, tile] = integer_arg_extreme.argmax(0).to(x.dtype)
    return out


def test_user_names_do_not_shadow_the_runtime_functions_the_kernel_calls():
    x, idx = torch.randn(256), torch.randint(-5, 5, (256,), dtype=torch.int32)
    expected = torch.stack([torch.expm1(x), x, torch.zeros(256)])
    torch.testing.assert_close(named_like_the_helpers(x, idx), expected)


@pallasite.kernel
def inverse_erf(x):
    out = torch.empty(x.shape, dtype=x.dtype if x.dtype.is_floating_point else torch.float32, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.erfinv(x[tile])
    return out


def _ulps(a, b):
    return (a.view(torch.int32).long() - b.view(torch.int32).long()).abs()


def test_erfinv_is_within_3_ulps_of_torchs_up_to_the_poles():
    """XLA's erf_inv alone is 64 ulps off near +-1 (torch's is within half an ulp of the exact
    value there); one Newton step on erfc brings it to torch's."""
    tail = 1 - torch.logspace(-7.3, -1, 4000)
    x = torch.cat([torch.linspace(-1, 1, 40001), tail, -tail,
                   torch.tensor([1.0, -1.0, 1.5, -1.5, float("nan"), float("inf"), 0.0, -0.0, 1e-30])])
    result, expected = inverse_erf(x), torch.erfinv(x)
    finite = torch.isfinite(expected)
    assert torch.equal(result[~finite].nan_to_num(), expected[~finite].nan_to_num())
    assert _ulps(result[finite], expected[finite]).max() <= 3
    number = ~torch.isnan(expected)
    assert torch.equal(torch.signbit(result[number]), torch.signbit(expected[number]))  # -0.0 too


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int32])
def test_erfinv_of_16_bit_floats_and_integers_is_torchs(dtype):
    x = torch.linspace(-1, 1, 4001).to(dtype) if dtype != torch.int32 else torch.tensor([-2, -1, 0, 1, 2],
                                                                                         dtype=dtype)
    result, expected = inverse_erf(x), torch.erfinv(x)
    # float16 rounds torch's float32 value: 3 float32 ulps may cross a float16 rounding boundary
    torch.testing.assert_close(result, expected, rtol=2 ** -10 if dtype == torch.float16 else 0, atol=0,
                               equal_nan=True)
