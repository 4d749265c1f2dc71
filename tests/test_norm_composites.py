"""Norms and small reductions recorded as registry ops (ir/ops/norms.py): F.rms_norm,
torch.linalg.vector_norm, torch.norm / Tensor.norm, F.normalize, torch.count_nonzero and
torch.aminmax. Each against eager torch and reference mode, over partial tiles (the
padding of a reduced axis must not count), under every loop type where a loop reduces."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref

# float32 sums in another order than torch's: a 16-bit result near a rounding boundary may
# land one step off (torch's default tolerance for the dtype covers one step)
_TOLERANCE = {torch.float32: {"rtol": 2e-6, "atol": 2e-6}, torch.bfloat16: {}, torch.float16: {}}


@pallasite.kernel
def row_norms(x, w):
    a, b, c = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    n = torch.empty([x.size(0), 4], dtype=x.dtype)
    for t in hl.tile(x.size(0)):
        v = x[t, :]
        a[t, :] = F.rms_norm(v, [v.size(1)], w[:], eps=1e-4)
        b[t, :] = F.rms_norm(v, (v.size(1),))
        c[t, :] = F.normalize(v, dim=1)
        n[t, :] = torch.stack([torch.linalg.vector_norm(v, dim=-1), v.norm(1, dim=1),
                               torch.norm(v, float("inf"), 1), torch.linalg.vector_norm(v, 3.0, dim=1)], 1)
    return a, b, c, n


def _expected_row_norms(x, w):
    norms = torch.stack([torch.linalg.vector_norm(x, dim=-1), x.norm(1, dim=1), torch.norm(x, float("inf"), 1),
                         torch.linalg.vector_norm(x, 3.0, dim=1)], 1)
    return F.rms_norm(x, [x.size(1)], w, eps=1e-4), F.rms_norm(x, (x.size(1),)), F.normalize(x, dim=1), norms


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_row_norms_are_torchs(dtype):
    torch.manual_seed(0)  # fixed inputs: the outcome depends on nothing else
    x, w = torch.randn(20, 37).to(dtype), torch.randn(37).to(dtype)
    expected = _expected_row_norms(x, w)
    _, compiled = code_and_output(row_norms, (x, w), block_sizes=[8])
    for result in (compiled, run_ref(row_norms, (x, w), block_sizes=[8])):
        for got, want in zip(result, expected):
            torch.testing.assert_close(got, want, **_TOLERANCE[dtype])


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # torch's own, for `expected`
def test_rms_norm_takes_a_float32_weight_beside_a_16_bit_input():
    """Mixed dtypes: torch multiplies the weight in float32 and rounds once to x's dtype."""
    torch.manual_seed(0)  # fixed inputs: the outcome depends on nothing else
    x, w = torch.randn(16, 64).to(torch.bfloat16), torch.randn(64)

    @pallasite.kernel
    def mixed(x, w):
        out = torch.empty_like(x)
        for t in hl.tile(x.size(0)):
            out[t, :] = F.rms_norm(x[t, :], [x.size(1)], w[:])
        return out

    expected = F.rms_norm(x, [64], w)
    assert expected.dtype == torch.bfloat16
    torch.testing.assert_close(code_and_output(mixed, (x, w))[1], expected)
    torch.testing.assert_close(run_ref(mixed, (x, w)), expected)


@pallasite.kernel
def blocked_norms(x):
    m, n = x.size()
    out = torch.empty([m, 3], dtype=torch.float32)
    for tm in hl.tile(m):
        squares = hl.zeros([tm], dtype=torch.float32)
        peak = hl.zeros([tm], dtype=torch.float32)
        count = hl.zeros([tm], dtype=torch.int32)
        for tn in hl.tile(n):
            v = x[tm, tn]
            squares = squares + torch.linalg.vector_norm(v, dim=1) ** 2
            peak = torch.maximum(peak, torch.aminmax(v.abs(), dim=1).max)
            count = count + torch.count_nonzero(v > 0.5, dim=1)
        out[tm, :] = torch.stack([squares.sqrt(), peak, count.float()], 1)
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_norms_over_a_padded_inner_tile_under_every_loop_type(loop_type):
    torch.manual_seed(0)  # fixed inputs: the outcome depends on nothing else
    x = torch.randn(16, 300)
    expected = torch.stack([torch.linalg.vector_norm(x, dim=1), x.abs().amax(1),
                            torch.count_nonzero(x > 0.5, dim=1).float()], 1)
    for result in (code_and_output(blocked_norms, (x,), block_sizes=[8, 128], pallas_loop_type=loop_type)[1],
                   run_ref(blocked_norms, (x,), block_sizes=[8, 128], pallas_loop_type=loop_type)):
        torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-5)


def test_aminmax_of_integers_and_whole_count_nonzero():
    torch.manual_seed(0)  # fixed inputs: the outcome depends on nothing else
    x = torch.randint(-50, 50, (24, 40), dtype=torch.int32)

    @pallasite.kernel
    def ranges(x):
        low, high = torch.empty([x.size(0)], dtype=x.dtype), torch.empty([x.size(0)], dtype=x.dtype)
        zeros = torch.empty([x.size(0)], dtype=torch.int32)
        for t in hl.tile(x.size(0)):
            extremes = torch.aminmax(x[t, :], dim=1)
            low[t], high[t] = extremes.min, extremes.max
            zeros[t] = x.size(1) - torch.count_nonzero(x[t, :], 1)
        return low, high, zeros

    expected = (x.amin(1), x.amax(1), (x == 0).sum(1).int())
    for result in (code_and_output(ranges, (x,), block_sizes=[16])[1], run_ref(ranges, (x,), block_sizes=[16])):
        for got, want in zip(result, expected):
            torch.testing.assert_close(got, want)


def test_norm_refusals_name_the_line():
    @pallasite.kernel
    def nuclear(x):
        out = torch.empty([x.size(0)], dtype=x.dtype)
        for t in hl.tile(x.size(0)):
            out[t] = torch.norm(x[t, :], "nuc")
        return out

    with pytest.raises(exc.UnsupportedOperation, match="nuclear norm") as info:
        code_and_output(nuclear, (torch.randn(8, 16),))
    assert 'torch.norm(x[t, :], "nuc")' in str(info.value)

    @pallasite.kernel
    def integer_rms(x):
        out = torch.empty(x.shape, dtype=torch.float32)
        for t in hl.tile(x.size(0)):
            out[t, :] = F.rms_norm(x[t, :], [x.size(1)])
        return out

    for run in (code_and_output, run_ref):
        with pytest.raises(exc.UnsupportedDtype) as info:
            run(integer_rms, (torch.ones(8, 16, dtype=torch.int32),))
        assert "F.rms_norm(x[t, :], [x.size(1)])" in str(info.value)


@pallasite.kernel
def integer_vector_norm(x):
    out = torch.empty([x.size(0)], dtype=torch.float32)
    for t in hl.tile(x.size(0)):
        out[t] = torch.linalg.vector_norm(x[t, :], dim=1)
    return out


@pallasite.kernel
def vector_norm_in_int32(x):
    out = torch.empty([x.size(0)], dtype=torch.float32)
    for t in hl.tile(x.size(0)):
        out[t] = torch.linalg.vector_norm(x[t, :], 2, 1, dtype=torch.int32).float()
    return out


def test_a_norm_of_integers_is_torchs_dtype_refusal_named_as_written():
    """It was ShapeMismatch, and named `torch.linalg_vector_norm` (torch's internal name); so
    was an integer dtype= (trial HH). The hint does not suggest the dtype it has."""
    for run in (code_and_output, run_ref):
        with pytest.raises(exc.UnsupportedDtype, match=r"^torch\.linalg\.vector_norm of int32: torch refuses") as info:
            run(integer_vector_norm, (torch.ones(8, 16, dtype=torch.int32),))
        assert ".to(torch.int32)" not in str(info.value)
        with pytest.raises(exc.UnsupportedDtype, match="dtype should be floating point"):
            run(vector_norm_in_int32, (torch.ones(8, 16),))
