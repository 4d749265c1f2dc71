"""`hl.load(x, [..., idx], extra_mask=m)` where `idx` may leave the tensor on masked lanes
(issue 22: Helion's causal_conv1d reads `x[b, tile_d, seq_idx - 3]` under
`extra_mask=(seq_idx >= 3)[None, :]`). The mask is shaped like the result, not like the
index: its axes outside the index's own are 1, so it decides the index's lanes alone and a
masked-off lane reads row 0 of the table instead of -3. Masked lanes read 0, as in
reference mode and torch.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


def _shifted(x, shift):
    """x shifted right by `shift` along its last axis, zeros coming in."""
    out = torch.zeros_like(x)
    out[..., shift:] = x[..., :x.size(-1) - shift]
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def shift_right(x):
    out = torch.zeros_like(x)
    for tile_r, tile_s in hl.tile([x.size(0), x.size(1)]):
        idx = tile_s.index - 3
        out[tile_r, tile_s] = hl.load(x, [tile_r, idx], extra_mask=(idx >= 0)[None, :])
    return out


def test_a_masked_off_negative_index_reads_zero():
    x = torch.randn(8, 256)
    _, result = code_and_output(shift_right, (x,))
    torch.testing.assert_close(result, _shifted(x, 3))
    torch.testing.assert_close(run_ref(shift_right, (x,)), _shifted(x, 3))


@pallasite.kernel(config=pallasite.Config(block_sizes=[1, 8, 128]))
def causal_taps(x, weight):
    """Helion's causal depthwise conv1d shape: a scalar batch index, a channel tile, the
    shifted sequence index, one tap per inner-loop step."""
    batch, channels, seqlen = x.shape
    width = hl.specialize(weight.size(1))
    out = torch.empty_like(x)
    for tile_b, tile_d, tile_s in hl.tile([batch, channels, seqlen]):
        seq_idx = tile_s.index
        acc = hl.zeros([tile_d, tile_s], dtype=torch.float32)
        for tile_w in hl.tile(width, block_size=1):
            shift = width - 1 - tile_w.begin
            idx = seq_idx - shift
            tap = hl.load(x, [tile_b.begin, tile_d, idx], extra_mask=(idx >= 0)[None, :])
            acc = acc + tap * weight[tile_d, tile_w]
        out[tile_b, tile_d, tile_s] = acc[None, :, :]
    return out


def _causal_conv(x, weight):
    width = weight.size(1)
    padded = torch.nn.functional.pad(x, (width - 1, 0))
    return torch.nn.functional.conv1d(padded, weight.unsqueeze(1), groups=x.size(1))


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_causal_conv_taps_under_every_loop_type(loop_type):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 256, generator=generator)
    weight = torch.randn(8, 4, generator=generator)
    expected = _causal_conv(x, weight)
    _, result = code_and_output(causal_taps, (x, weight), pallas_loop_type=loop_type)
    torch.testing.assert_close(result, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(run_ref(causal_taps, (x, weight)), expected, atol=1e-4, rtol=1e-4)
