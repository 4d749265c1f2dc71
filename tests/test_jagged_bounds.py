"""Data-dependent tile bounds in jagged segments: real tiles, never another segment's rows
(issue #8 §1). Under every loop type, `tile.begin`/`tile.end` are the user's tiles
(`begin + k * block_size`), and no store touches rows outside [begin, end)."""
from __future__ import annotations

import math

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output



@pallasite.kernel
def stamp_tiles(x, cu):
    out = torch.zeros_like(x)
    for seq in hl.grid(cu.size(0) - 1):
        for tile_t in hl.tile(cu[seq], cu[seq + 1], block_size=4):
            live = tile_t.end - tile_t.begin
            for tile_s in hl.tile(live, block_size=1):
                row = tile_t.begin + tile_s.begin
                out[row, :] = x[row, :] * 2.0 + (tile_t.begin * 1000 + live * 100).to(torch.float32)
    return out


def _stamp_reference(x, cu):
    out = torch.zeros_like(x)
    bounds = cu.tolist()
    for begin, end in zip(bounds[:-1], bounds[1:]):
        for tile_begin in range(begin, end, 4):
            live = min(end, tile_begin + 4) - tile_begin
            out[tile_begin:tile_begin + live] = x[tile_begin:tile_begin + live] * 2 + tile_begin * 1000 + live * 100
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_tile_begin_and_end_are_the_real_tiles_of_an_unaligned_segment(loop_type):
    x = torch.zeros(12, 128)
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)
    _, result = code_and_output(stamp_tiles, (x, cu), pallas_loop_type=loop_type)
    # Tiles of segment 1 start at 5 and 9: rows 5-8 get 5400, rows 9-11 get 9300.
    assert result[:, 0].tolist() == [400.0] * 4 + [4100.0] + [5400.0] * 4 + [9300.0] * 3
    torch.testing.assert_close(result, _stamp_reference(x, cu))


@pallasite.kernel
def jagged_attention(q, k, v, offsets):
    total, d = q.size()
    out = torch.zeros_like(q)
    scale = 1.0 / math.sqrt(d)
    for seq in hl.grid(offsets.size(0) - 1):
        start = offsets[seq]
        end = offsets[seq + 1]
        for tile_q in hl.tile(start, end, block_size=8):
            q_blk = q[tile_q, :]
            m_i = hl.full([tile_q], float("-inf"), dtype=torch.float32)
            l_i = hl.zeros([tile_q], dtype=torch.float32)
            acc = hl.zeros([tile_q, d], dtype=torch.float32)
            for tile_k in hl.tile(start, end, block_size=8):
                scores = hl.dot(q_blk, k[tile_k, :].T) * scale
                m_new = torch.maximum(m_i, torch.amax(scores, -1))
                p = torch.exp(scores - m_new[:, None])
                alpha = torch.exp(m_i - m_new)
                l_i = l_i * alpha + torch.sum(p, -1)
                acc = hl.dot(p, v[tile_k, :], acc=acc * alpha[:, None])
                m_i = m_new
            out[tile_q, :] = acc / l_i[:, None]
    return out


def _jagged_attention_reference(q, k, v, offsets):
    out = torch.zeros_like(q)
    bounds = offsets.tolist()
    for begin, end in zip(bounds[:-1], bounds[1:]):
        if end > begin:
            scores = q[begin:end] @ k[begin:end].T / math.sqrt(q.size(1))
            out[begin:end] = torch.softmax(scores, -1) @ v[begin:end]
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_jagged_attention_with_unaligned_segments(loop_type):
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(73, 128, generator=generator) for _ in range(3))
    offsets = torch.tensor([0, 20, 33, 73], dtype=torch.int32)  # lengths 20, 13, 40 in blocks of 8
    _, result = code_and_output(jagged_attention, (q, k, v, offsets), pallas_loop_type=loop_type)
    torch.testing.assert_close(result, _jagged_attention_reference(q, k, v, offsets), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_every_segment_empty_returns_the_empty_output(loop_type):
    x = torch.zeros(0, 128)
    cu = torch.tensor([0, 0, 0, 0], dtype=torch.int32)
    _, result = code_and_output(stamp_tiles, (x, cu), pallas_loop_type=loop_type)
    assert result.shape == (0, 128)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_jagged_kernels_lower_to_mosaic(loop_type):
    q = k = v = torch.randn(73, 128)
    offsets = torch.tensor([0, 20, 33, 73], dtype=torch.int32)
    check_tpu_lowering(jagged_attention, (q, k, v, offsets), pallas_loop_type=loop_type)
    check_tpu_lowering(stamp_tiles, (torch.zeros(12, 128), torch.tensor([0, 5, 12], dtype=torch.int32)),
                       pallas_loop_type=loop_type)


# ------------------------------------------- stores never pass an inner loop's end --


@pallasite.kernel
def first_rows_doubled(x):
    rows, cols = x.size()
    y = torch.zeros_like(x)
    for tile_c in hl.tile(cols):
        for t in hl.tile(29):
            y[t, tile_c] = x[t, tile_c] * 2.0
    return y


@pallasite.kernel
def segments_doubled_last_first(x, offsets):
    b = offsets.size(0) - 1
    y = torch.zeros_like(x)
    for g in hl.grid(b):
        seg = b - 1 - g
        for t in hl.tile(offsets[seg], offsets[seg + 1]):
            y[t, :] = x[t, :] * 2.0
    return y


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_an_inner_loop_ending_inside_the_output_leaves_the_rest_alone(loop_type):
    x = torch.randn(40, 128)
    _, result = code_and_output(first_rows_doubled, (x,), block_sizes=[128, 8], pallas_loop_type=loop_type)
    expected = torch.zeros_like(x)
    expected[:29] = x[:29] * 2
    torch.testing.assert_close(result, expected)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_segments_last_tile_never_writes_the_next_segment(loop_type):
    x = torch.randn(40, 128)
    offsets = torch.tensor([0, 5, 32, 33], dtype=torch.int32)
    _, result = code_and_output(segments_doubled_last_first, (x, offsets), block_sizes=[8],
                                pallas_loop_type=loop_type)
    expected = torch.zeros_like(x)
    expected[:33] = x[:33] * 2
    torch.testing.assert_close(result, expected)
