"""Sliding windows: inner loops whose begin and end both depend on the enclosing tile,
`hl.tile(max(k_start, tile_q.begin - w), min(k_end, tile_q.end))` (issue #8 §3).

Tiles are the user's: they start at the (unaligned, data-dependent) begin, so
`tile_k.begin` is `begin + j * block`; key blocks outside the window are never
visited; no access reaches outside [begin, end). Checked under every loop type,
against torch, in reference mode, and lowered to Mosaic."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref, schedule_report

from schedule_kernels import (
    causal_pruned, jagged_window_attention, jagged_window_reference, window_attention, window_attention_const,
    window_reference,
)



def _qkv(*shape, dtype=torch.float32):
    generator = torch.Generator().manual_seed(0)
    return tuple(torch.randn(*shape, generator=generator).to(dtype) for _ in range(3))


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_window_attention_matches_torch(loop_type):
    q, k, v = _qkv(2, 100, 128)  # 100 rows: partial last query and key tiles
    compiled = window_attention.bind((q, k, v, 0)).compile_config(
        pallasite.Config(block_sizes=[32, 16], pallas_loop_type=loop_type))
    # w is a runtime scalar: one compiled kernel serves every window. 0: the diagonal only;
    # 5 and 37: begins off a block multiple; 64: a block multiple; 300: wider than the sequence.
    for w in (0, 5, 37, 64, 300):
        result = compiled(q, k, v, w)
        torch.testing.assert_close(result, window_reference(q, k, v, w), atol=1e-5, rtol=1e-5)


def test_window_attention_bf16():
    q, k, v = _qkv(2, 96, 128, dtype=torch.bfloat16)
    _, result = code_and_output(window_attention, (q, k, v, 40), block_sizes=[32, 32],
                                pallas_loop_type="emit_pipeline")
    torch.testing.assert_close(result.float(), window_reference(q, k, v, 40).float(), atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_jagged_window_attention_matches_torch(loop_type):
    q, k, v = _qkv(73, 128)
    offsets = torch.tensor([0, 20, 20, 33, 73], dtype=torch.int32)  # unaligned starts, an empty segment
    compiled = jagged_window_attention.bind((q, k, v, offsets, 0)).compile_config(
        pallasite.Config(block_sizes=[8, 8], pallas_loop_type=loop_type))
    for w in (0, 5, 11, 100):
        result = compiled(q, k, v, offsets, w)
        torch.testing.assert_close(result, jagged_window_reference(q, k, v, offsets, w), atol=1e-5, rtol=1e-5)


def test_reference_mode_agrees_on_windows():
    q, k, v = _qkv(73, 128)
    offsets = torch.tensor([0, 20, 33, 73], dtype=torch.int32)
    result = run_ref(jagged_window_attention, (q, k, v, offsets, 7), block_sizes=[8, 8])
    torch.testing.assert_close(result, jagged_window_reference(q, k, v, offsets, 7), atol=1e-5, rtol=1e-5)


# ----------------------------------- the tiles visited are the window's, no others --


@pallasite.kernel
def window_visits(x, w: int):
    """Per query tile: how many key tiles ran, and the sum of their begins; and a mark on
    every key row a tile covered (rows past the loop's end are masked)."""
    s, n = x.size()
    visits = torch.zeros([s, n], dtype=torch.float32, device=x.device)
    marks = torch.zeros([s // 16, s], dtype=torch.float32, device=x.device)
    for tile_q in hl.tile(s, block_size=16):
        count = hl.zeros([tile_q, n], dtype=torch.float32)
        begins = hl.zeros([tile_q, n], dtype=torch.float32)
        for tile_k in hl.tile(max(0, tile_q.begin - w), min(s, tile_q.end), block_size=8):
            count = count + 1.0
            begins = begins + tile_k.begin.to(torch.float32)
            marks[tile_q.id, tile_k] = x[tile_k, 0] * 0.0 + 1.0
        visits[tile_q, :] = count * 1000.0 + begins
    return visits, marks


def _visits_reference(s: int, n: int, w: int):
    visits = torch.zeros(s, n)
    marks = torch.zeros(s // 16, s)
    for q_begin in range(0, s, 16):
        begin, end = max(0, q_begin - w), min(s, q_begin + 16)
        tiles = list(range(begin, end, 8))
        visits[q_begin:q_begin + 16] = len(tiles) * 1000.0 + sum(tiles)
        marks[q_begin // 16, begin:end] = 1.0
    return visits, marks


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("w", [3, 16, 21])
def test_window_tiles_start_at_the_begin_and_stay_in_range(loop_type, w):
    x = torch.ones(64, 128)
    _, (visits, marks) = code_and_output(window_visits, (x, w), pallas_loop_type=loop_type)
    expected_visits, expected_marks = _visits_reference(64, 128, w)
    torch.testing.assert_close(visits, expected_visits)
    torch.testing.assert_close(marks, expected_marks)
    # The report counts the same tiles without running the kernel.
    report = schedule_report(window_visits, (x, w), pallas_loop_type=loop_type)
    assert report["inner_tiles"] == int(expected_visits[::16, 0].div(1000).floor().sum())


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_window_kernels_lower_to_mosaic(loop_type):
    q, k, v = _qkv(2, 128, 128)
    check_tpu_lowering(window_attention, (q, k, v, 40), block_sizes=[32, 16], pallas_loop_type=loop_type)
    q, k, v = _qkv(73, 128)
    offsets = torch.tensor([0, 20, 33, 73], dtype=torch.int32)
    check_tpu_lowering(jagged_window_attention, (q, k, v, offsets, 5), block_sizes=[8, 8],
                       pallas_loop_type=loop_type)
    check_tpu_lowering(window_visits, (torch.ones(64, 128), 21), pallas_loop_type=loop_type)


# ------------------- emit_pipeline streams a begin that is provably a block multiple --


@pytest.mark.parametrize("w, streamed", [(64, True), (96, True), (37, False)])
def test_pipeline_streams_a_provably_aligned_window_begin(w, streamed):
    """max(0, tile_q.begin - w) is a multiple of the key block when the query block and w
    are: the pipeline's index maps count in blocks from begin // block. Otherwise k and v
    stay resident and tiles are read at their element offsets."""
    q, k, v = _qkv(2, 256, 128)
    config = pallasite.Config(block_sizes=[64, 32], pallas_loop_type="emit_pipeline")
    plan = window_attention_const.bind((q, k, v, w)).plan(config)
    (loop_plan,) = plan.calls[0].inner_loops.values()
    assert {s.symbol.name for s in loop_plan.streams} == ({"k", "v"} if streamed else set())
    code, result = code_and_output(window_attention_const, (q, k, v, w), **config)
    torch.testing.assert_close(result, window_reference(q, k, v, w), atol=1e-5, rtol=1e-5)
    report = schedule_report(window_attention_const, (q, k, v, w), **config)
    window_bytes = 32 * 128 * 4
    blockspec_bytes = 2 * q.numel() * 4 + (0 if streamed else 2 * k.numel() * 4)
    assert report["hbm_bytes"] == blockspec_bytes + (2 * report["inner_tiles"] * window_bytes if streamed else 0)
    if streamed:
        assert "tile_k_first_block = tile_k_range_begin // 32" in code
        check_tpu_lowering(window_attention_const, (q, k, v, w), **config)


# --------------------------- causal ends: proven block multiples need no tail mask --


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("s", [256, 200])
def test_pruned_causal_masks_only_a_partial_tail(loop_type, s):
    """`hl.tile(0, min(s, tile_q.end))`: with s and the query block multiples of the key
    block, both ends are block multiples (ir.known_multiple), so the key tiles are whole:
    no tail mask, no host padding. Its range is proven inside k from the tiles alone, so
    there is no run-time range check either way."""
    q, k, v = _qkv(2, s, 128)
    config = pallasite.Config(block_sizes=[64, 32], pallas_loop_type=loop_type)
    call = causal_pruned.bind((q, k, v)).plan(config).calls[0]
    masked = {mask.dim.name for masks in call.masks.values() for mask in masks}
    assert ("tile_k" in masked) == (s % 32 != 0 or s % 64 != 0)
    assert not call.range_checks
    if s % 64 == 0:
        assert all(op.padded_shape is None for op in call.inputs)
    _, result = code_and_output(causal_pruned, (q, k, v), **config)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)
