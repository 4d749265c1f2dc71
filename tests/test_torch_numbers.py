"""Python numbers and mixed dtypes meeting tiles as torch's CPU kernels take them (trials BB-EE):
a number rounded to a 16-bit tile's dtype or wrapped to an integer tile's, int arguments as
numbers, what torch's kernels refuse, and formulas in torch's order (division, rounding,
nan_to_num, logit, leaky_relu, addcdiv). Both modes, bit for bit where torch is exact."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import code_and_output, run_ref


def _both_modes(kernel, args, **config):
    _, compiled = code_and_output(kernel, args, **config)
    return compiled, run_ref(kernel, args, **config)


@pallasite.kernel
def powers_and_xlogy(x, s: float):
    out = torch.empty([6, *x.shape], dtype=x.dtype, device=x.device)
    for t in hl.tile(x.size(0)):
        v = x[t]
        out[0, t] = v ** 0.257
        out[1, t] = 1.001 ** v
        out[2, t] = torch.pow(s, v)
        out[3, t] = torch.xlogy(v, 0.1)
        out[4, t] = torch.xlogy(v, s)
        out[5, t] = torch.xlogy(v, v + 1)
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_number_beside_a_16_bit_tile_in_pow_and_xlogy_is_rounded_as_torch_does(dtype):
    """Trial CC: bf16 `1.001 ** x` was 2.72 at x = 1000 (torch rounds 1.001 to 1.0: 1.0), and
    `x ** 0.257`, `xlogy(x, 0.1)` used the number in float32; torch rounds it to the tile's
    dtype first. 16-bit xlogy rounds the log, then the product (torch's kernel), bit for bit."""
    x = torch.linspace(0.01, 1000, 512).to(dtype)
    s = 1.001
    expected = torch.stack([x ** 0.257, 1.001 ** x, torch.pow(s, x), torch.xlogy(x, 0.1), torch.xlogy(x, s),
                            torch.xlogy(x, x + 1)])
    for result in _both_modes(powers_and_xlogy, (x, s)):
        torch.testing.assert_close(result, expected, rtol=0, atol=0)


@pallasite.kernel
def integers_beside_bf16(n, x):
    out = torch.empty([4, *x.shape], dtype=x.dtype, device=x.device)
    for t in hl.tile(x.size(0)):
        out[0, t] = n[t] / x[t]
        out[1, t] = torch.hypot(n[t], x[t])
        out[2, t] = torch.atan2(x[t], n[t])
        out[3, t] = torch.lerp(x[t], n[t].to(x.dtype), 0.3) + torch.addcmul(x[t], n[t], x[t], value=0.5)
    return out


def test_an_integer_tile_meets_a_16_bit_one_converted_to_its_dtype_first():
    """Trial CC: `-285 / bf16 0.7539` was -378 (torch converts -285 to bfloat16, -284: -376) in the
    ops computed in float32 and rounded once (/, hypot, atan2, ...)."""
    n = torch.tensor([-285, 257, 1001, 3, 12345, -77, 513, 0] * 16, dtype=torch.int32)
    x = torch.tensor([0.75390625, 1.0, -2.5, 0.3, 7.0, -1.5, 3.0, 0.125] * 16).to(torch.bfloat16)
    expected = torch.stack([n / x, torch.hypot(n, x), torch.atan2(x, n),
                            torch.lerp(x, n.to(x.dtype), 0.3) + torch.addcmul(x, n, x, value=0.5)])
    for result in _both_modes(integers_beside_bf16, (n, x)):
        torch.testing.assert_close(result, expected, rtol=0, atol=0)


def _refused_forms():
    def kernel_of(form):
        @pallasite.kernel
        def refused(x):
            out = torch.zeros([x.size(0)])
            for t in hl.tile(x.size(0)):
                out[t] = form(x[t]).float()
            return out
        return refused

    return {"bool - 5": kernel_of(lambda v: (v > 0) - 5), "7 - bool": kernel_of(lambda v: 7 - (v > 0)),
            "sub(x, bool)": kernel_of(lambda v: torch.sub(v, v > 0)),
            "threshold(bool)": kernel_of(lambda v: F.threshold(v > 0, 1, 0)),
            "threshold(f16, 70000)": kernel_of(lambda v: F.threshold(v.half(), 70.0, 70000.0)),
            "heaviside(f32, f16)": kernel_of(lambda v: torch.heaviside(v, v.half())),
            "addcdiv(bool, bool, int)": kernel_of(lambda v: torch.addcdiv(v > 0, v > 0, v.int())),
            "True ** bool": kernel_of(lambda v: True ** (v > 0)),
            "bool ** bool": kernel_of(lambda v: (v > 0) ** (v < 1))}


@pytest.mark.parametrize("form", sorted(_refused_forms()))
def test_what_torchs_cpu_kernel_refuses_is_refused_in_both_modes(form):
    """Trials CC and EE: a bool tile minus a number (or a number minus it), F.threshold of a bool
    tile or of float16 with a fill it cannot hold, heaviside of two dtypes and addcdiv of integer
    factors answered compiled, where torch's CPU kernel raises (meta tensors skip that check);
    reference mode raised ShapeMismatch for a dtype error."""
    kernel = _refused_forms()[form]
    x = torch.randn(8)
    for run in (lambda: code_and_output(kernel, (x,)), lambda: run_ref(kernel, (x,))):
        with pytest.raises(exc.UnsupportedDtype, match="torch refuses"):
            run()


@pallasite.kernel
def square_roots_by_power(x):
    out = torch.empty([2, *x.shape], dtype=x.dtype)
    for t in hl.tile(x.size(0)):
        out[0, t] = x[t] ** 0.5
        out[1, t] = torch.pow(x[t], -0.5)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_power_of_one_half_at_negative_infinity_and_zero_is_torchs(dtype):
    """Trial BB: float16 `x ** 0.5` at -inf was NaN compiled; torch's float16 kernel is pow
    itself (inf, and +0 at -0), where float32 and bfloat16 take it as sqrt (NaN, -0)."""
    x = torch.tensor([-math.inf, -0.0, 0.0, 4.0, -1.0, math.inf, 0.25, 2.0], dtype=dtype)
    expected = torch.stack([x ** 0.5, torch.pow(x, -0.5)])
    for result in _both_modes(square_roots_by_power, (x,)):
        torch.testing.assert_close(result, expected, rtol=0, atol=0, equal_nan=True)
        numbers = ~expected.isnan()  # a zero's sign (a NaN's is nobody's)
        assert torch.equal(result.signbit()[numbers], expected.signbit()[numbers])


@pallasite.kernel
def hard_activations(x):
    out = torch.empty([2, x.size(0)], dtype=x.dtype)
    for t in hl.tile(x.size(0)):
        out[0, t] = F.hardswish(x[t])
        out[1, t] = F.hardsigmoid(x[t])
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_hardswish_and_hardsigmoid_are_torchs_formulas_bit_for_bit(dtype):
    """Trial BB: hardswish of |x| > 5.7e37 was x (torch: inf, x * 6 overflows first), and
    x / 6 + 0.5 differed from torch's (x + 3) / 6 by an ulp in ~25% of float32 lanes."""
    torch.manual_seed(0)
    x = (torch.randn(4096) * 4).to(dtype)
    if dtype == torch.float32:
        x[:3] = torch.tensor([6e37, -6e37, 1e38])
    expected = torch.stack([F.hardswish(x), F.hardsigmoid(x)])
    for result in _both_modes(hard_activations, (x,)):
        torch.testing.assert_close(result, expected, rtol=0, atol=0)


@pallasite.kernel
def rounded_to_decimals(x):
    out = torch.empty([3, x.size(0)], dtype=x.dtype)
    for t in hl.tile(x.size(0)):
        out[0, t] = torch.round(x[t], decimals=1)
        out[1, t] = torch.round(x[t], decimals=3)
        out[2, t] = torch.round(x[t], decimals=-1)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_round_to_decimals_divides_as_torch_does(dtype):
    """Trial EE: float32 round(3.14159, decimals=1) was 3.1000001 (torch 3.0999999), off in ~20%
    of lanes (57% at decimals=3): the scale-back division became a multiply by 0.1."""
    torch.manual_seed(0)
    x = (torch.randn(4096) * 30).to(dtype)
    x[0] = 3.14159
    expected = torch.stack([torch.round(x, decimals=1), torch.round(x, decimals=3), torch.round(x, decimals=-1)])
    for result in _both_modes(rounded_to_decimals, (x,)):
        torch.testing.assert_close(result, expected, rtol=0, atol=0)


_BIG = 2654435761
_WRAPPED_FORMS = {"lt": lambda v: v < _BIG, "ge": lambda v: v >= -3000000000, "floordiv": lambda v: v // _BIG,
                  "mod": lambda v: v % _BIG, "fmod": lambda v: torch.fmod(v, _BIG),
                  "trunc": lambda v: torch.div(v, _BIG, rounding_mode="trunc"), "rshift": lambda v: v >> _BIG,
                  "lt_negative": lambda v: v < -1, "ge_300": lambda v: v >= 300, "times_negative": lambda v: v * -1}


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.int8, torch.uint8])
def test_a_number_past_an_integer_tiles_dtype_is_wrapped_as_torch_wraps_it(dtype):
    """Trial DD: int32 `x < 2654435761` was refused ("needs the number itself") where torch wraps
    the number to the tensor's dtype (x < -1640531535: all False), as it does for //, %, fmod,
    shifts and uint8 `x < -1` (x < 255); `x % 2654435761` was a range error and uint8 literals
    past the dtype an overflow in JAX."""
    x = torch.tensor([0, 5, -7, 100, 127, -128, 77, 3], dtype=torch.int32).to(dtype)

    @pallasite.kernel
    def wrapped(x):
        out = torch.empty([len(_WRAPPED_FORMS), x.size(0)], dtype=torch.int32)
        for t in hl.tile(x.size(0)):
            for row, form in enumerate(_WRAPPED_FORMS.values()):
                out[row, t] = form(x[t]).int()
        return out

    expected = torch.stack([form(x).int() for form in _WRAPPED_FORMS.values()])
    for result in _both_modes(wrapped, (x,)):
        assert torch.equal(result, expected)


@pallasite.kernel
def sixteen_bit_by_int_arguments(x, c: int):
    out = torch.empty([4, x.size(0)], dtype=x.dtype)
    for t in hl.tile(x.size(0)):
        out[0, t] = x[t] // c
        out[1, t] = torch.div(x[t], c, rounding_mode="trunc")
        out[2, t] = x[t] ** c
        out[3, t] = c / x[t]
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_an_int_argument_beside_a_16_bit_tile_is_a_number_as_torch_takes_it(dtype):
    """Trials DD and EE: with c an int argument, bf16 `1000 // c` was 1 at c = 1001 (c rounded to
    bf16 first; torch takes the number: 0), `x ** c` -inf where torch rounds the exponent to the
    dtype (inf), and `c / x` a true division where torch multiplies by the reciprocal."""
    x = torch.tensor([1000.0, 999.0, -1096.0, 500.0, -1104.0, 7.0, 0.3, -2.5]).to(dtype)
    for c in (1001, 3):
        expected = torch.stack([x // c, torch.div(x, c, rounding_mode="trunc"), x ** c, c / x])
        rows = [0, 1, 2, 3] if c == 1001 else [0, 1, 3]  # bf16 x ** 3: torch rounds x * x first (an ulp)
        for result in _both_modes(sixteen_bit_by_int_arguments, (x, c)):
            torch.testing.assert_close(result[rows], expected[rows], rtol=0, atol=0, equal_nan=True)


def test_literal_zero_divisors_bools_beside_big_numbers_and_their_float_ops():
    """Trial EE: `x % 0` and int8 `x // 65536` (0 in int8) answered compiled where torch raises
    ZeroDivisionError; a bool tile against 2**31 + 1 wrapped the number (`b <= 2**31 + 1` False,
    torch True: refused now); `(2**31 + 1) / b`, `7 ** b` and `torch.div(x, True, ...)` crashed
    in JAX or the generated module."""
    @pallasite.kernel
    def by_literal_zero(x):
        out = torch.empty_like(x)
        for t in hl.tile(x.size(0)):
            out[t] = x[t] % 0
        return out

    @pallasite.kernel
    def bool_against_big(b):
        out = torch.empty(b.shape, dtype=torch.bool)
        for t in hl.tile(b.size(0)):
            out[t] = b[t] <= 2**31 + 1
        return out

    @pallasite.kernel
    def bool_float_ops(b, x):
        out = torch.empty([3, b.size(0)], dtype=torch.float32)
        for t in hl.tile(b.size(0)):
            out[0, t] = (2**31 + 1) / b[t]
            out[1, t] = (7 ** b[t]).float()
            out[2, t] = torch.div(x[t], True, rounding_mode="trunc").float()
        return out

    x, b = torch.tensor([5, -3, 7], dtype=torch.int16), torch.tensor([True, False, True])
    with pytest.raises(exc.ShapeMismatch, match="by 0, where torch raises ZeroDivisionError"):
        code_and_output(by_literal_zero, (x,))
    with pytest.raises(exc.UnsupportedDtype, match="2147483649 does not fit int32"):
        code_and_output(bool_against_big, (b,))
    expected = torch.stack([(2**31 + 1) / b, (7 ** b).float(), torch.div(x, True, rounding_mode="trunc").float()])
    for result in _both_modes(bool_float_ops, (b, x)):
        torch.testing.assert_close(result, expected)


@pallasite.kernel
def nans_replaced(x):
    out = torch.empty([2, x.size(0)], dtype=x.dtype)
    for t in hl.tile(x.size(0)):
        out[0, t] = torch.nan_to_num(x[t], nan=1e5)
        out[1, t] = x[t].nan_to_num(nan=-2.0, posinf=7.0)
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_nan_to_num_converts_its_numbers_to_the_dtype_as_torch_does(dtype):
    """Trial EE: float16 nan_to_num(nan=1e5) was 65504 (jnp.nan_to_num made the NaN's inf the
    largest finite number); torch converts 1e5 to float16's inf and keeps it."""
    x = torch.tensor([float("nan"), 1.0, float("inf"), -float("inf"), -0.5]).to(dtype)
    expected = torch.stack([torch.nan_to_num(x, nan=1e5), x.nan_to_num(nan=-2.0, posinf=7.0)])
    for result in _both_modes(nans_replaced, (x,)):
        torch.testing.assert_close(result, expected, rtol=0, atol=0)


@pallasite.kernel
def logits_slopes_and_quotients(x, t1, t2):
    out = torch.empty([5, x.size(0)], dtype=x.dtype)
    for t in hl.tile(x.size(0)):
        out[0, t] = torch.logit(x[t], eps=0.6)
        out[1, t] = torch.logit(x[t], eps=1 / 3)
        out[2, t] = torch.logit(x[t], eps=-0.1)
        out[3, t] = F.leaky_relu(x[t] - 2, 0.1)
        out[4, t] = torch.addcdiv(x[t], t1[t], t2[t], value=0.37)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_logit_eps_leaky_slope_and_addcdiv_order_are_torchs(dtype):
    """Trial DD: logit with eps > 0.5 clamped as torch.clamp does (-0.405; torch's kernel takes
    the low bound first: +0.405) and its eps unrounded in 16 bits; a 16-bit leaky_relu rounded
    its slope first (-0.2998 for -3 * 0.1, torch -0.30005); addcdiv took v * (t1 / t2), torch
    (v * t1) / t2."""
    torch.manual_seed(0)
    x = torch.tensor([0.5, 0.1, 0.9, 3.0, -0.5, 0.0, 1.0, 0.3] * 4).to(dtype)
    t1, t2 = torch.randn(32).to(dtype), torch.randn(32).to(dtype)
    expected = torch.stack([torch.logit(x, eps=0.6), torch.logit(x, eps=1 / 3), torch.logit(x, eps=-0.1),
                            F.leaky_relu(x - 2, 0.1), torch.addcdiv(x, t1, t2, value=0.37)])
    tolerance = 1e-6 if dtype == torch.float32 else 0  # float32's log: an ulp from torch's
    for result in _both_modes(logits_slopes_and_quotients, (x, t1, t2)):
        torch.testing.assert_close(result, expected, rtol=tolerance, atol=tolerance, equal_nan=True)


@pallasite.kernel
def negative_bases(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = (-3) ** x[t]
    return out


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int32])
def test_a_number_base_past_the_exponents_dtype_is_wrapped_as_torch_converts_it(dtype):
    """Trial EE: `(-3) ** uint8_tile` raised numpy's OverflowError; torch converts -3 to uint8
    (253) and raises that to each power."""
    x = torch.tensor([0, 1, 2, 3, 5, 7], dtype=dtype)
    for result in _both_modes(negative_bases, (x,)):
        assert torch.equal(result, (-3) ** x)


@pallasite.kernel
def bool_powers(x):
    out = torch.empty([3, *x.shape], dtype=torch.int32, device=x.device)
    for t in hl.tile(x.size(0)):
        v = x[t]
        out[0, t] = (v ** True).to(torch.int32)
        out[1, t] = (v ** False).to(torch.int32)
        out[2, t] = (v ** 2).to(torch.int32)
    return out


def test_a_bool_tile_to_a_bool_power_is_a_bool_as_torch_computes_it():
    """`bool_tile ** True` crashed in Pallas' store (a bool ref given int32: Mosaic has no bool
    power); torch's answer is a bool, `x or not e` (a bool tile exponent torch refuses)."""
    x = torch.tensor([True, False, False, True, True])
    expected = torch.stack([x ** True, x ** False, x ** 2]).to(torch.int32)
    for result in _both_modes(bool_powers, (x,)):
        assert torch.equal(result, expected)
