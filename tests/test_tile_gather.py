"""torch.gather(t, dim, idx) along a dim of a loaded tile, with torch's semantics.

`idx` is a device int tensor of t's rank (loaded or computed); the result has idx's
shape. The lowering compares each index with an iota over `dim` and selects and sums the
one matching element on its bit pattern (codegen/matmul_rules.py `gather`), so values arrive
exactly. Out-of-range indices are an error, as in torch: interpret mode checks each
valid index against the axis and raises `ShapeMismatch` naming the user's line (a TPU
does not check; an index outside the axis selects nothing and reads 0). Gathering along
an axis a partial tile pads is refused (its padding would be readable). Rows are partial
tiles: their NaN padding must stay out of the valid rows.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


def _values(shape, dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.int32:
        return torch.randint(-1000, 1000, shape, generator=generator, dtype=torch.int32)
    return torch.randn(*shape, generator=generator).to(dtype)


def _indices(shape, high, seed):
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed), dtype=torch.int32)


@pallasite.kernel
def gather_lanes(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    m, k = idx.size()
    out = torch.empty([m, k], dtype=t.dtype)
    for tile_m in hl.tile(m, block_size=8):
        out[tile_m, :] = torch.gather(t[tile_m, :], 1, idx[tile_m, :])
    return out


@pytest.mark.parametrize("dtype, k", [(torch.float32, 128), (torch.bfloat16, 64), (torch.int32, 64)], ids=str)
def test_gather_along_the_lanes_of_a_tile(dtype, k):
    t, idx = _values((20, 128), dtype, 1), _indices((20, k), 128, 2)
    expected = torch.gather(t, 1, idx.long())
    _, out = code_and_output(gather_lanes, (t, idx))
    assert torch.equal(out, expected)
    assert torch.equal(run_ref(gather_lanes, (t, idx)), expected)


@pallasite.kernel
def gather_rows(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Along dim 0 of a (r, n) block: a permutation of the block's rows per lane."""
    b, r, n = t.size()
    out = torch.empty_like(t)
    for tile_b in hl.tile(b, block_size=1):
        out[tile_b, :, :] = t[tile_b, :, :].gather(1, idx[tile_b, :, :])
    return out


def test_gather_along_the_sublanes_with_the_method_spelling():
    t, idx = _values((3, 8, 128), torch.float32, 3), _indices((3, 8, 128), 8, 4)
    expected = torch.gather(t, 1, idx.long())
    _, out = code_and_output(gather_rows, (t, idx))
    assert torch.equal(out, expected)
    assert torch.equal(run_ref(gather_rows, (t, idx)), expected)


@pallasite.kernel
def reverse_by_computed_index(t: torch.Tensor) -> torch.Tensor:
    """An index computed on the device (hl.arange): each row reversed."""
    m, n = t.size()
    out = torch.empty_like(t)
    for tile_m in hl.tile(m, block_size=8):
        row = t[tile_m, :]
        reversed_lanes = (n - 1 - hl.arange(n))[None, :].expand(row.size(0), n)
        out[tile_m, :] = torch.gather(row, -1, reversed_lanes)
    return out


def test_gather_by_an_index_computed_on_the_device_keeps_special_bits():
    t = torch.randn(20, 128)
    t[0, :4] = torch.tensor([float("nan"), float("inf"), -0.0, -float("inf")])
    _, out = code_and_output(reverse_by_computed_index, (t,))
    assert torch.equal(out.view(torch.int32), t.flip(1).view(torch.int32))
    assert torch.equal(run_ref(reverse_by_computed_index, (t,)).view(torch.int32), t.flip(1).view(torch.int32))


@pallasite.kernel
def gather_in_inner_loop(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Per chunk of columns: the chunk's lanes picked by the chunk of idx, summed."""
    m, n = t.size()
    out = torch.empty([m, 128], dtype=torch.float32)
    for tile_m in hl.tile(m, block_size=8):
        acc = hl.zeros([tile_m, 128], dtype=torch.float32)
        for tile_n in hl.tile(n, block_size=128):
            acc = acc + torch.gather(t[tile_m, tile_n], 1, idx[tile_m, tile_n])
        out[tile_m, :] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_gather_in_an_inner_loop(loop_type):
    t, idx = _values((20, 384), torch.float32, 5), _indices((20, 384), 128, 6)
    expected = sum(torch.gather(t[:, j:j + 128], 1, idx[:, j:j + 128].long()) for j in range(0, 384, 128))
    _, out = code_and_output(gather_in_inner_loop, (t, idx), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, run_ref(gather_in_inner_loop, (t, idx)))


def test_an_index_out_of_range_is_an_error_naming_the_line():
    t, idx = _values((16, 128), torch.float32, 7), _indices((16, 128), 128, 8)
    idx[9, 3] = 128
    with pytest.raises(exc.ShapeMismatch, match=r"indices must lie in \[0, 128\)") as info:
        gather_lanes(t, idx)
    assert "torch.gather(t[tile_m, :], 1, idx[tile_m, :])" in str(info.value)
    idx[9, 3] = -1  # torch.gather does not wrap negative indices either
    with pytest.raises(exc.ShapeMismatch, match="indices must lie in"):
        gather_lanes(t, idx)


@pallasite.kernel
def gather_along_partial_tile(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    m, n = t.size()
    out = torch.empty_like(t)
    for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
        out[tile_m, tile_n] = torch.gather(t[tile_m, tile_n], 1, idx[tile_m, tile_n])
    return out


def test_gather_along_a_partially_filled_tile_is_refused():
    t, idx = _values((16, 200), torch.float32, 9), _indices((16, 200), 64, 10)
    with pytest.raises(exc.UnsupportedOperation, match="torch.gather along axis 1"):
        gather_along_partial_tile(t, idx)


@pallasite.kernel
def gather_of_wrong_rank(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    m, n = t.size()
    out = torch.empty_like(t)
    for tile_m in hl.tile(m, block_size=8):
        out[tile_m, :] = torch.gather(t[tile_m, :], 1, idx[tile_m])
    return out


def test_an_index_of_another_rank_is_refused():
    with pytest.raises(exc.ShapeMismatch, match="takes an index of the input's rank"):
        gather_of_wrong_rank(torch.randn(16, 128), torch.zeros(16, dtype=torch.int32))
