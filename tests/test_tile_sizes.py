"""`v.size(d)`, `v.shape`, `v.numel()` of a value a partial tile indexes: torch's answer is the
tile's extent (72 where the last tile of 200 holds 72 of a 128 block), and reference mode gave it,
but the compiled kernel gave the block size, so `v.new_ones(v.shape).sum()`, `v.sum(1) / v.size(1)`
and a chunked Welford counting `chunk.size(-1)` differed (trial G). Such a size stands for the tile:
as a shape (`hl.zeros([v.size(0)])`, `v.new_full(v.shape, 1)`) it is the tile's axis with the tile's
padding, in arithmetic the tile's extent (a device scalar); a dim no partial tile indexes keeps its
plain int."""
from __future__ import annotations

import math

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def row_means(x):
    n, m = x.shape
    out = torch.zeros([n, 5], dtype=torch.float32, device=x.device)
    for tn in hl.tile(n):
        mean = hl.zeros([tn], dtype=torch.float32)
        ones = hl.zeros([tn], dtype=torch.float32)
        full = hl.zeros([tn], dtype=torch.float32)
        counted = hl.zeros([tn], dtype=torch.float32)
        numel = hl.zeros([tn], dtype=torch.float32)
        for tm in hl.tile(m):
            v = x[tn, tm]
            mean = mean + v.sum(1) / v.size(1)
            ones = ones + v.new_ones(v.shape).sum(1)
            full = full + v.new_full(v.shape, 2.0).sum(1)
            counted = counted + (hl.zeros([v.size(0), v.size(1)], dtype=torch.float32) + 1).sum(1)
            numel = numel + v.numel() / v.size(0)
        out[tn, 0] = mean
        out[tn, 1] = ones
        out[tn, 2] = full
        out[tn, 3] = counted
        out[tn, 4] = numel
    return out


def _row_means_expected(x):
    chunks = [x[:, :128], x[:, 128:]]
    mean = sum(chunk.mean(1) for chunk in chunks)
    m = float(x.size(1))
    return torch.stack([mean, torch.full_like(mean, m), torch.full_like(mean, 2 * m),
                        torch.full_like(mean, m), torch.full_like(mean, m)], 1)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_sizes_of_a_partial_tile_are_its_extent_under_every_loop_type(loop_type):
    x = torch.randn(8, 200)
    expected = _row_means_expected(x)
    _, result = code_and_output(row_means, (x,), pallas_loop_type=loop_type)
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(row_means, (x,)), expected)


def test_sizes_of_a_partial_tile_lower_for_every_chip():
    check_tpu_lowering(row_means, (torch.randn(8, 200),))


@pallasite.kernel(config=pallasite.Config(block_sizes=[128]))
def count_outer(x):
    n = x.size(0)
    out = torch.zeros([n, 3], dtype=torch.float32, device=x.device)
    for t in hl.tile(n):
        v = x[t]
        out[t, 0] = v * 0 + v.new_ones(v.shape).sum()
        out[t, 1] = v * 0 + v.size(0)
        out[t, 2] = v * 0 + 1.0 / v.shape[0] * v.numel()
    return out


def test_sizes_of_a_partial_outer_tile():
    x = torch.randn(200)
    counts = torch.tensor([128.0] * 128 + [72.0] * 72)
    expected = torch.stack([counts, counts, torch.ones(200)], 1)
    _, result = code_and_output(count_outer, (x,))
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(count_outer, (x,)), expected)


@pallasite.kernel
def chunked_welford(x):
    n, m = x.shape
    mean_out = torch.empty([n], dtype=torch.float32, device=x.device)
    var_out = torch.empty([n], dtype=torch.float32, device=x.device)
    for tn in hl.tile(n):
        count = hl.zeros([tn], dtype=torch.float32)
        mean = hl.zeros([tn], dtype=torch.float32)
        m2 = hl.zeros([tn], dtype=torch.float32)
        for tm in hl.tile(m):
            chunk = x[tn, tm].float()
            size = chunk.size(-1)
            chunk_mean = chunk.sum(-1) / size
            chunk_m2 = ((chunk - chunk_mean[:, None]) ** 2).sum(-1)
            total = count + size
            delta = chunk_mean - mean
            mean = mean + delta * size / total
            m2 = m2 + chunk_m2 + delta * delta * count * size / total
            count = total
        mean_out[tn] = mean
        var_out[tn] = m2 / count
    return mean_out, var_out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_chunked_welford_over_a_partial_tile(loop_type):
    x = torch.randn(16, 300)
    expected = (x.mean(1), x.var(1, correction=0))
    config = pallasite.Config(block_sizes=[8, 128], pallas_loop_type=loop_type)
    _, result = code_and_output(chunked_welford, (x,), **config)
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(chunked_welford, (x,)), expected)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def root_scaled(x):
    n, m = x.shape
    out = torch.zeros([n], dtype=torch.float32, device=x.device)
    for tn in hl.tile(n):
        acc = hl.zeros([tn], dtype=torch.float32)
        for tm in hl.tile(m):
            v = x[tn, tm]
            acc = acc + v.sum(1) / math.sqrt(v.size(1))  # a Python number: whole tiles only
        out[tn] = acc
    return out


def test_a_dim_without_partial_tiles_keeps_its_int():
    x = torch.randn(8, 256)
    expected = (x[:, :128].sum(1) + x[:, 128:].sum(1)) / math.sqrt(128)
    _, result = code_and_output(root_scaled, (x,))
    torch.testing.assert_close(result, expected)


def test_a_python_float_of_a_partial_tile_size_is_refused_clearly():
    with pytest.raises(exc.UnsupportedOperation, match=r"extent of tile 'tm'.*differs between tiles") as info:
        root_scaled(torch.randn(8, 200))
    assert "math.sqrt(v.size(1))" in str(info.value)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8]))
def size_forms(x):
    n, m = x.shape
    out = torch.zeros([n, 6], dtype=torch.float32, device=x.device)
    for t in hl.tile(n):
        v = x[t, :]
        z = hl.zeros([t], dtype=torch.float32)
        out[t, 0] = z + v.size()[0]
        out[t, 1] = z + v.shape[-2]
        out[t, 2] = z + hl.zeros([t]).size(0)
        if v.size(0) == 8:  # a comparison of the extent: a device if
            out[t, 3] = z + 1.0
        out[t, 4] = z + v.numel() / m
        out[t, 5] = torch.cumsum(v, 0)[:, 0]  # pallasite's own code (a scan) still sees whole blocks
    return out


def test_every_spelling_of_a_partial_tile_size():
    """(trial J) `v.size()[0]`, `v.shape[-2]`, `hl.zeros([t]).size(0)`, `v.numel()` and
    `if v.size(0) == 8:` on the last tile of 20 rows in blocks of 8 (4 valid)."""
    x = torch.randn(20, 16)
    rows = torch.tensor([8.0] * 16 + [4.0] * 4)
    scan = torch.cat([x[:16, 0].reshape(2, 8).cumsum(1).reshape(-1), x[16:, 0].cumsum(0)])
    expected = torch.stack([rows, rows, rows, (rows == 8).float(), rows, scan], 1)
    _, result = code_and_output(size_forms, (x,))
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(size_forms, (x,)), expected)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8]))
def length_of(x):
    out = torch.zeros([x.size(0)], dtype=torch.float32, device=x.device)
    for t in hl.tile(x.size(0)):
        v = x[t, :]
        out[t] = v[:, 0] * 0 + len(v)
    return out


def test_len_of_a_partial_tile_value_is_refused_clearly():
    with pytest.raises(exc.UnsupportedOperation, match=r"extent of tile 't'.*the last tile of 20 holds 4 of its 8"):
        length_of(torch.randn(20, 16))
    torch.testing.assert_close(length_of(torch.randn(16, 16)), torch.full((16,), 8.0))  # whole tiles: an int


@pallasite.kernel(config=pallasite.Config(block_sizes=[8]))
def last_rows(x):
    n, m = x.shape
    out = torch.zeros([n, m], dtype=torch.float32, device=x.device)
    for t in hl.tile(n):
        v = x[t, :]
        out[t, :] = v * 0 + x[t.begin + v.size(0) - 1, :]
    return out


def test_an_index_from_a_partial_tile_size_is_bounded_exactly():
    """(trial J) `x[t.begin + v.size(0) - 1, :]` is `t.end - 1`: interval arithmetic on
    `t.begin + (t.end - t.begin) - 1` gave [-9, 35] and refused it; a scalar of one tile dim's
    begin and end is bounded by evaluating it at each tile ([7, 19])."""
    x = torch.randn(20, 128)
    expected = torch.cat([x[7].expand(8, 128), x[15].expand(8, 128), x[19].expand(4, 128)])
    torch.testing.assert_close(code_and_output(last_rows, (x,))[1], expected)
    torch.testing.assert_close(run_ref(last_rows, (x,)), expected)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def sizes_in_torch_calls(x):
    n, m = x.shape
    out = torch.zeros([6, n, m], dtype=torch.float32, device=x.device)
    for tn, tm in hl.tile([n, m]):
        v = x[tn, tm]
        out[0, tn, tm] = torch.where(v > 0, v.size(1), v.size(0)).float()
        out[1, tn, tm] = torch.full_like(v, v.size(1))
        out[2, tn, tm] = torch.clamp(v * 100, max=v.size(1))
        out[3, tn, tm] = v * 0 + hl.arange(v.size(1))[None, :].float()
        out[4, tn, tm] = v * max(v.size(1), 100)
        out[5, tn, tm] = v * 0 + torch.numel(v)
    return out


def test_a_partial_tile_size_in_torch_calls():
    """(trial K) torch.where / full_like / clamp of a partial tile's size raised torch's raw
    TypeError (its argument parser took the size for neither a number nor a tensor);
    hl.arange(v.size(1)) and builtin max(v.size(1), 100) were refused; torch.numel(v) too."""
    x = torch.randn(20, 200)
    cols = torch.tensor([128.0] * 128 + [72.0] * 72)
    rows = torch.tensor([8.0] * 16 + [4.0] * 4)
    positions = torch.cat([torch.arange(128.0), torch.arange(72.0)])
    expected = torch.stack([
        torch.where(x > 0, cols[None, :], rows[:, None]), cols[None, :].expand(20, 200),
        torch.clamp(x * 100, max=cols[None, :]), positions[None, :].expand(20, 200),
        x * torch.clamp(cols, min=100)[None, :], rows[:, None] * cols[None, :]])
    torch.testing.assert_close(code_and_output(sizes_in_torch_calls, (x,))[1], expected)
    torch.testing.assert_close(run_ref(sizes_in_torch_calls, (x,)), expected)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 16]))
def size_bits(x, r: int):
    n, m = x.shape
    out = torch.zeros([4, n, m], dtype=torch.int32, device=x.device)
    for tn, tm in hl.tile([n, m]):
        v = x[tn, tm]
        z = hl.zeros([tn, tm], dtype=torch.int32)
        out[0, tn, tm] = z + (v.size(1) << 2) + (1 << v.size(0))
        out[1, tn, tm] = z + (v.size(1) & 3) + (v.size(1) >> 1)
        q, rest = divmod(v.size(1), 3)
        out[2, tn, tm] = z + q * 10 + rest
        out[3, tn, tm] = z + (v.size(1) * r) % 1000
    return out


def test_shifts_bitwise_and_divmod_of_a_partial_tile_size():
    """(trial L) `v.size(1) << 2`, `& 3`, `divmod(v.size(1), 3)` raised torch's raw TypeError; and
    `(v.size(1) * r) % 1000` with r = 2**26 was refused as past int32 (the extent's interval is
    [5, 16], evaluated at each tile, not [-16, 37])."""
    x = torch.randn(20, 37)
    r = 1 << 26
    cols = torch.tensor([16] * 32 + [5] * 5)
    rows = torch.tensor([8] * 16 + [4] * 4)
    expected = torch.stack([((cols << 2)[None, :] + (1 << rows)[:, None]),
                            ((cols & 3) + (cols >> 1))[None, :].expand(20, 37),
                            ((cols // 3) * 10 + cols % 3)[None, :].expand(20, 37),
                            ((cols * r) % 1000)[None, :].expand(20, 37)]).int()
    torch.testing.assert_close(size_bits(x, r), expected)
    torch.testing.assert_close(run_ref(size_bits, (x, r)), expected)
