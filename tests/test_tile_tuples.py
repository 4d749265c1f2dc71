"""A tuple of tiles inside a subscript stands for its tiles (Helion's `hl.tile([n])`).

`for tile in hl.tile([n], block_size=[b])` binds a 1-tuple of tiles, and Helion
programs index with it as it stands: `out[tile, :]`, `x[tile]`, `hl.load(x, [tile])`.
torch gives a tuple inside a subscript no meaning for slices (a tile reads as one), so
the tuple is spliced into the key, in the tracer and in reference mode alike."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel(static_shapes=True)
def compare_all(x, y):
    """Helion's test_squeeze_slice_access."""
    (n,) = x.shape
    (m,) = y.shape
    out = torch.empty((n, m), dtype=torch.float32, device=x.device)
    for tile in hl.tile([n], block_size=[m]):
        out[tile, :] = (x[tile][:, None] < y[None, :]).to(torch.float32)
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def scaled_rows(x, scale):
    m, n = x.size()
    out = torch.empty_like(x)
    for rows in hl.tile([m]):
        s = hl.load(scale, [rows])
        for cols in hl.tile([n]):
            out[rows, cols] = x[rows, cols] * s[:, None]
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[16, 128]))
def pairs_of_tiles(x):
    m, n = x.size()
    out = torch.empty_like(x)
    for tiles in hl.tile([m, n]):
        out[tiles] = x[tiles] + 1
    return out


@pytest.mark.parametrize("n, m", [(1024, 128), (300, 128)])
def test_a_one_tuple_of_tiles_indexes_as_its_tile(n, m):
    x, y = torch.randn(n), torch.randn(m)
    expected = (x[:, None] < y[None, :]).to(torch.float32)
    _, out = code_and_output(compare_all, (x, y))
    assert torch.equal(out, expected)
    assert torch.equal(run_ref(compare_all, (x, y)), expected)
    check_tpu_lowering(compare_all, (x, y))


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_tuples_of_tiles_in_an_inner_loop_and_in_hl_load(loop_type):
    x, scale = torch.randn(20, 300), torch.randn(20)
    expected = x * scale[:, None]
    _, out = code_and_output(scaled_rows, (x, scale), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(scaled_rows, (x, scale), pallas_loop_type=loop_type), expected)
    check_tpu_lowering(scaled_rows, (x, scale), pallas_loop_type=loop_type)


def test_a_tuple_of_two_tiles_as_the_whole_key():
    x = torch.randn(40, 200)
    _, out = code_and_output(pairs_of_tiles, (x,))
    torch.testing.assert_close(out, x + 1)
    torch.testing.assert_close(run_ref(pairs_of_tiles, (x,)), x + 1)


@pallasite.kernel
def tile_and_int_tuple(x):
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[(tile, 0), :] = x[tile, :]
    return out


def test_a_tuple_mixing_a_tile_and_an_int_is_refused_at_its_line():
    """Only a tuple of tiles is spliced: torch reads (tile, 0) as an index list."""
    with pytest.raises(pallasite.exc.IndexingError, match="unsupported index") as info:
        tile_and_int_tuple(torch.randn(16, 128))
    assert "out[(tile, 0), :] = x[tile, :]" in str(info.value)
