"""torch functions recorded as a few registry ops (ir/ops/pointwise_composites.py):
F.softsign, F.hardshrink, F.softshrink, F.threshold, torch.fmax/fmin, Tensor.type_as, torch.nansum, F.selu, F.celu,
torch.logit and torch.isclose.
Each against eager torch (NaN where torch has NaN) and reference mode, over a partial tile,
under every loop type where a loop is involved; the suite lowers every variant."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def pointwise(x, y):
    a, b, c = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    d, e, f = torch.empty_like(x), torch.empty_like(x), torch.empty(x.shape, dtype=torch.bfloat16)
    for t in hl.tile(x.size(0)):
        v, w = x[t, :], y[t, :]
        a[t, :] = F.softsign(v)
        b[t, :] = F.hardshrink(v, 0.3) + F.hardshrink(w)
        c[t, :] = F.threshold(v, 0.1, -2.0)
        d[t, :] = torch.fmax(v, w)
        e[t, :] = torch.fmin(v, w)
        f[t, :] = v.type_as(f[t, :])
    return a, b, c, d, e, f


def _expected_pointwise(x, y):
    return (F.softsign(x), F.hardshrink(x, 0.3) + F.hardshrink(y), F.threshold(x, 0.1, -2.0),
            torch.fmax(x, y), torch.fmin(x, y), x.to(torch.bfloat16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_pointwise_composites_are_torchs_nan_included(dtype):
    x, y = torch.randn(20, 37).to(dtype), torch.randn(20, 37).to(dtype)
    x[0, 0] = y[1, 1] = x[2, 2] = y[2, 2] = float("nan")
    x[3, :4] = torch.tensor([0.3, -0.3, 0.1, float("inf")])
    expected = _expected_pointwise(x, y)
    _, compiled = code_and_output(pointwise, (x, y), block_sizes=[8])
    for result in (compiled, run_ref(pointwise, (x, y), block_sizes=[8])):
        for got, want in zip(result, expected):
            torch.testing.assert_close(got, want, equal_nan=True, atol=0, rtol=0)


@pallasite.kernel
def nan_sums(x):
    m, n = x.size()
    out = torch.zeros([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tn in hl.tile(n):
            acc = acc + torch.nansum(x[tm, tn], 1)
        out[tm] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_nansum_counts_nan_as_zero_under_every_loop_type(loop_type):
    x = torch.randn(16, 300)
    x[x > 1.5] = float("nan")
    for result in (code_and_output(nan_sums, (x,), block_sizes=[8, 128], pallas_loop_type=loop_type)[1],
                   run_ref(nan_sums, (x,), block_sizes=[8, 128], pallas_loop_type=loop_type)):
        torch.testing.assert_close(result, torch.nansum(x, 1), rtol=1e-5, atol=1e-5)


@pallasite.kernel
def integer_extremes(a, b):
    out = torch.empty_like(a)
    for t in hl.tile(a.size(0)):
        out[t] = torch.fmax(a[t], b[t]) - torch.fmin(a[t], b[t]) + F.threshold(a[t], 3, 100)
    return out


def test_integer_fmax_and_threshold_and_integer_softsign_and_logit():
    """softsign and logit of integers are float32 in torch (trial EE: compiled refused them,
    reference mode answered); softsign of bool is torch's refusal (abs of bool)."""
    a, b = torch.randint(-9, 9, (50,), dtype=torch.int32), torch.randint(-9, 9, (50,), dtype=torch.int32)
    expected = torch.fmax(a, b) - torch.fmin(a, b) + F.threshold(a, 3, 100)
    torch.testing.assert_close(code_and_output(integer_extremes, (a, b))[1], expected)
    torch.testing.assert_close(run_ref(integer_extremes, (a, b)), expected)

    @pallasite.kernel
    def integer_softsign(a):
        out = torch.empty(a.shape, dtype=torch.float32)
        for t in hl.tile(a.size(0)):
            out[t] = F.softsign(a[t]) + torch.logit(a[t] > 0, eps=0.25)
        return out

    expected = F.softsign(a) + torch.logit(a > 0, eps=0.25)
    torch.testing.assert_close(code_and_output(integer_softsign, (a,))[1], expected)
    torch.testing.assert_close(run_ref(integer_softsign, (a,)), expected)
    with pytest.raises(exc.UnsupportedDtype, match="softsign of bool") as info:
        code_and_output(integer_softsign, (a > 0,))
    assert "F.softsign(a[t])" in str(info.value)


@pallasite.kernel
def activations(x, y):
    a, b, c, d = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    close = torch.empty(x.shape, dtype=torch.bool)
    for t in hl.tile(x.size(0)):
        v, w = x[t, :], y[t, :]
        a[t, :] = F.selu(v)
        b[t, :] = F.celu(v, 0.7) + torch.celu(w)
        c[t, :] = torch.logit(torch.sigmoid(v)) + v.sigmoid().logit(eps=0.2)
        d[t, :] = torch.special.logit(w.sigmoid(), 1e-3)
        close[t, :] = torch.isclose(v, w, rtol=0.1, atol=0.05) | v.isclose(w, equal_nan=True)
    return a, b, c, d, close


def _expected_activations(x, y):
    return (F.selu(x), F.celu(x, 0.7) + torch.celu(y), torch.logit(torch.sigmoid(x)) + x.sigmoid().logit(eps=0.2),
            torch.special.logit(y.sigmoid(), 1e-3), torch.isclose(x, y, rtol=0.1, atol=0.05) | x.isclose(
                y, equal_nan=True))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_activations_and_isclose_are_torchs(dtype):
    """16-bit selu/celu compute in float32 and round once; logit rounds each step, as torch's
    kernels do (bit for bit); float32's transcendentals may differ by an ulp."""
    torch.manual_seed(0)  # fixed inputs: the outcome depends on nothing else
    x, y = torch.randn(20, 37).to(dtype) * 3, torch.randn(20, 37).to(dtype) * 3
    y[:, :5] = x[:, :5] + 0.01
    x[0, 0] = y[0, 0] = x[1, 1] = float("nan")
    x[2, :3] = y[2, :3] = torch.tensor([float("inf"), -float("inf"), 0.0])
    expected = _expected_activations(x, y)
    tolerance = {"rtol": 1e-6, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 0, "atol": 0}
    _, compiled = code_and_output(activations, (x, y), block_sizes=[8])
    for result in (compiled, run_ref(activations, (x, y), block_sizes=[8])):
        for got, want in zip(result, expected):
            torch.testing.assert_close(got, want, equal_nan=True, **tolerance)


def test_isclose_of_integers_and_bools_and_torchs_refusals():
    a, b = torch.randint(-100, 100, (16, 24), dtype=torch.int32), torch.randint(-100, 100, (16, 24), dtype=torch.int32)

    @pallasite.kernel
    def integer_close(a, b):
        out = torch.empty(a.shape, dtype=torch.bool)
        for t in hl.tile(a.size(0)):
            out[t, :] = torch.isclose(a[t, :], b[t, :], rtol=0.5, atol=3) ^ torch.isclose(a[t, :] > 0, b[t, :] > 0)
        return out

    expected = torch.isclose(a, b, rtol=0.5, atol=3) ^ torch.isclose(a > 0, b > 0)
    assert torch.equal(code_and_output(integer_close, (a, b))[1], expected)
    assert torch.equal(run_ref(integer_close, (a, b)), expected)

    @pallasite.kernel
    def mixed_close(x, y):
        out = torch.empty(x.shape, dtype=torch.bool)
        for t in hl.tile(x.size(0)):
            out[t] = torch.isclose(x[t], y[t])
        return out

    with pytest.raises(exc.PallasiteError, match="isclose") as info:  # torch: "must be same dtype"
        code_and_output(mixed_close, (torch.randn(8), torch.randn(8).half()))
    assert "torch.isclose(x[t], y[t])" in str(info.value)


_PARAMETERIZED = {
    "celu_alpha": (lambda v, s: F.celu(v, s), (0.7, 1.5)),
    "isclose_atol": (lambda v, s: torch.isclose(v, v.round(), atol=s).float(), (0.1, 0.3)),
    "norm_order": (lambda v, s: v / v.norm(s, dim=1, keepdim=True), (1, 3)),
    "rms_norm_eps": (lambda v, s: F.rms_norm(v, [v.size(1)], eps=s), (0.5, 2.0)),
    "var_correction": (lambda v, s: torch.var(v, 1, correction=s)[:, None] + v, (0, 2)),
    "flip_dims": (lambda v, s: v.flip(s), (1, -1)),
    "tril_diagonal": (lambda v, s: torch.tril(v, s), (0, 3)),
}


@pytest.mark.parametrize("name", sorted(_PARAMETERIZED))
def test_composite_parameters_may_be_kernel_arguments(name):
    """`F.celu(v, s)`, `torch.var(v, 1, correction=c)`, `v.norm(p, ...)` of kernel arguments were
    refused ("must be a Python number, got HostScalar(s)") or raised torch's recursion error
    compiled, where reference mode ran them: each is a constant of the variant, as an op's
    parameters are (each value compiles its own)."""
    function, values = _PARAMETERIZED[name]

    @pallasite.kernel
    def parameterized(x, s):
        out = torch.empty_like(x)
        for t in hl.tile(x.size(0)):
            out[t, :] = function(x[t, :], s)
        return out

    x = torch.randn(16, 32)
    for s in values:
        expected = function(x, s)
        torch.testing.assert_close(code_and_output(parameterized, (x, s), block_sizes=[16])[1], expected)
        torch.testing.assert_close(run_ref(parameterized, (x, s), block_sizes=[16]), expected)


@pallasite.kernel
def angles_and_steps(x):
    out = torch.empty([5, *x.shape], dtype=x.dtype)
    for t in hl.tile(x.size(0)):
        v = x[t, :]
        out[0, t, :] = torch.deg2rad(v)
        out[1, t, :] = v.rad2deg()
        out[2, t, :] = torch.heaviside(v.round(), torch.full_like(v, 0.5))
        out[3, t, :] = torch.sinc(v.round() / 2)
        out[4, t, :] = F.softmin(v, dim=1)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_angles_heaviside_sinc_and_softmin_are_torchs(dtype):
    """Trial BB's refused list: deg2rad/rad2deg (torch's constant, a 16-bit product rounded
    once), heaviside (NaN gives 0), sinc (1 at 0) and softmin, against torch and reference mode."""
    torch.manual_seed(0)  # fixed inputs: the outcome depends on nothing else
    x = (torch.randn(20, 37) * 3).to(dtype)
    x[0, :3] = torch.tensor([0.0, float("nan"), -0.0]).to(dtype)
    expected = torch.stack([torch.deg2rad(x), x.rad2deg(), torch.heaviside(x.round(), torch.full_like(x, 0.5)),
                            torch.sinc(x.round() / 2), F.softmin(x, dim=1)])
    tolerance = {"rtol": 1e-6, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 0, "atol": 0}
    for result in (code_and_output(angles_and_steps, (x,), block_sizes=[8])[1],
                   run_ref(angles_and_steps, (x,), block_sizes=[8])):
        torch.testing.assert_close(result, expected, equal_nan=True, **tolerance)


@pallasite.kernel
def integer_closeness_and_thresholds(a, b, fill: float):
    close = torch.empty(a.shape, dtype=torch.bool)
    cut = torch.empty_like(a)
    for t in hl.tile(a.size(0)):
        close[t] = torch.isclose(a[t], b[t], rtol=0.5, atol=1)
        cut[t] = F.threshold(a[t], 1.5, fill)
    return close, cut


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32])
def test_integer_isclose_and_threshold_do_not_wrap_or_round(dtype):
    """Trials DD and EE: isclose of integers wrapped |a - b| (uint8 3 vs 5: 254, so False where
    torch says True; int32 min vs max: 1, so True), and F.threshold of int32 computed through
    float32 (1579236268 became 1579236224); torch measures isclose's error in float32 and
    truncates threshold's numbers to the integer dtype."""
    info = torch.iinfo(dtype)
    a = torch.tensor([3, 10, info.min, info.max, 0, 1, 2, 100], dtype=torch.int64)
    b = torch.tensor([5, 200, info.max, info.min, 0, 2, 4, 99], dtype=torch.int64)
    if dtype == torch.int32:
        a[4], b[4] = 1579236268, 1579236269
    a, b = a.clamp(info.min, info.max).to(dtype), b.clamp(info.min, info.max).to(dtype)
    fill = 7.0 if dtype == torch.uint8 else -5.75  # -5.75 does not fit uint8 (torch refuses it)
    expected = (torch.isclose(a, b, rtol=0.5, atol=1), F.threshold(a, 1.5, fill))
    args = (a, b, fill)
    for result in (code_and_output(integer_closeness_and_thresholds, args)[1],
                   run_ref(integer_closeness_and_thresholds, args)):
        for got, want in zip(result, expected):
            assert torch.equal(got, want)


@pallasite.kernel
def soft_shrunk(x, lambd: float):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t, :] = F.softshrink(x[t, :], lambd) + F.softshrink(x[t, :])
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_softshrink_is_torchs_bit_for_bit(dtype):
    """F.softshrink was refused compiled while reference mode ran it: torch's kernel, 16-bit
    values shrunk in float32 and rounded once (in their own dtype 5% of float16 results differ)."""
    gen = torch.Generator().manual_seed(7)
    x = (torch.randn(20, 37, generator=gen) * 3).to(dtype)
    x[0, :5] = torch.tensor([float("nan"), 0.3, -0.3, float("inf"), -float("inf")])
    expected = F.softshrink(x, 0.3) + F.softshrink(x)
    _, compiled = code_and_output(soft_shrunk, (x, 0.3), block_sizes=[8])
    for result in (compiled, run_ref(soft_shrunk, (x, 0.3), block_sizes=[8])):
        torch.testing.assert_close(result, expected, equal_nan=True, atol=0, rtol=0)


@pytest.mark.parametrize("dtype, lambd", [(torch.float32, -0.1), (torch.float16, 1e5)])
def test_softshrink_refuses_a_lambda_torch_refuses_in_both_modes(dtype, lambd):
    x = torch.randn(8, 16).to(dtype)
    with pytest.raises(RuntimeError, match="lambda must be in range"):
        F.softshrink(x, lambd)
    for run in (lambda: code_and_output(soft_shrunk, (x, lambd)), lambda: run_ref(soft_shrunk, (x, lambd), block_sizes=[8])):
        with pytest.raises(exc.ShapeMismatch, match="lambda must be in range"):
            run()


def test_softshrink_refusal_names_the_function_alike_in_both_modes():
    x = torch.randn(8, 16).half()
    messages = []
    for run in (lambda: code_and_output(soft_shrunk, (x, -0.5)), lambda: run_ref(soft_shrunk, (x, -0.5), block_sizes=[8])):
        with pytest.raises(exc.ShapeMismatch) as info:
            run()
        messages.append(info.value.message)
    assert all(message.startswith("torch.nn.functional.softshrink: lambda must be") for message in messages), messages
