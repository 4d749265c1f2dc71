"""Attention kernels whose key loops prune by dependent bounds, shared by the schedule report
and sliding-window tests: causal (`hl.tile(0, min(s, tile_q.end))`), dense sliding windows
(`hl.tile(max(0, tile_q.begin - w), min(s, tile_q.end))`) and jagged sliding windows, whose
both ends depend on the segment's offsets and on the enclosing query tile."""
from __future__ import annotations

import math

import torch

import pallasite
import pallasite.language as hl

# The running row max starts at a finite floor, not -inf: a key block of a window can be
# fully masked for some query rows, and exp(-inf - -inf) would be NaN.
M_FLOOR = -1e30


@pallasite.kernel
def causal_pruned(q, k, v):
    bh, s, d = q.size()
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(d)
    for tile_b, tile_q in hl.tile([bh, s], block_size=[1, None]):
        m_i = hl.full([tile_b, tile_q], float("-inf"), dtype=torch.float32)
        l_i = hl.zeros([tile_b, tile_q], dtype=torch.float32)
        acc = hl.zeros([tile_b, tile_q, d], dtype=torch.float32)
        q_blk = q[tile_b, tile_q, :]
        for tile_k in hl.tile(0, min(s, tile_q.end)):
            qk = hl.dot(q_blk, k[tile_b, tile_k, :].transpose(1, 2)) * scale
            visible = tile_q.index[None, :, None] >= tile_k.index[None, None, :]
            qk = torch.where(visible, qk, float("-inf"))
            m_new = torch.maximum(m_i, torch.amax(qk, -1))
            p = torch.exp(qk - m_new[:, :, None])
            alpha = torch.exp(m_i - m_new)
            l_i = l_i * alpha + torch.sum(p, -1)
            v_blk = v[tile_b, tile_k, :]
            acc = hl.dot(p.to(v_blk.dtype), v_blk, acc=acc * alpha[:, :, None])
            m_i = m_new
        out[tile_b, tile_q, :] = (acc / l_i[:, :, None]).to(out.dtype)
    return out


@pallasite.kernel
def causal_masked(q, k, v):
    bh, s, d = q.size()
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(d)
    for tile_b, tile_q in hl.tile([bh, s], block_size=[1, None]):
        m_i = hl.full([tile_b, tile_q], float("-inf"), dtype=torch.float32)
        l_i = hl.zeros([tile_b, tile_q], dtype=torch.float32)
        acc = hl.zeros([tile_b, tile_q, d], dtype=torch.float32)
        q_blk = q[tile_b, tile_q, :]
        for tile_k in hl.tile(s):
            qk = hl.dot(q_blk, k[tile_b, tile_k, :].transpose(1, 2)) * scale
            visible = tile_q.index[None, :, None] >= tile_k.index[None, None, :]
            qk = torch.where(visible, qk, float("-inf"))
            m_new = torch.maximum(m_i, torch.amax(qk, -1))
            p = torch.exp(qk - m_new[:, :, None])
            alpha = torch.exp(m_i - m_new)
            l_i = l_i * alpha + torch.sum(p, -1)
            v_blk = v[tile_b, tile_k, :]
            acc = hl.dot(p.to(v_blk.dtype), v_blk, acc=acc * alpha[:, :, None])
            m_i = m_new
        out[tile_b, tile_q, :] = (acc / l_i[:, :, None]).to(out.dtype)
    return out


@pallasite.kernel
def window_attention(q, k, v, w: int):
    """Query i attends keys j with i - w <= j <= i; `w` is a runtime scalar."""
    bh, s, d = q.size()
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(d)
    for tile_b, tile_q in hl.tile([bh, s], block_size=[1, None]):
        m_i = hl.full([tile_b, tile_q], M_FLOOR, dtype=torch.float32)
        l_i = hl.zeros([tile_b, tile_q], dtype=torch.float32)
        acc = hl.zeros([tile_b, tile_q, d], dtype=torch.float32)
        q_blk = q[tile_b, tile_q, :]
        for tile_k in hl.tile(max(0, tile_q.begin - w), min(s, tile_q.end)):
            qk = hl.dot(q_blk, k[tile_b, tile_k, :].transpose(1, 2)) * scale
            behind = tile_q.index[None, :, None] - tile_k.index[None, None, :]
            qk = torch.where((behind >= 0) & (behind <= w), qk, float("-inf"))
            m_new = torch.maximum(m_i, torch.amax(qk, -1))
            p = torch.exp(qk - m_new[:, :, None])
            alpha = torch.exp(m_i - m_new)
            l_i = l_i * alpha + torch.sum(p, -1)
            v_blk = v[tile_b, tile_k, :]
            acc = hl.dot(p.to(v_blk.dtype), v_blk, acc=acc * alpha[:, :, None])
            m_i = m_new
        out[tile_b, tile_q, :] = (acc / l_i[:, :, None]).to(out.dtype)
    return out


@pallasite.kernel
def window_attention_const(q, k, v, w: hl.constexpr):
    """`window_attention` with `w` a compile-time constant: when the blocks divide it, the key
    loop's begin is provably a key-block multiple (emit_pipeline streams k and v)."""
    bh, s, d = q.size()
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(d)
    for tile_b, tile_q in hl.tile([bh, s], block_size=[1, None]):
        m_i = hl.full([tile_b, tile_q], M_FLOOR, dtype=torch.float32)
        l_i = hl.zeros([tile_b, tile_q], dtype=torch.float32)
        acc = hl.zeros([tile_b, tile_q, d], dtype=torch.float32)
        q_blk = q[tile_b, tile_q, :]
        for tile_k in hl.tile(max(0, tile_q.begin - w), min(s, tile_q.end)):
            qk = hl.dot(q_blk, k[tile_b, tile_k, :].transpose(1, 2)) * scale
            behind = tile_q.index[None, :, None] - tile_k.index[None, None, :]
            qk = torch.where((behind >= 0) & (behind <= w), qk, float("-inf"))
            m_new = torch.maximum(m_i, torch.amax(qk, -1))
            p = torch.exp(qk - m_new[:, :, None])
            alpha = torch.exp(m_i - m_new)
            l_i = l_i * alpha + torch.sum(p, -1)
            v_blk = v[tile_b, tile_k, :]
            acc = hl.dot(p.to(v_blk.dtype), v_blk, acc=acc * alpha[:, :, None])
            m_i = m_new
        out[tile_b, tile_q, :] = (acc / l_i[:, :, None]).to(out.dtype)
    return out


@pallasite.kernel
def jagged_window_attention(q, k, v, offsets, w: int):
    """Per segment [offsets[g], offsets[g + 1]) of rows: query i attends keys j of its
    segment with i - w <= j <= i."""
    total, d = q.size()
    out = torch.zeros_like(q)
    scale = 1.0 / math.sqrt(d)
    for seq in hl.grid(offsets.size(0) - 1):
        start = offsets[seq]
        end = offsets[seq + 1]
        for tile_q in hl.tile(start, end):
            m_i = hl.full([tile_q], M_FLOOR, dtype=torch.float32)
            l_i = hl.zeros([tile_q], dtype=torch.float32)
            acc = hl.zeros([tile_q, d], dtype=torch.float32)
            q_blk = q[tile_q, :]
            for tile_k in hl.tile(max(start, tile_q.begin - w), min(end, tile_q.end)):
                qk = hl.dot(q_blk, k[tile_k, :].T) * scale
                behind = tile_q.index[:, None] - tile_k.index[None, :]
                qk = torch.where((behind >= 0) & (behind <= w), qk, float("-inf"))
                m_new = torch.maximum(m_i, torch.amax(qk, -1))
                p = torch.exp(qk - m_new[:, None])
                alpha = torch.exp(m_i - m_new)
                l_i = l_i * alpha + torch.sum(p, -1)
                v_blk = v[tile_k, :]
                acc = hl.dot(p.to(v_blk.dtype), v_blk, acc=acc * alpha[:, None])
                m_i = m_new
            out[tile_q, :] = (acc / l_i[:, None]).to(out.dtype)
    return out


def window_mask(s: int, w: int) -> torch.Tensor:
    i = torch.arange(s)[:, None]
    j = torch.arange(s)[None, :]
    return (i >= j) & (i - j <= w)


def window_reference(q, k, v, w: int) -> torch.Tensor:
    scores = q.float() @ k.float().transpose(-1, -2) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~window_mask(q.size(-2), w), float("-inf"))
    return (torch.softmax(scores, -1) @ v.float()).to(q.dtype)


def jagged_window_reference(q, k, v, offsets, w: int) -> torch.Tensor:
    out = torch.zeros_like(q)
    bounds = offsets.tolist()
    for begin, end in zip(bounds[:-1], bounds[1:]):
        if end > begin:
            out[begin:end] = window_reference(q[begin:end], k[begin:end], v[begin:end], w)
    return out


def window_tiles(s: int, w: int, block_q: int, block_k: int) -> int:
    """Key tiles the window loop visits for one segment of length `s`, counted the slow way."""
    total = 0
    for q_begin in range(0, s, block_q):
        k_begin = max(0, q_begin - w)
        k_end = min(s, q_begin + block_q)
        total += len(range(k_begin, k_end, block_k))
    return total
