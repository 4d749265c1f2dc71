"""An output a fori_loop writes tile by tile, whose last tile may end inside the tensor
(a range read from data, or a static range shorter than the tensor), streams: each step
writes back only the tile's rows inside its range (pieces of 2^b rows), so the rows past
it keep their contents and the output need not stay resident in VMEM (a grouped GEMM at
MoE sizes, trial FF)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel
def grouped_gemm(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    T, K = x.shape
    E, _, N = w.shape
    out = torch.zeros([T, N], dtype=x.dtype, device=x.device)
    for e in hl.grid(E):
        start = offsets[e]
        end = offsets[e + 1]
        for tt, tn in hl.tile([start, 0], [end, N]):
            acc = hl.zeros([tt, tn], dtype=torch.float32)
            for tk in hl.tile(K):
                acc = torch.addmm(acc, x[tt, tk], w[e, tk, tn])
            out[tt, tn] = acc.to(out.dtype)
    return out


def _grouped_expected(x, w, offsets):
    out = torch.zeros(x.size(0), w.size(2), dtype=x.dtype)
    bounds = offsets.tolist()
    for e, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        out[a:b] = (x[a:b].float() @ w[e].float()).to(x.dtype)
    return out


@pytest.mark.parametrize("block_sizes", [[64, 128, 128], [16, 128, 128], [24, 128, 256]])
def test_a_grouped_gemm_streams_its_output_and_writes_only_each_expert_rows(block_sizes):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(200, 256, generator=gen).to(torch.bfloat16)
    w = (torch.randn(5, 256, 256, generator=gen) / 16).to(torch.bfloat16)
    offsets = torch.tensor([0, 37, 37, 120, 121, 180])  # rows 180.. belong to nobody: zeros stay
    config = dict(block_sizes=block_sizes, pallas_loop_type="fori_loop")
    code, result = code_and_output(grouped_gemm, (x, w, offsets), **config)
    expected = _grouped_expected(x, w, offsets)
    torch.testing.assert_close(result, expected, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(run_ref(grouped_gemm, (x, w, offsets), **config), result, atol=2e-2, rtol=2e-2)
    assert "fori_loop streaming out (out)" in code
    assert "write back only the tile's rows inside its range" in code
    assert "out_hbm" in code


@pallasite.kernel
def head_rows(x: torch.Tensor, n: int) -> torch.Tensor:
    out = torch.zeros_like(x)
    for _ in hl.grid(1):
        for t in hl.tile(0, n):
            out[t, :] = x[t, :] * 2
    return out


@pytest.mark.parametrize("n", [1, 100, 150, 192])
def test_a_static_range_shorter_than_the_output_keeps_the_rows_past_it(n):
    x = torch.randn(200, 256)
    expected = torch.zeros_like(x)
    expected[:n] = x[:n] * 2
    config = dict(block_sizes=[64], pallas_loop_type="fori_loop")
    code, result = code_and_output(head_rows, (x, n), **config)
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(head_rows, (x, n), **config), expected)
    assert "fori_loop streaming x (in), out (out)" in code


def test_a_grouped_gemm_at_mixtral_sizes_lowers():
    """Trial FF: T=4096, K=4096, N=14336, 8 experts in bf16. The output (112 MiB) stayed
    resident in VMEM with every config; streamed, the working set is the tiles'."""
    bf = torch.bfloat16
    x, w = torch.empty(4096, 4096, dtype=bf, device="meta"), torch.empty(8, 4096, 14336, dtype=bf, device="meta")
    offsets = torch.tensor([0, 500, 1000, 1500, 2000, 2500, 3000, 3500, 4096])
    codes = check_tpu_lowering(grouped_gemm, (x, w, offsets), block_sizes=[128, 256, 512],
                               pallas_loop_type="fori_loop")
    assert all("fori_loop streaming out (out)" in code for code in codes.values())
