"""A scatter whose rows move with outer tiles (`out[b, c * chunk + tile_m.index, h, tile_n]`,
Helion's mamba2 chunk scan): the scattered axis is one resident block, revisited by every
step of the tiles that choose the rows. Those revisits are safe when consecutive, so the
grid walks those tiles innermost (plan/grid_order.py) instead of refusing the kernel as a
RevisitedBlock (issue #22)."""
from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref

CHUNK = 16


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def chunked_rows(x, scale):
    batch, seqlen, heads, n = x.size()
    for_each = [heads, CHUNK, n, batch, seqlen // CHUNK]
    out = torch.empty_like(x)
    for tile_h, tile_m, tile_n, tile_b, tile_c in hl.tile(for_each, block_size=[1, None, None, 1, 1]):
        rows = tile_c.begin * CHUNK + tile_m.index
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        acc += x[tile_b.begin, rows, tile_h.begin, tile_n] * scale[tile_c.begin]
        out[tile_b.begin, rows, tile_h.begin, tile_n] = acc
    return out


def test_a_scatter_revisited_along_outer_tiles_walks_them_innermost():
    """A chunk that does not divide the axis (56 rows, chunks of 16: rows 48.. untouched) keeps the
    gather and scatter, whose block is revisited along tile_c and tile_m."""
    x, scale = torch.randn(2, 56, 2, 128), torch.randn(3)
    expected = x[:, :48] * scale.repeat_interleave(CHUNK)[None, :, None, None]
    _, out = code_and_output(chunked_rows, (x, scale))
    torch.testing.assert_close(out[:, :48], expected)
    torch.testing.assert_close(run_ref(chunked_rows, (x, scale))[:, :48], expected)
    (call,) = chunked_rows.bind((x, scale)).plan().calls
    assert "'tile_m'" in call.grid_order_reason and "'tile_c'" in call.grid_order_reason
    assert [axis.dim.name for axis in call.grid][:2] == ["tile_h", "tile_b"]  # the block's own axes outermost
    check_tpu_lowering(chunked_rows, (x, scale))


def test_a_chunk_dividing_the_axis_is_a_tile_of_its_view_in_the_written_grid_order():
    """Chunks of 16 over 64 rows: the rows are tile_m of row tile_c of the chunk view
    (frontend/chunk_views.py), no scatter, so nothing is revisited and the grid keeps its order."""
    x, scale = torch.randn(2, 64, 2, 128), torch.randn(4)
    expected = x * scale.repeat_interleave(CHUNK)[None, :, None, None]
    code, out = code_and_output(chunked_rows, (x, scale))
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(chunked_rows, (x, scale)), expected)
    (call,) = chunked_rows.bind((x, scale)).plan().calls
    assert call.grid_order_reason == "" and "x_chunks" in code and "index_hot" not in code
    check_tpu_lowering(chunked_rows, (x, scale))
