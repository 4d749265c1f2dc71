"""`Tensor.masked_fill` / `torch.masked_fill` in device code (Helion's MoE matmul).

It is torch.where(mask, value, x) in x's dtype: a float value filled into an int
tensor truncates, as masked_fill's own cast does, and torch's checks (the mask
broadcasts to x, a bool mask) run on the meta tensors first."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel(config=pallasite.Config(block_sizes=[32, 128]))
def clipped(x, y):
    out = torch.empty_like(x)
    for tm, tn in hl.tile(x.size()):
        v = x[tm, tn]
        out[tm, tn] = v.masked_fill(v > y[tm, tn], -1.5) + torch.masked_fill(v, v < 0, 0)
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[16, 128]))
def masked_row_sums(x, keep):
    m, n = x.size()
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tn in hl.tile(n):
            dropped = ~keep[tn]
            acc = acc + x[tm, tn].masked_fill(dropped[None, :], 0.0).to(torch.float32).sum(1)
        out[tm] = acc
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int32])
def test_masked_fill_as_torch_fills(dtype):
    x, y = (torch.randn(70, 200) * 4).to(dtype), (torch.randn(70, 200) * 4).to(dtype)
    expected = x.masked_fill(x > y, -1.5) + torch.masked_fill(x, x < 0, 0)
    _, out = code_and_output(clipped, (x, y))
    assert torch.equal(out, expected)
    assert torch.equal(run_ref(clipped, (x, y)), expected)
    check_tpu_lowering(clipped, (x, y))


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_broadcast_mask_in_an_inner_loop(loop_type):
    x, keep = torch.randn(40, 300), torch.rand(300) < 0.5
    expected = x.masked_fill(~keep[None, :], 0.0).sum(1)
    _, out = code_and_output(masked_row_sums, (x, keep), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(masked_row_sums, (x, keep), pallas_loop_type=loop_type), expected)
    check_tpu_lowering(masked_row_sums, (x, keep), pallas_loop_type=loop_type)


def test_a_mask_that_does_not_broadcast_to_the_input_is_torchs_error():
    @pallasite.kernel
    def wider_mask(x, y):
        out = torch.empty_like(y)
        for tm, tn in hl.tile(y.size()):
            out[tm, tn] = x[tm, 0].masked_fill(y[tm, tn] > 0, 1.0)[:, None] + y[tm, tn]
        return out

    with pytest.raises(exc.PallasiteError, match="masked_fill") as info:
        wider_mask(torch.randn(8, 128), torch.randn(8, 128))
    assert "wider_mask" in str(info.value) or "test_masked_fill.py" in str(info.value)
