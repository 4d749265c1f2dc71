"""`hl.jagged_tile(lengths)` (Helion's ragged inner loop, also `hl.vtile`): refused with the
loop written with explicit masks, which is checked here to run correctly (Helion's
jagged_softmax as it would be rewritten) against torch and reference mode under every
loop type.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128, 8]))
def jagged_sum_implicit(x_data, x_offsets):
    m = x_data.size(1)
    out = torch.zeros([x_offsets.size(0) - 1, m], dtype=x_data.dtype)
    x_flat = x_data.view(-1)
    for tile_b in hl.tile(x_offsets.size(0) - 1):
        starts = x_offsets[tile_b]
        lengths = x_offsets[tile_b.index + 1] - starts
        for tile_m in hl.tile(m):
            acc = hl.zeros([tile_b, tile_m], dtype=x_data.dtype)
            for tile_k in hl.jagged_tile(lengths):
                flat = (starts[:, None] + tile_k.index[None, :])[:, :, None] * m + tile_m.index[None, None, :]
                acc = acc + hl.load(x_flat, [flat]).sum(dim=1)
            out[tile_b, tile_m] = acc
    return out


def _data():
    lengths = torch.tensor([3, 0, 11, 5, 1, 9, 2, 7, 4, 6])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]).to(torch.int32)
    return torch.randn(int(offsets[-1]), 128, generator=torch.Generator().manual_seed(0)), offsets


def test_jagged_tile_is_refused_with_the_explicit_loop_to_write():
    args = _data()
    for run in (lambda: code_and_output(jagged_sum_implicit, args), lambda: run_ref(jagged_sum_implicit, args)):
        with pytest.raises(exc.UnsupportedOperation, match="hl.tile\\(0, lengths.amax\\(\\)\\)") as info:
            run()
        assert "hl.jagged_tile(lengths)" in str(info.value)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 8, 8, 8]))
def jagged_softmax_explicit(x_data, x_offsets):
    """Softmax over each segment's rows, the jagged loops written with explicit masks."""
    m = x_data.size(1)
    out = torch.zeros_like(x_data)
    x_flat, out_flat = x_data.view(-1), out.view(-1)
    for tile_b in hl.tile(x_offsets.size(0) - 1):
        starts = x_offsets[tile_b]
        lengths = x_offsets[tile_b.index + 1] - starts
        for tile_m in hl.tile(m):
            top = hl.full([tile_b, tile_m], float("-inf"), dtype=torch.float32)
            total = hl.zeros([tile_b, tile_m], dtype=torch.float32)
            for tile_k in hl.tile(0, lengths.amax()):
                flat = (starts[:, None] + tile_k.index[None, :])[:, :, None] * m + tile_m.index[None, None, :]
                live = (tile_k.index[None, :] < lengths[:, None])[:, :, None]
                x = hl.load(x_flat, [flat], extra_mask=live)
                new_top = torch.maximum(top, torch.where(live, x, float("-inf")).amax(dim=1))
                total = total * torch.exp(top - new_top) + torch.where(
                    live, torch.exp(x - new_top[:, None, :]), 0.0).sum(dim=1)
                top = new_top
            for tile_k in hl.tile(0, lengths.amax()):
                flat = (starts[:, None] + tile_k.index[None, :])[:, :, None] * m + tile_m.index[None, None, :]
                live = (tile_k.index[None, :] < lengths[:, None])[:, :, None]
                x = hl.load(x_flat, [flat], extra_mask=live)
                hl.store(out_flat, [flat], torch.exp(x - top[:, None, :]) / total[:, None, :], extra_mask=live)
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_the_explicit_jagged_loop_runs_under_every_loop_type(loop_type):
    x, offsets = _data()
    x = x[:, :8].contiguous()  # a flat scatter keeps every row in VMEM: a narrow table
    expected = torch.cat([torch.softmax(x[offsets[i]:offsets[i + 1]], dim=0) for i in range(10)])
    _, result = code_and_output(jagged_softmax_explicit, (x, offsets), pallas_loop_type=loop_type)
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(run_ref(jagged_softmax_explicit, (x, offsets)), expected, atol=1e-5, rtol=1e-5)
