"""x.unflatten(dim, [tile, n]) in device code: a size may be a tile (its block size), as in
reshape; Helion's dense GDPA folds heads into rows and unflattens them back so."""
from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def fold_heads(x):
    s, h, d = x.size()
    out = torch.empty_like(x)
    for tile_s in hl.tile(s):
        rows = x[tile_s, :, :].reshape(-1, d)  # [tile_s * h, d]
        rows = rows - rows.amax(-1, keepdim=True)
        out[tile_s, :, :] = rows.unflatten(0, [tile_s, h])
    return out


def test_unflatten_with_a_tile_size_matches_torch_and_reference_mode():
    x = torch.randn(32, 4, 128)
    expected = x - x.amax(-1, keepdim=True)
    code, out = code_and_output(fold_heads, (x,), block_sizes=[8])
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(fold_heads, (x,)), expected)
    assert "x.unflatten" in code or "reshape" in code


def test_a_partial_last_tile_unflattens_its_real_rows():
    x = torch.randn(30, 4, 128)  # the last tile holds 6 of 8 rows
    expected = x - x.amax(-1, keepdim=True)
    torch.testing.assert_close(code_and_output(fold_heads, (x,), block_sizes=[8])[1], expected)
    torch.testing.assert_close(run_ref(fold_heads, (x,)), expected)
