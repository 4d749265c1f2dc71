"""`emit_pipeline` streams a window whose index holds a scalar known before the loop
(a squeezed BlockSpec axis, the scalar in its index map): grouped-query attention's
KV head `tile_h.begin // group` is streamed like the KV axis of splash attention's grid,
instead of keeping every KV head's sequence resident."""
from __future__ import annotations

import math

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.testing import code_and_output, run_ref

from plan_helpers import randn


@pallasite.kernel
def grouped_query_attention(q, k, v):
    """q [q_heads, seq, d]; k, v [kv_heads, seq, d]; q head h reads KV head h // group."""
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
        for tile_k in hl.tile(0, min(seq_len, tile_q.end)):
            k_blk = k[kv_row, tile_k, :]
            v_blk = v[kv_row, tile_k, :]
            qk = hl.dot(q_blk, k_blk.T) * scale
            qk = torch.where(tile_q.index[:, None] >= tile_k.index[None, :], qk, float("-inf"))
            m_new = torch.maximum(m_i, torch.amax(qk, -1))
            p = torch.exp(qk - m_new[:, None])
            alpha = torch.exp(m_i - m_new)
            l_i = l_i * alpha + torch.sum(p, -1)
            acc = hl.dot(p.to(v_blk.dtype), v_blk, acc=acc * alpha[:, None])
            m_i = m_new
        out[tile_h.begin, tile_q, :] = (acc / l_i[:, None]).to(out.dtype)
    return out


def _reference(q, k, v):
    group = q.size(0) // k.size(0)
    k, v = (t.repeat_interleave(group, 0).float() for t in (k, v))
    return torch.nn.functional.scaled_dot_product_attention(q.float(), k, v, is_causal=True).to(q.dtype)


def test_the_kv_head_index_is_streamed_by_the_pipeline_and_correct():
    q = randn(8, 256, 128, dtype=torch.bfloat16)
    k, v = randn(2, 256, 128, seed=1, dtype=torch.bfloat16), randn(2, 256, 128, seed=2, dtype=torch.bfloat16)
    config = dict(block_sizes=[64, 128], pallas_loop_type="emit_pipeline")
    (call,) = grouped_query_attention.bind((q, k, v)).plan(pallasite.Config(**config)).calls
    (loop,) = call.inner_loops.values()
    assert {stream.symbol.name: stream.window_shape for stream in loop.streams} == {"k": (128, 128),
                                                                                   "v": (128, 128)}
    _, result = code_and_output(grouped_query_attention, (q, k, v), **config)
    torch.testing.assert_close(result, _reference(q, k, v), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(result, run_ref(grouped_query_attention, (q, k, v), config=config),
                               atol=4e-3, rtol=4e-3)


@pytest.mark.parametrize("loop_type", ["fori_loop", "emit_pipeline"])
def test_both_streaming_strategies_move_the_same_bytes(loop_type):
    from pallasite.testing import schedule_report

    q = torch.empty(32, 4096, 128, dtype=torch.bfloat16, device="meta")
    k = v = torch.empty(8, 4096, 128, dtype=torch.bfloat16, device="meta")
    report = schedule_report(grouped_query_attention, (q, k, v), block_sizes=[512, 512], pallas_loop_type=loop_type)
    pairs = sum(range(1, 9))  # key blocks per q block (8 of each), pruned at the diagonal
    kv_windows = 32 * pairs * 2 * 512 * 128 * 2  # every q head copies its KV head's windows
    assert report["hbm_bytes"] == 2 * q.numel() * 2 + kv_windows
