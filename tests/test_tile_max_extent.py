"""`hl.tile(..., max_extent=n)` (Helion's): a compile-time bound on a one-dimensional
loop's extent. pallasite plans loops without it, so a kernel carrying it runs as without
it (compiled and in reference mode, under every loop type); the bound is checked where the
range is known when compiling, and misuse is `exc.IncorrectTileUsage` at the user's line."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def row_prefix_sums(x, lengths):
    """Each row sums its first lengths[r] values; the inner loop's end is data, bounded by n."""
    m, n = x.shape
    out = torch.zeros([m], dtype=x.dtype, device=x.device)
    for r in hl.grid(m):
        acc = hl.zeros([1], dtype=torch.float32)
        for t in hl.tile(0, lengths[r], block_size=16, max_extent=n):
            acc = acc + x[r, t].sum()[None]
        out[r] = acc[0]
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_bounded_data_dependent_loop_runs_as_without_the_bound(loop_type):
    torch.manual_seed(0)
    x = torch.randint(-5, 5, (6, 64)).float()
    lengths = torch.tensor([0, 1, 16, 17, 40, 64], dtype=torch.int32)
    expected = torch.stack([x[r, :int(lengths[r])].sum() for r in range(6)])
    _, out = code_and_output(row_prefix_sums, (x, lengths), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(run_ref(row_prefix_sums, (x, lengths), pallas_loop_type=loop_type), expected,
                               rtol=0, atol=0)


def test_dynamic_shapes_take_a_size_as_the_bound():
    kernel = pallasite.kernel(row_prefix_sums.fn, static_shapes=False)
    x = torch.randint(-5, 5, (4, 48)).float()
    lengths = torch.tensor([3, 48, 0, 20], dtype=torch.int32)
    expected = torch.stack([x[r, :int(lengths[r])].sum() for r in range(4)])
    torch.testing.assert_close(kernel(x, lengths), expected, rtol=0, atol=0)


def _copy(bound_of):
    def copy_rows(x, limit):
        out = torch.empty_like(x)
        for t in hl.tile(0, x.size(0), max_extent=bound_of(x, limit)):
            out[t] = x[t]
        return out

    return pallasite.kernel(copy_rows)


def test_a_bound_read_from_a_tensor_is_refused():
    kernel = _copy(lambda x, limit: limit)
    with pytest.raises(exc.IncorrectTileUsage, match=r"hl\.tile\(max_extent=\.\.\.\) must be a statically known"):
        kernel(torch.randn(8), torch.tensor(8))


def test_a_static_range_longer_than_its_bound_is_refused():
    kernel = _copy(lambda x, limit: 4)
    with pytest.raises(exc.IncorrectTileUsage, match=r"runs 8 positions .* more than its max_extent"):
        kernel(torch.randn(8), 0)


def test_a_multi_dim_loop_takes_no_bound():
    @pallasite.kernel
    def two_dims(x):
        out = torch.empty_like(x)
        for tm, tn in hl.tile([x.size(0), x.size(1)], max_extent=8):
            out[tm, tn] = x[tm, tn]
        return out

    with pytest.raises(exc.IncorrectTileUsage, match="max_extent=.*one-dimensional tile loops"):
        two_dims(torch.randn(8, 8))


def test_loops_of_one_block_size_must_agree_on_the_bound():
    @pallasite.kernel
    def conflicting(x):
        out = torch.empty_like(x)
        block = hl.register_block_size(x.size(1))
        for row in hl.tile(x.size(0)):
            for t in hl.tile(0, x.size(1), block_size=block, max_extent=8):
                out[row, t] = x[row, t]
            for t in hl.tile(0, x.size(1), block_size=block, max_extent=16):
                out[row, t] = x[row, t] * 2
        return out

    with pytest.raises(exc.IncorrectTileUsage, match=r"Conflicting hl\.tile\(max_extent=\.\.\.\) values"):
        conflicting(torch.randn(4, 8))
