"""`torch.ones_like(v)` (and `full_like`, `zeros_like(v) + 1`) of a value read at a partial
tile has that tile's valid part only, as in torch: its padding is v's, so a reduction of it
counts the tile's valid elements. The compiled kernel counted the whole block (128 where the
last tile of 200 holds 72; a jagged mean counting rows with `ones_like(blk).sum(0)` was off
by 1.0; trial G), where reference mode and torch were right."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel(config=pallasite.Config(block_sizes=[128]))
def counts(x):
    n = x.size(0)
    out = torch.zeros([n, 4], dtype=torch.float32, device=x.device)
    for t in hl.tile(n):
        v = x[t]
        out[t, 0] = v * 0 + torch.ones_like(v).sum()
        out[t, 1] = v * 0 + torch.full_like(v, 2.0).sum()
        out[t, 2] = v * 0 + (torch.zeros_like(v) + 1).sum()
        out[t, 3] = v * 0 + torch.softmax(torch.zeros_like(v), 0).sum()
    return out


def test_a_like_value_of_a_partial_tile_counts_its_valid_elements():
    x = torch.randn(200)
    expected = torch.tensor([[128.0, 256.0, 128.0, 1.0]] * 128 + [[72.0, 144.0, 72.0, 1.0]] * 72)
    _, result = code_and_output(counts, (x,))
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(counts, (x,)), expected)


@pallasite.kernel
def jagged_mean(x, offsets):
    d = x.size(1)
    out = torch.zeros([offsets.size(0) - 1, d], dtype=x.dtype, device=x.device)
    for g in hl.grid(offsets.size(0) - 1):
        total = hl.zeros([d], dtype=torch.float32)
        rows = hl.zeros([d], dtype=torch.float32)
        for t in hl.tile(offsets[g], offsets[g + 1], block_size=8):
            block = x[t, :]
            total = total + block.sum(0)
            rows = rows + torch.ones_like(block).sum(0)
        out[g, :] = total / torch.clamp(rows, min=1.0)
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_rows_counted_with_ones_like_under_every_loop_type(loop_type):
    x = torch.randn(37, 128)
    offsets = torch.tensor([0, 5, 5, 20, 37], dtype=torch.int32)
    expected = torch.stack([x[a:b].mean(0) if b > a else torch.zeros(128)
                            for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())])
    _, result = code_and_output(jagged_mean, (x, offsets), pallas_loop_type=loop_type)
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(jagged_mean, (x, offsets)), expected)
