"""Sliding-window causal attention: each query attends only the ``window`` keys before it.

Query row ``i`` attends key ``j`` when ``i - window <= j <= i``. Each program
owns one (batch x head) entry and a block of query rows; its key loop runs over
``[max(0, tile_q.begin - window), min(seq_len, tile_q.end))`` — both ends
depend on the enclosing query tile — so key blocks outside the window are never
visited: the work grows with ``seq_len * window``, not ``seq_len ** 2``. The
loop's begin is generally not a multiple of the key block (``window`` is a
runtime scalar: changing it does not recompile), so key tiles start at the
begin itself, as ``hl.tile`` promises, and the last one is masked at the end.

The online softmax is the flash-attention one (see ``attention.py``), except
that the running row max starts at a finite floor: a visited key block can be
entirely outside some rows' windows, and ``exp(-inf - -inf)`` would be NaN.

``python -m pallasite report examples.sliding_window_attention:sliding_window_attention``
prints how many key steps run for the example inputs.
"""

from __future__ import annotations

import math

import torch

import pallasite
import pallasite.language as hl

# Block sizes for [tile_q, tile_k] (the batch x head block is fixed at 1).
BLOCK_SIZES = [64, 32]
# Below any score, above -inf: exp(M_FLOOR - m) is 0 for a real max m, and a row whose
# first visited block is fully masked keeps m_i = M_FLOOR without producing NaN.
M_FLOOR = -1e30


@pallasite.kernel(config=pallasite.Config(block_sizes=BLOCK_SIZES))
def sliding_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    batch_heads, seq_len, head_dim = q.size()
    assert k.size() == q.size() and v.size() == q.size(), "q, k and v must have the same shape"
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(head_dim)
    for tile_b, tile_q in hl.tile([batch_heads, seq_len], block_size=[1, None]):
        m_i = hl.full([tile_b, tile_q], M_FLOOR, dtype=torch.float32)
        l_i = hl.zeros([tile_b, tile_q], dtype=torch.float32)
        acc = hl.zeros([tile_b, tile_q, head_dim], dtype=torch.float32)
        q_blk = q[tile_b, tile_q, :]
        for tile_k in hl.tile(max(0, tile_q.begin - window), min(seq_len, tile_q.end)):
            k_blk = k[tile_b, tile_k, :]
            v_blk = v[tile_b, tile_k, :]
            qk = hl.dot(q_blk, k_blk.transpose(1, 2)) * scale
            behind = tile_q.index[None, :, None] - tile_k.index[None, None, :]
            qk = torch.where((behind >= 0) & (behind <= window), qk, float("-inf"))
            m_new = torch.maximum(m_i, torch.amax(qk, -1))
            p = torch.exp(qk - m_new[:, :, None])
            alpha = torch.exp(m_i - m_new)
            l_i = l_i * alpha + torch.sum(p, -1)
            acc = hl.dot(p.to(v_blk.dtype), v_blk, acc=acc * alpha[:, :, None])
            m_i = m_new
        out[tile_b, tile_q, :] = (acc / l_i[:, :, None]).to(out.dtype)
    return out


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    positions = torch.arange(q.size(1))
    behind = positions[:, None] - positions[None, :]
    visible = (behind >= 0) & (behind <= window)
    result = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), attn_mask=visible)
    return result.to(q.dtype)


def example_inputs(dtype: torch.dtype = torch.bfloat16, head_dim: int = 64, window: int = 100) -> tuple:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 256, head_dim).to(dtype) for _ in range(3))
    return q, k, v, window


# (atol, rtol) per input dtype, as for attention.py.
TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}
# 0: the diagonal only; 100 and 37: begins off a key-block multiple; 64: on one; 1000: causal.
WINDOWS = (0, 37, 64, 100, 1000)


def check() -> float:
    worst = 0.0
    for dtype, head_dim in ((torch.float32, 64), (torch.bfloat16, 128)):
        atol, rtol = TOLERANCES[dtype]
        for window in WINDOWS:  # a runtime scalar: one compiled kernel per dtype and head_dim
            inputs = example_inputs(dtype, head_dim, window)
            result = sliding_window_attention(*inputs)
            expected = reference(*inputs)
            torch.testing.assert_close(result, expected, atol=atol, rtol=rtol)
            worst = max(worst, (result.float() - expected.float()).abs().max().item())
    return worst


if __name__ == "__main__":
    print(f"sliding_window_attention: max abs error {check():.2e}")
