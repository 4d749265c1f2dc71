"""`hl.store(out, [idx, ...], v, extra_mask=m)`: a scatter of only the lanes the mask keeps
(issue 22: Helion's jagged_layer_norm stores `out_flat[flat_indices]` under the rows' mask).

The mask decides the index's lanes alone (1 on the window's other axes): a masked-off lane
writes nothing and its index is not checked, so it may name any row, or none. Compared with
torch (the kept lanes, the last one naming a row winning) and reference mode.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel(config=pallasite.Config(block_sizes=[16]))
def scatter_first_rows(out, x, idx, kept: int):
    for tile in hl.tile(x.size(0)):
        hl.store(out, [idx[tile], slice(None)], x[tile, :] + 1, extra_mask=(tile.index < kept)[:, None])
    return out


def test_masked_off_lanes_write_nothing_even_with_an_index_past_the_tensor():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(40, 128, generator=generator)  # a partial third tile
    idx = torch.randint(0, 24, (40,), generator=generator, dtype=torch.int32)
    idx[25:] = 1000  # masked off: never read, never checked
    expected = torch.zeros(24, 128)
    for lane in range(25):
        expected[idx[lane]] = x[lane] + 1
    _, result = code_and_output(scatter_first_rows, (torch.zeros(24, 128), x, idx, 25))
    torch.testing.assert_close(result, expected)
    reference = torch.zeros(24, 128)
    run_ref(scatter_first_rows, (reference, x, idx, 25))
    torch.testing.assert_close(reference, expected)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 8, 8]))
def jagged_scale(x_values, x_offsets):
    """Helion's jagged_layer_norm store: a flat (rows, k, m) index, a (rows, k, 1) mask."""
    total, m = x_values.shape
    out = torch.zeros_like(x_values)
    x_flat, out_flat = x_values.view(-1), out.view(-1)
    for tile_b in hl.tile(x_offsets.size(0) - 1):
        starts = x_offsets[tile_b]
        lengths = x_offsets[tile_b.index + 1] - starts
        for tile_m in hl.tile(m):
            for tile_k in hl.tile(0, lengths.amax()):
                rows = starts[:, None] + tile_k.index[None, :]
                flat = rows[:, :, None] * m + tile_m.index[None, None, :]
                live = (tile_k.index[None, :] < lengths[:, None])[:, :, None]
                values = hl.load(x_flat, [flat], extra_mask=live)
                hl.store(out_flat, [flat], values * 2.0, extra_mask=live)
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_jagged_flat_store_under_its_rows_mask(loop_type):
    lengths = torch.tensor([3, 0, 11, 5, 1, 9, 2, 7, 4, 6])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]).to(torch.int32)
    x = torch.randn(int(offsets[-1]), 8, generator=torch.Generator().manual_seed(1))  # a flat scatter keeps every row in VMEM: small
    _, result = code_and_output(jagged_scale, (x, offsets), pallas_loop_type=loop_type)
    torch.testing.assert_close(result, x * 2)
    torch.testing.assert_close(run_ref(jagged_scale, (x, offsets)), x * 2)


@pallasite.kernel(config=pallasite.Config(block_sizes=[16]))
def scatter_positive_elements(out, x, idx):
    for tile in hl.tile(x.size(0)):
        hl.store(out, [idx[tile], slice(None)], x[tile, :], extra_mask=x[tile, :] > 0)
    return out


def test_a_mask_that_keeps_part_of_a_lane_is_refused_with_the_reason():
    args = (torch.zeros(8, 128), torch.randn(16, 128), torch.randint(0, 8, (16,), dtype=torch.int32))
    for run in (lambda: code_and_output(scatter_positive_elements, args),
                lambda: run_ref(scatter_positive_elements, args)):
        with pytest.raises(exc.UnsupportedOperation, match="needs a mask of the index's lanes") as info:
            run()
        assert "extra_mask=x[tile, :] > 0" in str(info.value)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 8]))
def transpose_through_a_flat_index(out, x):
    m, n = x.shape
    out_flat = out.view(-1)
    for tile_m, tile_n in hl.tile([m, n]):
        flat = tile_n.index[None, :] * m + tile_m.index[:, None]
        hl.store(out_flat, [flat], x[tile_m, tile_n] * 3)
    return out


def test_a_2d_index_that_is_the_whole_subscript_scatters_through_its_flat_vector():
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(4))
    _, result = code_and_output(transpose_through_a_flat_index, (torch.zeros(8, 16), x))
    torch.testing.assert_close(result, (x * 3).t())
    reference = torch.zeros(8, 16)
    run_ref(transpose_through_a_flat_index, (reference, x))
    torch.testing.assert_close(reference, (x * 3).t())
