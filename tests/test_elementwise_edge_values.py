"""Elementwise ops at the values where a shortcut goes wrong: NaN and infinities through a
product with a bool, 0/-0, the tails of erfc/acosh, exact powers of two from exp2, a bool
max over a partial tile's padding, torch's own special cases (`pow(x, 0.5)` is sqrt), and
the dtype mixes Mosaic cannot lower directly. Each case is a 1-D kernel over a partial last
tile, compared with eager torch (NaN where torch has NaN) and with reference mode; the
suite lowers every compiled variant for v5e/v6e/v7x."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import code_and_output, run_ref

NAN, INF = float("nan"), float("inf")


def _kernel(op, out_dtype):
    @pallasite.kernel(static_shapes=True)
    def elementwise(a, b):
        out = torch.empty(a.shape, dtype=out_dtype, device=a.device)
        for t in hl.tile(a.size(0)):
            out[t] = op(a[t], b[t])
        return out

    return elementwise


def _check(op, a, b=None, exact=False, atol=None, rtol=0.0):
    b = torch.zeros_like(a) if b is None else b
    expected = op(a, b)
    kernel = _kernel(op, expected.dtype)
    tolerance = {"atol": 0, "rtol": 0} if exact else {} if atol is None else {"atol": atol, "rtol": rtol}
    _, out = code_and_output(kernel, (a, b), block_sizes=[16])
    torch.testing.assert_close(out, expected, equal_nan=True, **tolerance)
    torch.testing.assert_close(run_ref(kernel, (a, b), block_sizes=[16]), expected, equal_nan=True, **tolerance)


def _spread(values, n=37, dtype=torch.float32):
    """`values` repeated to n elements (a partial last tile of 16)."""
    return torch.tensor(values * (n // len(values) + 1), dtype=dtype)[:n]


@pytest.mark.parametrize("op", [lambda a, b: a * b, lambda a, b: b * a, lambda a, b: torch.mul(a, b),
                                lambda a, b: b.multiply(a)], ids=["a*b", "b*a", "mul", "multiply"])
def test_a_product_with_a_bool_keeps_nan_and_infinities(op):
    a = _spread([NAN, INF, 1.5, -INF, -0.0, 2.0])
    b = _spread([False, False, True, False, True, True], dtype=torch.bool)
    _check(op, a, b, exact=True)


def test_a_bool_divided_by_negative_zero():
    a = _spread([False, True, False], dtype=torch.bool)
    _check(lambda a, b: a / -0.0, a, exact=True)
    _check(lambda a, b: torch.div(a, 0.0), a, exact=True)


def test_erfc_and_acosh_tails():
    _check(lambda a, b: torch.erfc(a), _spread([INF, 30.0, -INF, NAN, 10.5, 0.3, -2.0, 9.0]))
    _check(lambda a, b: torch.acosh(a), _spread([-1e4, -2.0, 0.5, 1.0, 1e30, INF, NAN, 3.0]))
    _check(lambda a, b: torch.acosh(a), _spread([-32768, -5, 1, 7, 32767], dtype=torch.int16))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_exp2_is_exact_at_integers_and_accurate_between(dtype):
    values = [100.0, 7.0, 2.0, 0.0, -3.0, 0.5, -0.75, 10.25, -INF, INF, NAN]
    if dtype == torch.float32:
        values += [127.0, 126.5, -126.0, 128.0, 1e10, -1e10]
    _check(lambda a, b: torch.exp2(a), _spread(values, dtype=dtype))
    _check(lambda a, b: torch.exp2(a), _spread([0.0, 1.0, 15.0, 3.0], dtype=dtype), exact=True)


def test_exp2_of_integers():
    _check(lambda a, b: torch.exp2(a), _spread([-8, 0, 5, 30, 100], dtype=torch.int8))


def test_pow_half_is_sqrt_as_in_torch():
    a = _spread([-INF, INF, 4.0, -1.0, 0.0, 2.0])
    _check(lambda a, b: torch.pow(a, 0.5), a, exact=True)
    _check(lambda a, b: a ** -0.5, a)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gelu_tanh_computes_in_float32(dtype):
    _check(lambda a, b: F.gelu(a, approximate="tanh"), _spread([-4.0, -3.0, -0.5, 0.0, 1.0, 3.0], dtype=dtype))


@pallasite.kernel(static_shapes=True)
def column_extremes(x):
    out = torch.empty([(x.size(0) + 7) // 8, x.size(1)], dtype=x.dtype, device=x.device)
    low = torch.empty([(x.size(0) + 7) // 8, x.size(1)], dtype=x.dtype, device=x.device)
    for tm in hl.tile(x.size(0), block_size=8):
        out[tm.id, :] = x[tm, :].amax(0)
        low[tm.id, :] = torch.max(x[tm, :], 0).values & x[tm, :].amin(0)
    return out, low


@pallasite.kernel(static_shapes=True)
def column_logsumexp(x):
    out = torch.empty([(x.size(0) + 7) // 8, x.size(1)], dtype=torch.float32, device=x.device)
    for tm in hl.tile(x.size(0), block_size=8):
        out[tm.id, :] = torch.logsumexp(x[tm, :], 0)
    return out


def test_bool_reductions_over_a_partial_tile_ignore_its_padding():
    x = torch.zeros(13, 4, dtype=torch.bool)
    x[0, 0] = x[9, 1] = True
    x[8:13, 3] = True
    chunks = [x[:8], x[8:]]
    expected = (torch.stack([c.amax(0) for c in chunks]), torch.stack([c.amax(0) & c.amin(0) for c in chunks]))
    for result in (code_and_output(column_extremes, (x,))[1], run_ref(column_extremes, (x,))):
        for got, want in zip(result, expected):
            torch.testing.assert_close(got, want)
    expected_lse = torch.stack([torch.logsumexp(c, 0) for c in chunks])
    torch.testing.assert_close(code_and_output(column_logsumexp, (x,))[1], expected_lse)
    torch.testing.assert_close(run_ref(column_logsumexp, (x,)), expected_lse)


def test_isfinite_of_16_bit_floats_and_bool_extremes_lower():
    for dtype in (torch.bfloat16, torch.float16):
        values = _spread([NAN, INF, -INF, 1.0, 0.0, -0.0], dtype=dtype)
        for predicate in (torch.isfinite, torch.isinf, torch.isnan, torch.signbit):
            _check(lambda a, b: predicate(a), values, exact=True)
    p = _spread([True, False, True, False], dtype=torch.bool)
    q = _spread([True, True, False, False], dtype=torch.bool)
    _check(lambda a, b: torch.maximum(a, b), p, q, exact=True)
    _check(lambda a, b: a.minimum(b), p, q, exact=True)


def test_casts_between_float16_and_bfloat16():
    _check(lambda a, b: a.bfloat16(), _spread([1.0, -2.5, 65504.0, 1e-3, NAN], dtype=torch.float16), exact=True)
    _check(lambda a, b: a.to(torch.float16), _spread([1.0, -2.5, 1e5, 1e-3, NAN], dtype=torch.bfloat16),
           exact=True)


def test_reflected_shifts():
    a = _spread([0, 1, 3, 7, 30], dtype=torch.int32)
    _check(lambda a, b: 1 << a, a, exact=True)
    _check(lambda a, b: 1024 >> a, a, exact=True)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.int8])
def test_hardtanh_of_integers(dtype):
    a = _spread([-3, 0, 2, 1, -1, 100], dtype=dtype)
    _check(lambda a, b: F.hardtanh(a), a, exact=True)
    _check(lambda a, b: F.hardtanh(a, -2, 5), a, exact=True)


def test_integer_and_bool_arithmetic_keeps_its_dtype():
    u = _spread([0, 1, 200, 255, 17], dtype=torch.uint8)
    v = _spread([3, 1, 2, 0, 9], dtype=torch.uint8)
    _check(lambda a, b: torch.addcmul(a, b, b, value=2), u, v, exact=True)
    _check(lambda a, b: torch.addcmul(a, b, b, value=0.5), u, v, exact=True)  # torch: value as uint8 (0)
    p = _spread([True, False, True], dtype=torch.bool)
    q = _spread([False, False, True], dtype=torch.bool)
    _check(lambda a, b: torch.add(a, b, alpha=True), p, q, exact=True)
    _check(lambda a, b: torch.add(a, b, alpha=-1), p, q, exact=True)  # torch: alpha as bool (True)


@pallasite.kernel(static_shapes=True)
def add_float_into_int(out, x):
    for t in hl.tile(out.size(0)):
        out[t] += x[t]
    return out


def test_an_in_place_update_that_torch_cannot_cast_is_refused():
    out, x = torch.zeros(37, dtype=torch.int32), torch.full((37,), 1.5)
    with pytest.raises(RuntimeError):
        out[:16] += x[:16]  # torch refuses: a float result in an int32 tensor
    with pytest.raises(exc.ShapeMismatch, match="int32"):
        code_and_output(add_float_into_int, (out, x), block_sizes=[16])
    with pytest.raises(exc.ShapeMismatch, match="int32"):
        run_ref(add_float_into_int, (out, x), block_sizes=[16])


@pallasite.kernel(static_shapes=True)
def accumulate_in_bf16(x, w):
    out = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    for t in hl.tile(x.size(0)):
        acc = hl.zeros([t], dtype=torch.bfloat16)
        for k in hl.static_range(3):
            acc += x[t] * w[k]  # float32 products: acc stays bfloat16, as torch's in-place add keeps it
        out[t] = acc
    return out


def test_an_in_place_update_keeps_its_dtype():
    generator = torch.Generator().manual_seed(5)
    x, w = torch.randn(37, generator=generator), torch.randn(3, generator=generator)
    expected = torch.zeros(37, dtype=torch.bfloat16)
    for k in range(3):
        expected += x * w[k]
    _, out = code_and_output(accumulate_in_bf16, (x, w), block_sizes=[16])
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(accumulate_in_bf16, (x, w), block_sizes=[16]), expected)


_SIXTEEN_BIT_FORMULAS = {
    "lerp": lambda a, b: torch.lerp(a, b, 0.3),
    "addcmul": lambda a, b: torch.addcmul(a, b, a, value=0.7),
    "hardsigmoid": lambda a, b: F.hardsigmoid(a * 4),
    "hardswish": lambda a, b: F.hardswish(a * 4),
    "log1p": lambda a, b: torch.log1p(a.abs()),
    "mish": lambda a, b: F.mish(a),
    "silu": lambda a, b: F.silu(a),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("formula", sorted(_SIXTEEN_BIT_FORMULAS))
def test_16_bit_formulas_round_once_as_torch(formula, dtype):
    """torch computes these in float32 for 16-bit floats and rounds once; rounding each step
    in 16 bits lands an ulp off (over float16's tolerance)."""
    generator = torch.Generator().manual_seed(6)
    a = (torch.randn(300, generator=generator) * 3).to(dtype)
    b = (torch.randn(300, generator=generator) * 3).to(dtype)
    _check(_SIXTEEN_BIT_FORMULAS[formula], a, b)


_SCALED_SUMS = {
    "rsub_alpha": lambda a, b: torch.rsub(a, b, alpha=-3),
    "sub_alpha": lambda a, b: a.sub(b, alpha=3),
    "add_alpha": lambda a, b: torch.add(a, b, alpha=0.3),
    "addcdiv": lambda a, b: torch.addcdiv(a, b, a.abs() + 1, value=0.7),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("formula", sorted(_SCALED_SUMS))
def test_16_bit_scaled_sums_round_once(formula, dtype):
    """a + alpha * b in float32, rounded once. torch itself is not consistent here (its sub
    rounds alpha * b to 16 bits first, its add fuses the multiply-add), so where the sum
    cancels, the result may be a 16-bit ulp of the operands' scale from torch's: that is the
    tolerance beside torch's own for the dtype (rounding each step, as before, was not within it)."""
    generator = torch.Generator().manual_seed(6)
    a = (torch.randn(300, generator=generator) * 3).to(dtype)
    b = (torch.randn(300, generator=generator) * 3).to(dtype)
    ulp_at_scale = torch.finfo(dtype).eps * float(torch.cat([a, b]).abs().max())
    _check(_SCALED_SUMS[formula], a, b, atol=ulp_at_scale, rtol={torch.bfloat16: 1.6e-2, torch.float16: 1e-3}[dtype])


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32])
@pytest.mark.parametrize("op", [lambda a, b: a.abs() // 2, lambda a, b: torch.sign(torch.abs(a)),
                                lambda a, b: (a.abs() < 0).to(a.dtype)])
def test_abs_of_the_lowest_integer_is_itself_as_in_torch(op, dtype):
    """torch's abs(-128) of int8 is -128 (it wraps); XLA folded `abs(x) < 0` to False and
    `abs(x) // 2` of it to 64 (trial Z)."""
    lowest = torch.iinfo(dtype).min
    _check(op, torch.tensor([lowest, -7, 7, 0, lowest + 1] * 4, dtype=dtype), exact=True)


@pallasite.kernel
def row_extremes(x):
    out = torch.empty([x.size(0)], dtype=torch.float32)
    for t in hl.tile(x.size(0)):
        out[t] = x[t, :].amax(1) + x[t, :].argmin(1)
    return out


def test_an_extreme_over_a_zero_size_dim_raises_as_torch():
    """amax over a dim of size 0 returned -inf compiled (trial Z); torch has no answer."""
    for run in (lambda x: code_and_output(row_extremes, (x,)), lambda x: run_ref(row_extremes, (x,))):
        with pytest.raises(exc.ShapeMismatch, match="has size 0"):
            run(torch.randn(5, 0))


@pallasite.kernel
def softmax_of_nothing(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t, :] = torch.softmax(x[t, :], dim=1) + F.log_softmax(x[t, :], dim=1)
    return out


def test_a_softmax_over_a_zero_size_dim_is_empty_as_in_torch():
    """The zero-size extreme check refused softmax's own amax (trial AA); torch returns []."""
    x = torch.randn(5, 0)
    torch.testing.assert_close(code_and_output(softmax_of_nothing, (x,))[1], x)
    torch.testing.assert_close(run_ref(softmax_of_nothing, (x,)), x)


@pallasite.kernel
def ones_of_tiles(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t, :] = x[t, :] + torch.ones([t, x.size(1)])
    return out


def test_a_torch_factory_sized_by_a_tile_is_a_clear_error():
    """torch's argument parser met a tile and raised a bare TypeError (trial AA)."""
    with pytest.raises(exc.UnsupportedOperation, match="hl.zeros") as info:
        code_and_output(ones_of_tiles, (torch.randn(8, 4),))
    assert "torch.ones([t, x.size(1)])" in str(info.value)
