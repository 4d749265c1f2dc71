"""Reference mode takes a tile written as a size (`x.new_zeros([tile, n])`, `v.expand(tile,
n)`, `v.view(tile, n)`) as its extent, as the compiled kernel takes its block (the tile's
`__index__`; reference/tiles.py)."""
from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def tile_sizes_as_arguments(x):
    m, n = x.size()
    out = torch.empty_like(x)
    for tm in hl.tile(m):
        acc = x.new_zeros([tm, n]) + x.new_full([tm, n], 2.0) + x[tm, :].view(tm, n)
        out[tm, :] = acc + x[tm, :1].expand(tm, n)  # a tile as expand's first positional size
    return out


def test_a_tile_as_a_positional_size_is_its_extent_in_reference_mode():
    """torch's argument parser took a tile with a `__torch_function__` as expand's size list
    and raised a TypeError before any torch function mode saw the call."""
    x = torch.randn(20, 130)
    expected = 2 + x + x[:, :1]
    for result in (run_ref(tile_sizes_as_arguments, (x,), block_sizes=[16]),
                   code_and_output(tile_sizes_as_arguments, (x,), block_sizes=[16])[1]):
        torch.testing.assert_close(result, expected)
