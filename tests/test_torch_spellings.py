"""torch spellings whose arguments mean something other than their position suggests:
`rsub`'s alpha scales `input`, `Tensor.where(condition, other)` is `where(condition, self,
other)`, `round(decimals=)` scales in float32 as torch does for 16-bit floats, keyword
arguments under torch's own names (`pow(exponent=)`), and `dtype=` of the accumulating
reductions (a cast, then the reduction). Each compiled result is compared with torch and
with reference mode; the suite lowers every compiled variant for v5e/v6e/v7x."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.testing import code_and_output, run_ref


def _check(kernel, args, expected, exact=False):
    _, out = code_and_output(kernel, args)
    tolerance = {"atol": 0, "rtol": 0} if exact else {}
    torch.testing.assert_close(out, expected, **tolerance)
    torch.testing.assert_close(run_ref(kernel, args), expected, **tolerance)


@pallasite.kernel(static_shapes=True)
def rsub_tensors(x, y):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = torch.rsub(x[t], y[t], alpha=2)
    return out


@pallasite.kernel(static_shapes=True)
def rsub_number(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = torch.rsub(x[t], 2.0, alpha=3)
    return out


@pallasite.kernel(static_shapes=True)
def rsub_keyword(x, y):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = torch.rsub(x[t], other=y[t], alpha=0.5)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_rsub_alpha_scales_input(dtype):
    generator = torch.Generator().manual_seed(0)
    x = torch.randint(-9, 10, (200,), generator=generator).to(dtype)
    y = torch.randint(-9, 10, (200,), generator=generator).to(dtype)
    _check(rsub_tensors, (x, y), torch.rsub(x, y, alpha=2), exact=True)
    if dtype.is_floating_point:
        _check(rsub_number, (x,), torch.rsub(x, 2.0, alpha=3), exact=True)
        _check(rsub_keyword, (x, y), torch.rsub(x, other=y, alpha=0.5), exact=True)


@pallasite.kernel(static_shapes=True)
def where_method_bool(a, b):
    out = torch.empty(a.shape, dtype=torch.bool, device=a.device)
    for t in hl.tile(a.size(0)):
        keep = a[t] > 0
        out[t] = keep.where(b[t] > 0, True)
    return out


@pallasite.kernel(static_shapes=True)
def where_method_relu(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        v = x[t]
        out[t] = v.where(v > 0, 0.0)
    return out


@pallasite.kernel(static_shapes=True)
def where_method_keywords(x, y):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t].where(condition=y[t] < 0, other=y[t])
    return out


def test_tensor_where_is_where_of_its_condition_self_and_other():
    generator = torch.Generator().manual_seed(1)
    a, b = torch.randn(300, generator=generator), torch.randn(300, generator=generator)
    _check(where_method_bool, (a, b), (a > 0).where(b > 0, True), exact=True)
    _check(where_method_relu, (a,), a.where(a > 0, 0.0), exact=True)
    _check(where_method_keywords, (a, b), a.where(condition=b < 0, other=b), exact=True)


@pallasite.kernel(static_shapes=True)
def round_to_tenths(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = torch.round(x[t], decimals=1)
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_round_decimals_scales_as_torch(dtype):
    generator = torch.Generator().manual_seed(2)
    x = (torch.randn(600, generator=generator) * 5).to(dtype)
    x[0] = -3.859375
    # 16-bit results match torch exactly; float32 ones within its tolerance (XLA divides by
    # the scale through its reciprocal, a last-bit difference)
    _check(round_to_tenths, (x,), torch.round(x, decimals=1), exact=dtype != torch.float32)


@pallasite.kernel(static_shapes=True)
def pow_keywords(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = torch.pow(x[t], exponent=2) + x[t].pow(exponent=3)
    return out


def test_pow_takes_torch_keyword():
    x = torch.randn(130, generator=torch.Generator().manual_seed(3))
    _check(pow_keywords, (x,), torch.pow(x, exponent=2) + x.pow(exponent=3))


@pallasite.kernel(static_shapes=True)
def reductions_with_dtype(x):
    m, n = x.size()
    sums = torch.empty([m], dtype=torch.float32, device=x.device)
    means = torch.empty([m], dtype=torch.float32, device=x.device)
    prods = torch.empty([m], dtype=torch.float32, device=x.device)
    for t in hl.tile(m):
        v = x[t, :]
        sums[t] = v.sum(1, dtype=torch.float32)
        means[t] = torch.mean(v, dim=-1, dtype=torch.float32)
        prods[t] = torch.prod(v[:, :4], 1, dtype=torch.float32)
    return sums, means, prods


@pallasite.kernel(static_shapes=True)
def integer_sum_as_float(x):
    m, n = x.size()
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for t in hl.tile(m):
        out[t] = torch.sum(x[t, :], dim=1, dtype=torch.float32)
    return out


def test_reduction_dtype_casts_then_reduces():
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(24, 256, generator=generator).to(torch.bfloat16)
    expected = (x.sum(1, dtype=torch.float32), torch.mean(x, dim=-1, dtype=torch.float32),
                torch.prod(x[:, :4], 1, dtype=torch.float32))
    _, out = code_and_output(reductions_with_dtype, (x,))
    for got, reference, want in zip(out, run_ref(reductions_with_dtype, (x,)), expected):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(reference, want, atol=1e-4, rtol=1e-4)
    ints = torch.randint(-100, 100, (16, 300), generator=generator, dtype=torch.int32)
    _check(integer_sum_as_float, (ints,), torch.sum(ints, dim=1, dtype=torch.float32))
