"""A matmul of 4-D tiles (two batch dims: `q[tb, th, tq, :] @ k[tb, th, :, :].T`) ran in
interpret mode but Mosaic's matmul takes one batch dim ("Up to 1 batch dim supported"), and
the default config chose such blocks (a trial's finding): the batch dims merge into one
around the dot. Checked against torch and reference mode, lowered for every chip, with the
batch dims' blocks 1 and larger, under every inner loop type."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel
def head_scores(q, k):
    B, H, S, D = q.shape
    out = torch.empty([B, H, S, S], dtype=torch.float32, device=q.device)
    for tb, th, tq in hl.tile([B, H, S]):
        out[tb, th, tq, :] = q[tb, th, tq, :] @ k[tb, th, :, :].transpose(-1, -2)
    return out


@pallasite.kernel
def head_context(p, v):
    B, H, S, K = p.shape
    out = torch.zeros([B, H, S, v.size(3)], dtype=torch.float32, device=p.device)
    for tb, th, tq in hl.tile([B, H, S]):
        acc = hl.zeros([tb, th, tq, v.size(3)], dtype=torch.float32)
        for tk in hl.tile(K):
            acc = acc + torch.matmul(p[tb, th, tq, tk], v[tb, th, tk, :])
        out[tb, th, tq, :] = acc
    return out


@pytest.mark.parametrize("block_sizes", [[2, 2, 16], [1, 2, 8], None])
def test_two_batch_dims_merge_around_the_dot(block_sizes):
    q, k = torch.randn(2, 2, 40, 64), torch.randn(2, 2, 40, 64)
    config = {} if block_sizes is None else {"block_sizes": block_sizes}  # None: the default config
    _, out = code_and_output(head_scores, (q, k), **config)
    torch.testing.assert_close(out, q @ k.transpose(-1, -2), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(run_ref(head_scores, (q, k), **config), out, atol=1e-4, rtol=1e-4)
    check_tpu_lowering(head_scores, (q, k), **config)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_two_batch_dims_in_an_inner_loop(loop_type):
    p, v = torch.randn(2, 2, 24, 40), torch.randn(2, 2, 40, 128)
    config = {"block_sizes": [2, 2, 8, 16], "pallas_loop_type": loop_type}
    _, out = code_and_output(head_context, (p, v), **config)
    torch.testing.assert_close(out, p @ v, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(run_ref(head_context, (p, v), **config), out, atol=1e-4, rtol=1e-4)
    check_tpu_lowering(head_context, (p, v), **config)
