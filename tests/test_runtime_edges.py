"""Runtime edge cases: empty tensors, returning an argument updated in place."""
from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl


@pallasite.kernel
def add_one(x):
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.size()):
        out[tile_m, tile_n] = x[tile_m, tile_n] + 1
    return out


def test_zero_size_dimension_returns_an_empty_result():
    x = torch.randn(0, 128)
    result = add_one(x)
    assert result.shape == (0, 128)


@pallasite.kernel
def accumulate(acc, x):
    for tile in hl.tile(acc.size(0)):
        acc[tile] += x[tile]
    return acc


def test_returning_an_argument_updated_in_place_returns_that_tensor():
    acc, x = torch.zeros(1024), torch.randn(1024)
    result = accumulate(acc, x)
    assert result is acc
    torch.testing.assert_close(acc, x)
