"""torch.frac, torch.logaddexp, torch.xlogy (torch.special.xlogy) and F.layer_norm in device code
(trial I found them refused): each lowered for TPU and equal to torch and reference mode, with
infinities, NaN and zeros where torch defines them."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pallasite
import pallasite.language as hl
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel
def log_ops(x, y):
    out = torch.empty([4, x.size(0)], dtype=torch.float32, device=x.device)
    for t in hl.tile(x.size(0)):
        out[0, t] = torch.frac(x[t]).float()
        out[1, t] = torch.logaddexp(x[t], y[t]).float()
        out[2, t] = torch.xlogy(x[t], torch.abs(y[t])).float()
        out[3, t] = x[t].frac().float() + torch.special.xlogy(2, torch.abs(y[t]) + 1).float()
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_frac_logaddexp_xlogy(dtype):
    torch.manual_seed(0)
    x, y = torch.randn(200).to(dtype) * 5, torch.randn(200).to(dtype) * 5
    x[:6] = torch.tensor([0.0, float("inf"), -float("inf"), float("nan"), -2.5, 0.0]).to(dtype)
    y[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0, 1e4, 0.0]).to(dtype)
    expected = torch.stack([torch.frac(x).float(), torch.logaddexp(x, y).float(), torch.xlogy(x, y.abs()).float(),
                            x.frac().float() + torch.special.xlogy(2, y.abs() + 1).float()])
    tolerance = {} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-5}
    _, result = code_and_output(log_ops, (x, y))
    torch.testing.assert_close(result, expected, equal_nan=True, **tolerance)
    torch.testing.assert_close(run_ref(log_ops, (x, y)), expected, equal_nan=True, **tolerance)
    check_tpu_lowering(log_ops, (x, y))


@pallasite.kernel
def layer_norms(x, w, b):
    m, n = x.shape
    out = torch.empty([2, m, n], dtype=x.dtype, device=x.device)
    for t in hl.tile(m):
        out[0, t, :] = F.layer_norm(x[t, :], [n], w[:], b[:], eps=1e-5)
        out[1, t, :] = torch.nn.functional.layer_norm(x[t, :], (n,))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm(dtype):
    torch.manual_seed(0)
    x = (torch.randn(37, 200) * 3 + 1).to(dtype)
    w, b = torch.randn(200).to(dtype), torch.randn(200).to(dtype)
    expected = torch.stack([F.layer_norm(x, [200], w, b, eps=1e-5), F.layer_norm(x, (200,))])
    _, result = code_and_output(layer_norms, (x, w, b))
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(layer_norms, (x, w, b)), expected)
    check_tpu_lowering(layer_norms, (x, w, b))
