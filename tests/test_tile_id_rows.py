"""A scalar computed from a grid tile selects an output row (issue #13 §3).

`out[tm.id, tn] = ...` gives each program its own row of `out`: the row axis
gets a one-row block whose index map follows the tile, so no block is shared
between programs and every grid axis stays `parallel` (megacore chips split
it). Mosaic squeezes one of a block's last two dims only where the array's dim
is 1, so the plan views such a tensor with a unit axis after the row (`[R, n]`
as `[R, 1, n]`, which the host reshapes back) and squeezes both: the kernel ref
is the row.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import check_tpu_lowering
from plan_helpers import only_call, randn


@pallasite.kernel
def block_column_means(x):
    m, n = x.size()
    out = torch.empty([(m + 31) // 32, n], dtype=torch.float32, device=x.device)
    for tm, tn in hl.tile([m, n], block_size=[32, None]):
        out[tm.id, tn] = x[tm, tn].mean(0)
    return out


@pallasite.kernel
def block_row_sums(x):
    m, n = x.size()
    out = torch.empty([(n + 127) // 128, m], dtype=torch.float32, device=x.device)
    for tm, tn in hl.tile([m, n], block_size=[None, 128]):
        out[tn.id, tm] = x[tm, tn].sum(1)
    return out


@pallasite.kernel
def block_column_max_by_begin(x):
    m, n = x.size()
    out = torch.empty([(m + 15) // 16, n], dtype=x.dtype, device=x.device)
    for tm, tn in hl.tile([m, n], block_size=[16, None]):
        out[tm.begin // 16, tn] = torch.amax(x[tm, tn], dim=0)
    return out


@pallasite.kernel
def doubled_rows(x):
    b, n = x.size()
    out = torch.empty_like(x)
    for g in hl.grid(b):
        out[g, :] = x[g, :] * 2
    return out


def _chunks(x: torch.Tensor, size: int, dim: int):
    return torch.split(x, size, dim=dim)


def test_tile_id_selects_an_output_row():
    x = randn(100, 256, seed=1)  # 100 rows: the last row tile is partial (4 valid rows)
    expected = torch.stack([chunk.mean(0) for chunk in _chunks(x, 32, 0)])
    torch.testing.assert_close(block_column_means(x), expected, atol=1e-5, rtol=1e-5)
    call = only_call(block_column_means, (x,))
    assert [axis.semantics for axis in call.grid] == ["parallel", "parallel"]
    (out,) = call.outputs
    assert out.block_shape == (None, None, 256)  # one row per program, viewed as [R, 1, n]
    assert out.view_shape == (4, 1, 256)


def test_tile_id_of_the_lane_tile_selects_an_output_row():
    x = randn(64, 300, seed=2)
    expected = torch.stack([chunk.sum(1) for chunk in _chunks(x, 128, 1)])
    torch.testing.assert_close(block_row_sums(x), expected, atol=1e-4, rtol=1e-5)
    assert [axis.semantics for axis in only_call(block_row_sums, (x,)).grid] == ["parallel", "parallel"]


def test_tile_begin_floor_divided_selects_an_output_row():
    x = randn(40, 128, seed=3).bfloat16()
    expected = torch.stack([chunk.amax(0) for chunk in _chunks(x, 16, 0)])
    torch.testing.assert_close(block_column_max_by_begin(x), expected)
    assert [axis.semantics for axis in only_call(block_column_max_by_begin, (x,)).grid] == ["parallel", "parallel"]


def test_grid_index_selects_a_row_of_a_2d_output():
    x = randn(5, 256, seed=4)
    torch.testing.assert_close(doubled_rows(x), x * 2)
    assert [axis.semantics for axis in only_call(doubled_rows, (x,)).grid] == ["parallel"]


@pytest.mark.parametrize("kernel,x", [
    (block_column_means, randn(100, 256)),
    (block_row_sums, randn(64, 300)),
    (block_column_max_by_begin, randn(40, 128).bfloat16()),
    (doubled_rows, randn(5, 256)),
], ids=["tile_id", "lane_tile_id", "begin_div", "grid"])
def test_tile_rows_lower_to_mosaic(kernel, x):
    check_tpu_lowering(kernel, (x,))


@pallasite.kernel
def column_sums_overwritten_per_row_tile(x):
    m, n = x.size()
    out = torch.empty([n], dtype=torch.float32, device=x.device)
    for tm, tn in hl.tile([m, n], block_size=[8, 128]):
        out[tn] = x[tm, tn].sum(0)
    return out


def test_output_block_revisited_across_an_outer_axis_walks_it_innermost():
    """`out`'s block does not depend on tm (grid axis 0): in source order it would be written
    back and revisited after tn moves on, overwriting the first visit with a stale buffer. Each
    element's writers are the tm steps of one tn (every index item depends on one grid dim at
    most), so walking tm innermost keeps torch's last writer, the last row tile (trial J)."""
    x = randn(16, 256)
    torch.testing.assert_close(column_sums_overwritten_per_row_tile(x), x[8:].sum(0))
    call = only_call(column_sums_overwritten_per_row_tile, (x,))
    assert [axis.dim.name for axis in call.grid] == ["tn", "tm"]
    assert [axis.semantics.value for axis in call.grid] == ["parallel", "arbitrary"]



@pallasite.kernel
def column_sums_into_lanes(x):
    m, n = x.size()
    out = torch.empty([n, m // 8], dtype=torch.float32, device=x.device)
    for tm, tn in hl.tile([m, n], block_size=[8, 128]):
        out[tn, tm.id] = x[tm, tn].sum(0)
    return out


def test_tile_id_on_the_last_dim_of_an_output_walks_the_row_tiles_innermost():
    """`out[tn, tm.id]`: a block cannot select one lane, so `out`'s block is whole along
    the last dim and the same for every tm; the plan walks tm innermost (each visit
    writes its own column of the block) and says why."""
    x = randn(16, 256)
    torch.testing.assert_close(column_sums_into_lanes(x), x.reshape(2, 8, 256).sum(1).T)
    call = only_call(column_sums_into_lanes, (x,))
    assert [axis.dim.name for axis in call.grid] == ["tn", "tm"]
    assert [axis.semantics.value for axis in call.grid] == ["parallel", "arbitrary"]
    assert call.grid_order_reason.startswith("'out' is written and keeps one block along 'tm'")
    assert "cannot select one position of a tensor's last dim" in call.outputs[0].axes[1].reason
    check_tpu_lowering(column_sums_into_lanes, (x,))
