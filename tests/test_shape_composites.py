"""Shape composites (ir/ops/shapes.py): torch.outer, F.glu, torch.tril/triu of a device
value, torch.flip, Tensor.repeat, torch.tile and torch.repeat_interleave. Against eager torch and reference mode, with a
partial tile where the composite keeps a tiled axis whole."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def outer_and_glu(a, b, x):
    p = torch.empty([a.size(0), b.size(0)], dtype=torch.float32)
    g = torch.empty([x.size(0), x.size(1) // 2], dtype=x.dtype)
    for t in hl.tile(a.size(0)):
        p[t, :] = torch.outer(a[t], b[:]) + a[t].outer(b[:]) * 0.5
    for t in hl.tile(x.size(0)):
        g[t, :] = F.glu(x[t, :])
    return p, g


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_outer_and_glu_are_torchs(dtype):
    torch.manual_seed(0)  # fixed inputs: the outcome depends on nothing else
    a, b, x = torch.randn(20), torch.randn(16), torch.randn(20, 256).to(dtype)
    expected = (torch.outer(a, b) * 1.5, F.glu(x))
    _, compiled = code_and_output(outer_and_glu, (a, b, x), block_sizes=[8, 8])
    for result in (compiled, run_ref(outer_and_glu, (a, b, x), block_sizes=[8, 8])):
        for got, want in zip(result, expected):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pallasite.kernel
def triangles(x):
    low, high = torch.empty_like(x), torch.empty_like(x)
    for ti, tj in hl.tile([x.size(0), x.size(1)]):
        v = x[ti, tj]
        low[ti, tj] = torch.tril(v)
        high[ti, tj] = v.triu(diagonal=1) + torch.tril(v, -2)
    return low, high


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool])
def test_tril_and_triu_count_within_the_tile(dtype):
    """torch.tril of a device value is the tile's own triangle: the rows and columns of the
    [8, 128] block, as torch.tril of that slice, and reference mode."""
    torch.manual_seed(0)  # fixed inputs: the outcome depends on nothing else
    x = (torch.randn(16, 256) * 10).to(dtype)

    def by_tiles(fn):
        out = torch.empty_like(x)
        for i in range(0, 16, 8):
            for j in range(0, 256, 128):
                out[i:i + 8, j:j + 128] = fn(x[i:i + 8, j:j + 128])
        return out

    expected = (by_tiles(torch.tril), by_tiles(lambda v: v.triu(diagonal=1) + torch.tril(v, -2)))
    for result in (code_and_output(triangles, (x,), block_sizes=[8, 128])[1],
                   run_ref(triangles, (x,), block_sizes=[8, 128])):
        for got, want in zip(result, expected):
            assert torch.equal(got, want)


@pallasite.kernel
def repeats(x):
    a = torch.empty([x.size(0), 2 * x.size(1)], dtype=x.dtype)
    b = torch.empty([x.size(0), 3 * x.size(1)], dtype=x.dtype)
    for t in hl.tile(x.size(0)):
        v = x[t, :]
        a[t, :] = v.repeat(1, 2)
        b[t, :] = torch.tile(v, (3,))
    return a, b


def test_repeat_and_tile_along_a_whole_axis():
    torch.manual_seed(0)  # fixed inputs: the outcome depends on nothing else
    x = torch.randn(20, 128)
    expected = (x.repeat(1, 2), torch.tile(x, (3,)))
    for result in (code_and_output(repeats, (x,), block_sizes=[8])[1], run_ref(repeats, (x,), block_sizes=[8])):
        for got, want in zip(result, expected):
            assert torch.equal(got, want)


@pallasite.kernel
def interleaved_repeats(x, r: int):
    m, n = x.shape
    lanes = torch.empty([m, r * n], dtype=x.dtype)
    rows = torch.empty([m, 2, n], dtype=x.dtype)
    flat = torch.empty([m, 3 * n], dtype=x.dtype)
    for t in hl.tile(m):
        v = x[t, :]
        lanes[t, :] = torch.repeat_interleave(v, r, dim=1)
        rows[t, :, :] = v[:, None, :].repeat_interleave(2, dim=1)
        flat[t, :] = v[:, None, :].repeat_interleave(3, -1).reshape(v.size(0), 3 * n)
    return lanes, rows, flat


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
def test_repeat_interleave_by_an_int_is_torchs(dtype):
    """A partial row tile (13 rows in tiles of 8); the count from an int argument."""
    x = (torch.randn(13, 64, generator=torch.Generator().manual_seed(2)) * 4).to(dtype)
    expected = (x.repeat_interleave(4, 1), x[:, None, :].repeat_interleave(2, 1), x.repeat_interleave(3, 1))
    for result in (code_and_output(interleaved_repeats, (x, 4), block_sizes=[8])[1],
                   run_ref(interleaved_repeats, (x, 4), block_sizes=[8])):
        for got, want in zip(result, expected):
            assert torch.equal(got, want)


def test_repeat_interleave_by_counts_from_a_tensor_is_refused_naming_the_line():
    @pallasite.kernel
    def counted(x, counts):
        out = torch.empty([x.size(0), 2 * x.size(1)], dtype=x.dtype)
        for t in hl.tile(x.size(0)):
            out[t, :] = x[t, :].repeat_interleave(counts[t], dim=0)
        return out

    with pytest.raises(exc.UnsupportedOperation, match="repeats must be a number known when compiling") as info:
        code_and_output(counted, (torch.randn(8, 16), torch.ones(8, dtype=torch.int32)))
    assert "x[t, :].repeat_interleave(counts[t], dim=0)" in str(info.value)


def test_shape_composite_refusals_name_the_line():
    @pallasite.kernel
    def odd_glu(x):
        out = torch.empty([x.size(0), 3], dtype=x.dtype)
        for t in hl.tile(x.size(0)):
            out[t, :] = F.glu(x[t, :])
        return out

    with pytest.raises(exc.ShapeMismatch, match="glu") as info:  # torch: halving needs an even size
        code_and_output(odd_glu, (torch.randn(8, 7),))
    assert "F.glu(x[t, :])" in str(info.value)


@pallasite.kernel
def flips(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t, :] = torch.flip(x[t, :], [1]) + x[t, :].flip(-1) * 2
    return out


@pallasite.kernel
def flip_rows(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t, :] = torch.flip(x[t, :], (0, 1))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_flip_is_torchs_bit_for_bit(dtype):
    """Mosaic has no lane reversal: flip is a gather by reversed positions, exact; along the
    tile's own rows it reverses the tile's rows (torch.flip of that slice)."""
    torch.manual_seed(0)  # fixed inputs: the outcome depends on nothing else
    x = (torch.randn(20, 128) * 5).to(dtype)
    x.view(-1)[:3] = 0 if dtype == torch.int32 else torch.tensor([float("nan"), -0.0, float("inf")]).to(dtype)
    expected = torch.flip(x, [1]) + x.flip(-1) * 2
    for result in (code_and_output(flips, (x,), block_sizes=[8])[1], run_ref(flips, (x,), block_sizes=[8])):
        torch.testing.assert_close(result, expected, equal_nan=True, rtol=0, atol=0)
    y = x[:16]
    expected = torch.cat([torch.flip(y[:8], [0, 1]), torch.flip(y[8:], [0, 1])])
    for result in (code_and_output(flip_rows, (y,), block_sizes=[8])[1], run_ref(flip_rows, (y,), block_sizes=[8])):
        torch.testing.assert_close(result, expected, equal_nan=True, rtol=0, atol=0)


def test_flip_along_a_padded_tile_axis_is_refused_naming_the_line():
    with pytest.raises(exc.UnsupportedOperation, match="torch.flip is such a gather") as info:
        code_and_output(flip_rows, (torch.randn(20, 128),), block_sizes=[8])
    assert "torch.flip(x[t, :], (0, 1))" in str(info.value)


@pallasite.kernel
def rolls_and_differences(x):
    out = torch.empty([4, *x.shape], dtype=x.dtype)
    for t in hl.tile(x.size(0)):
        a = x[t, :]
        out[0, t, :] = torch.roll(a, 3, 1)
        out[1, t, :] = a.roll((-5,), (-1,))
        out[2, t, :] = torch.diff(a, dim=1, prepend=a[:, -1:])
        out[3, t, :] = torch.cat([torch.diff(a, n=2), a[:, :2]], 1)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool])
def test_roll_and_diff_are_torchs(dtype):
    """Trial BB's refused list: torch.roll along dims and torch.diff (n, prepend; `!=` of bools),
    over a partial row tile."""
    torch.manual_seed(0)  # fixed inputs: the outcome depends on nothing else
    x = torch.randn(20, 128) > 0 if dtype == torch.bool else (torch.randn(20, 128) * 10).to(dtype)
    expected = torch.stack([torch.roll(x, 3, 1), x.roll((-5,), (-1,)), torch.diff(x, dim=1, prepend=x[:, -1:]),
                            torch.cat([torch.diff(x, n=2), x[:, :2]], 1)])
    for result in (code_and_output(rolls_and_differences, (x,), block_sizes=[8])[1],
                   run_ref(rolls_and_differences, (x,), block_sizes=[8])):
        assert torch.equal(result, expected)


@pallasite.kernel
def matrix_vector(x, v):
    out = torch.empty([x.size(0)], dtype=x.dtype)
    for t in hl.tile(x.size(0)):
        out[t] = torch.mv(x[t, :], v[:])
    return out


def test_mv_is_a_matmul_of_a_vector():
    torch.manual_seed(0)
    x, v = torch.randn(20, 128), torch.randn(128)
    for result in (code_and_output(matrix_vector, (x, v), block_sizes=[8])[1],
                   run_ref(matrix_vector, (x, v), block_sizes=[8])):
        torch.testing.assert_close(result, torch.mv(x, v), rtol=1e-5, atol=1e-4)


def test_repeat_interleave_along_a_padded_tile_axis_is_refused_naming_the_line():
    """A trial's finding: the refusal came later, about a `sum` and a reshape the user never wrote."""
    @pallasite.kernel(config=pallasite.Config(block_sizes=[16]))
    def repeated_rows(x):
        out = torch.zeros([x.size(1)], dtype=torch.float32)
        for tm in hl.tile(x.size(0)):
            v = x[tm, :].repeat_interleave(2, dim=0)
            hl.atomic_add(out, [slice(None)], v.sum(0))
        return out

    with pytest.raises(exc.UnsupportedOperation, match="along dim 0, which a partial tile pads") as info:
        code_and_output(repeated_rows, (torch.randn(37, 24),))
    assert "x[tm, :].repeat_interleave(2, dim=0)" in str(info.value)
