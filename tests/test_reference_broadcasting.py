"""Reference mode's extent rule narrows an axis only where the compiled kernel's extents
agree: a partial tile's extent against its block size (a value built from the block
size beside one read at the tile). Operands that do not broadcast in torch (nor in the
kernel) are torch's error there too, not a silently shortened axis (the trial's
`x[ta, tb] + m[ta][None, :]`, [8, 128] against [1, 8], gave a result of the right
shape after a reduction)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def row_sums_with_a_misplaced_vector(x, m):
    out = torch.empty([x.size(0)], dtype=x.dtype, device=x.device)
    for ta, tb in hl.tile(x.size()):
        out[ta] = (x[ta, tb] + m[ta][None, :]).sum(1)
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def masked_fill_with_a_misplaced_mask(x, m):
    out = torch.empty([x.size(0)], dtype=x.dtype, device=x.device)
    for ta, tb in hl.tile(x.size()):
        out[ta] = torch.where(m[ta][None, :], x[ta, tb], 0.0).sum(1)
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[16, 128]))
def block_sized_ramp(x):
    out = torch.empty_like(x)
    for ta, tb in hl.tile(x.size()):
        out[ta, tb] = x[ta, tb] + hl.arange(ta.block_size)[:, None].to(x.dtype)
    return out


@pytest.mark.parametrize("kernel, args", [
    (row_sums_with_a_misplaced_vector, (torch.randn(37, 128), torch.randn(37))),
    (masked_fill_with_a_misplaced_mask, (torch.randn(37, 128), torch.rand(37) < 0.5)),
])
def test_operands_that_do_not_broadcast_are_an_error_in_both_modes(kernel, args):
    with pytest.raises(exc.ShapeMismatch, match="do not broadcast") as info:
        run_ref(kernel, args)
    assert "m[ta][None, :]" in str(info.value)
    with pytest.raises(exc.ShapeMismatch):
        code_and_output(kernel, args)


def test_a_partial_tile_against_its_block_size_still_narrows():
    x = torch.randn(37, 128)  # ta's last tile holds 5 of 16 rows; hl.arange(16) is cut to them
    expected = x + (torch.arange(37) % 16)[:, None].float()
    torch.testing.assert_close(run_ref(block_sized_ramp, (x,)), expected)
    torch.testing.assert_close(code_and_output(block_sized_ramp, (x,))[1], expected)
