"""Flash attention forward: online softmax over key blocks, dense or causal.

Each program owns one (batch x head) entry and a block of query rows; an inner
loop walks the key/value blocks carrying three values across steps (the
running row max ``m_i``, the running softmax denominator ``l_i`` and the
float32 output accumulator). Both products go through ``hl.dot`` so bfloat16
inputs are multiplied on the MXU with float32 accumulation.

``causal`` is a Python bool, so each value compiles its own kernel. The causal
key loop is pruned: it ends at ``min(seq_len, tile_q.end)``, so key blocks
wholly above the diagonal are never visited (with S = 512 and blocks of 64,
36 key steps instead of 64; ``python -m pallasite report
examples.attention:attention`` counts them). Inside the visited blocks the
mask compares the global query and key positions (``tile_q.index`` and
``tile_k.index``). The key loop always starts at key 0, which every query row
may attend to, so the first key block leaves each row's ``m_i`` finite and a
later partly masked block only contributes ``exp(-inf) = 0`` (never
``exp(-inf - -inf)``).
"""

from __future__ import annotations

import math

import torch

import pallasite
import pallasite.language as hl

# Block sizes for [tile_q, tile_k] (the batch x head block is fixed at 1):
# with S = 256, 2 x 2 = 4 programs, each with two key steps.
BLOCK_SIZES = [128, 128]


@pallasite.kernel(config=pallasite.Config(block_sizes=BLOCK_SIZES))
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    batch_heads, seq_len, head_dim = q.size()
    assert k.size() == q.size() and v.size() == q.size(), "q, k and v must have the same shape"
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(head_dim)
    for tile_b, tile_q in hl.tile([batch_heads, seq_len], block_size=[1, None]):
        m_i = hl.full([tile_b, tile_q], float("-inf"), dtype=torch.float32)
        l_i = hl.zeros([tile_b, tile_q], dtype=torch.float32)
        acc = hl.zeros([tile_b, tile_q, head_dim], dtype=torch.float32)
        q_blk = q[tile_b, tile_q, :]
        # causal: keys after the query tile's last row are never visited
        key_end = min(seq_len, tile_q.end) if causal else seq_len
        for tile_k in hl.tile(0, key_end):
            k_blk = k[tile_b, tile_k, :]
            v_blk = v[tile_b, tile_k, :]
            qk = hl.dot(q_blk, k_blk.transpose(1, 2)) * scale
            if causal:
                visible = tile_q.index[None, :, None] >= tile_k.index[None, None, :]
                qk = torch.where(visible, qk, float("-inf"))
            m_new = torch.maximum(m_i, torch.amax(qk, -1))
            p = torch.exp(qk - m_new[:, :, None])
            alpha = torch.exp(m_i - m_new)
            l_i = l_i * alpha + torch.sum(p, -1)
            acc = hl.dot(p.to(v_blk.dtype), v_blk, acc=acc * alpha[:, :, None])
            m_i = m_new
        out[tile_b, tile_q, :] = (acc / l_i[:, :, None]).to(out.dtype)
    return out


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    result = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=causal
    )
    return result.to(q.dtype)


def example_inputs(dtype: torch.dtype = torch.bfloat16, head_dim: int = 64, causal: bool = False) -> tuple:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 256, head_dim).to(dtype) for _ in range(3))
    return q, k, v, causal


# (atol, rtol) per input dtype. bfloat16 probabilities are rounded before the
# second product (as on the MXU), and the result is rounded to bfloat16.
TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}
HEAD_DIMS = (64, 128, 256)


def check() -> float:
    worst = 0.0
    for dtype, (atol, rtol) in TOLERANCES.items():
        for head_dim in HEAD_DIMS:
            for causal in (False, True):
                inputs = example_inputs(dtype, head_dim, causal)
                result = attention(*inputs)
                expected = reference(*inputs)
                torch.testing.assert_close(result, expected, atol=atol, rtol=rtol)
                worst = max(worst, (result.float() - expected.float()).abs().max().item())
    return worst


if __name__ == "__main__":
    print(f"attention: max abs error {check():.2e}")
