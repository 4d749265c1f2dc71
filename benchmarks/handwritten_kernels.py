"""Kernels for `benchmarks/vs_handwritten.py`, written the way a pallasite user writes them.

Each mirrors the computation of a hand-written Pallas TPU kernel (JAX's own, in
`jax/experimental/pallas/ops/tpu/`, or the row-blocked norm a Pallas author writes);
the schedule — blocks, loop type, grid order — is the config's business, so the
benchmark compares configs of one kernel.
"""
from __future__ import annotations

import math

import torch

import pallasite
import pallasite.language as hl


@pallasite.kernel
def matmul_bf16(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """bf16 x bf16 -> bf16 with a float32 accumulator (JAX's matmul.py out dtype: x's).
    block_sizes [m, n, k]."""
    m, k = x.size()
    _, n = y.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc.to(out.dtype)
    return out


@pallasite.kernel
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Flash attention over [batch x heads, seq, head_dim], the batch x head block tunable
    (flash_attention.py's block_b): block_sizes [batch x heads, query, key]. Causal: the
    key loop stops at the query tile's end."""
    batch_heads, seq_len, head_dim = q.size()
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(head_dim)
    for tile_b, tile_q in hl.tile([batch_heads, seq_len]):
        m_i = hl.full([tile_b, tile_q], float("-inf"), dtype=torch.float32)
        l_i = hl.zeros([tile_b, tile_q], dtype=torch.float32)
        acc = hl.zeros([tile_b, tile_q, head_dim], dtype=torch.float32)
        q_blk = q[tile_b, tile_q, :]
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


@pallasite.kernel
def gqa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Grouped-query attention: q [batch x q_heads, seq, d], k and v [batch x kv_heads, seq,
    d]; q row r reads K/V row r // group (q heads of one KV head are consecutive), as splash
    attention's `h // q_heads_per_kv_head`. One q head per program: block_sizes [query, key]."""
    rows, seq_len, head_dim = q.size()
    group = rows // k.size(0)
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(head_dim)
    for tile_h, tile_q in hl.tile([rows, seq_len], block_size=[1, None]):
        kv_row = tile_h.begin // group
        q_blk = q[tile_h.begin, tile_q, :]
        m_i = hl.full([tile_q], float("-inf"), dtype=torch.float32)
        l_i = hl.zeros([tile_q], dtype=torch.float32)
        acc = hl.zeros([tile_q, head_dim], dtype=torch.float32)
        key_end = min(seq_len, tile_q.end) if causal else seq_len
        for tile_k in hl.tile(0, key_end):
            k_blk = k[kv_row, tile_k, :]
            v_blk = v[kv_row, tile_k, :]
            qk = hl.dot(q_blk, k_blk.T) * scale
            if causal:
                visible = tile_q.index[:, None] >= tile_k.index[None, :]
                qk = torch.where(visible, qk, float("-inf"))
            m_new = torch.maximum(m_i, torch.amax(qk, -1))
            p = torch.exp(qk - m_new[:, None])
            alpha = torch.exp(m_i - m_new)
            l_i = l_i * alpha + torch.sum(p, -1)
            acc = hl.dot(p.to(v_blk.dtype), v_blk, acc=acc * alpha[:, None])
            m_i = m_new
        out[tile_h.begin, tile_q, :] = (acc / l_i[:, None]).to(out.dtype)
    return out


@pallasite.kernel
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim (a whole row per block): block_sizes [rows]."""
    m, n = x.size()
    n = hl.specialize(n)
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        row = x[tile_m, :].to(torch.float32)
        mean_square = torch.mean(row * row, dim=1, keepdim=True)
        out[tile_m, :] = (row * torch.rsqrt(mean_square + eps) * weight[:].to(torch.float32)).to(out.dtype)
    return out
