"""Reductions and views of device values match torch eager on the same tile.

Reductions run over untiled dims, over whole blocks, and over tiled dims
whose extent the block does not divide: there the block's padded tail (NaN in
TPU interpret mode) must be replaced by the reduction's identity before
reducing, which the plan records as a `Mask` and the results prove.
"""
from __future__ import annotations

import math

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.testing import check_tpu_lowering


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def as_device_dtype(tensor: torch.Tensor) -> torch.Tensor:
    """Torch's int64 index results, as the int32 a TPU kernel computes."""
    return tensor.to(torch.int32) if tensor.dtype == torch.int64 else tensor


def mask_fills(kernel, args) -> set:
    """The fill values of every mask the plan applies before an op."""
    plan = kernel.bind(args).plan()
    return {mask.fill for masks in plan.calls[0].masks.values() for mask in masks}


# ------------------------------------------ reductions over an untiled dim --


def row_reduction_kernel(reduce, out_dtype: torch.dtype):
    """`out[tile_m, :] = reduce(x[tile_m, :])` as an (m, 1) column."""

    @pallasite.kernel
    def row_reduction(x: torch.Tensor) -> torch.Tensor:
        m, n = x.size()
        out = torch.empty([m, 1], dtype=out_dtype)
        for tile_m in hl.tile(m, block_size=8):
            reduced = reduce(x[tile_m, :])
            out[tile_m, :] = reduced if reduced.ndim == 2 else reduced[:, None]
        return out

    return row_reduction


ROW_REDUCTIONS = [
    ("sum", lambda v: v.sum(1)),
    ("sum_keepdim", lambda v: v.sum(dim=1, keepdim=True)),
    ("sum_negative_dim", lambda v: torch.sum(v, -1)),
    ("sum_dim_tuple", lambda v: v.sum(dim=(1,))),
    ("mean", lambda v: torch.mean(v, dim=1)),
    ("mean_keepdim", lambda v: v.mean(1, keepdim=True)),
    ("amax", lambda v: torch.amax(v, dim=1)),
    ("amax_keepdim", lambda v: v.amax(1, True)),
    ("amin", lambda v: v.amin(dim=-1)),
    ("amin_keepdim", lambda v: torch.amin(v, 1, keepdim=True)),
    ("max_dim_values", lambda v: torch.max(v, dim=1).values),
    ("max_dim_indices", lambda v: torch.max(v, dim=1).indices),
    ("max_dim_keepdim_tuple", lambda v: torch.max(v, 1, keepdim=True)[0]),
    ("max_method_unpacked", lambda v: sum_of_values_and_indices(*v.max(1))),
    ("min_dim_values", lambda v: v.min(dim=1).values),
    ("min_dim_indices_keepdim", lambda v: torch.min(v, 1, keepdim=True).indices),
    ("argmax", lambda v: torch.argmax(v, dim=1)),
    ("argmax_keepdim", lambda v: v.argmax(dim=1, keepdim=True)),
    ("argmin", lambda v: torch.argmin(v, 1)),
    ("prod", lambda v: (1 + v * 0.05).prod(1)),
    ("prod_keepdim", lambda v: torch.prod(1 + v * 0.05, dim=1, keepdim=True)),
    ("logsumexp", lambda v: torch.logsumexp(v, dim=1)),
    ("any", lambda v: (v > 2.5).any(1)),
    ("all", lambda v: torch.all(v > -2.5, dim=1)),
    ("sum_of_squares", lambda v: (v * v).sum(1)),
    ("softmax_denominator", lambda v: torch.exp(v - v.amax(1, keepdim=True)).sum(1, keepdim=True)),
]


def sum_of_values_and_indices(values, indices):
    return values + indices


@pytest.mark.parametrize("reduce", [pytest.param(fn, id=name) for name, fn in ROW_REDUCTIONS])
def test_reduction_over_untiled_dim_matches_torch(reduce):
    # 12 rows: the last row tile of 8 is partial; 200 columns: one full-width block.
    x = torch.randn(12, 200, generator=_gen(0))
    expected = as_device_dtype(reduce(x)).reshape(12, 1)
    result = row_reduction_kernel(reduce, expected.dtype)(x)
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "dtype, reduce",
    [
        pytest.param(torch.bfloat16, lambda v: v.sum(1), id="bf16_sum_accumulates_in_f32"),
        pytest.param(torch.bfloat16, lambda v: v.mean(1), id="bf16_mean"),
        pytest.param(torch.bfloat16, lambda v: v.amax(1), id="bf16_amax"),
        pytest.param(torch.bfloat16, lambda v: v.argmax(1), id="bf16_argmax"),
        pytest.param(torch.int32, lambda v: v.sum(1), id="int32_sum"),
        pytest.param(torch.int32, lambda v: v.amax(1), id="int32_amax"),
        pytest.param(torch.int32, lambda v: v.argmin(1), id="int32_argmin"),
        pytest.param(torch.int32, lambda v: v.argmax(1), id="int32_argmax"),
        pytest.param(torch.int8, lambda v: v.amax(1), id="int8_amax"),
        pytest.param(torch.int16, lambda v: v.sum(1), id="int16_sum"),
        pytest.param(torch.int16, lambda v: v.argmax(1), id="int16_argmax"),
    ],
)
def test_reduction_dtype_matches_torch(dtype, reduce):
    """Each also lowers for TPU (Mosaic reduces 32-bit integers only and takes argmax of
    float32 only: narrower integers are widened, an integer argmax is max, compare, min)."""
    if not dtype.is_floating_point:
        low = -100 if dtype == torch.int8 else -1000  # repeated values: the first index wins
        x = torch.randint(low, -low, (16, 256), dtype=torch.int32, generator=_gen(1)).to(dtype)
    else:
        x = (torch.randn(16, 256, generator=_gen(1)) + 3).to(dtype)
    expected = as_device_dtype(reduce(x)).reshape(16, 1)
    kernel = row_reduction_kernel(reduce, expected.dtype)
    torch.testing.assert_close(kernel(x), expected, atol=2e-2, rtol=1e-2)
    check_tpu_lowering(kernel, (x,))


@pallasite.kernel
def column_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    k, n = x.size()
    total = torch.empty([n], dtype=torch.float32)
    peak_row = torch.empty([n], dtype=torch.int32)
    mean = torch.empty([1, n], dtype=torch.float32)
    for tile_n in hl.tile(n, block_size=128):
        block = x[:, tile_n]
        total[tile_n] = block.sum(0)
        peak_row[tile_n] = torch.argmax(block, dim=0)
        mean[:, tile_n] = block.mean(dim=0, keepdim=True)
    return total, peak_row, mean


def test_reductions_over_the_leading_untiled_dim():
    x = torch.randn(24, 256, generator=_gen(2))
    total, peak_row, mean = column_stats(x)
    torch.testing.assert_close(total, x.sum(0), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(peak_row, x.argmax(0).to(torch.int32))
    torch.testing.assert_close(mean, x.mean(0, keepdim=True))


# ---------------------------------------------- full reductions of a block --


@pallasite.kernel
def block_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    m, n = x.size()
    tiles_m, tiles_n = (m + 7) // 8, (n + 127) // 128
    total = torch.empty([tiles_m, tiles_n], dtype=torch.float32)
    mean = torch.empty([tiles_m, tiles_n], dtype=torch.float32)
    peak = torch.empty([tiles_m, tiles_n], dtype=torch.float32)
    low = torch.empty([tiles_m, tiles_n], dtype=torch.float32)
    for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
        block = x[tile_m, tile_n]
        total[tile_m.id, tile_n.id] = block.sum()
        mean[tile_m.id, tile_n.id] = torch.mean(block)
        peak[tile_m.id, tile_n.id] = block.max()
        low[tile_m.id, tile_n.id] = torch.amin(block, dim=(0, 1))
    return total, mean, peak, low


def per_block(x: torch.Tensor, reduce, rows: int = 8, cols: int = 128) -> torch.Tensor:
    return torch.stack([
        torch.stack([reduce(x[i:i + rows, j:j + cols]) for j in range(0, x.size(1), cols)])
        for i in range(0, x.size(0), rows)
    ])


@pytest.mark.parametrize("shape", [(16, 256), (20, 200), (5, 100)], ids=["divisible", "partial", "block_larger"])
def test_full_reduction_of_each_block(shape):
    x = torch.randn(shape, generator=_gen(3))
    total, mean, peak, low = block_stats(x)
    torch.testing.assert_close(total, per_block(x, torch.sum), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mean, per_block(x, torch.mean), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(peak, per_block(x, torch.amax))
    torch.testing.assert_close(low, per_block(x, torch.amin))


def test_full_reductions_of_a_divisible_block_need_no_masks():
    x = torch.randn(16, 256, generator=_gen(3))
    assert mask_fills(block_stats, (x,)) == set()


# -------------------------- reductions over a tiled dim with a padded tail --


def tail_reduction_kernel(reduce, out_dtype: torch.dtype):
    """One tile of 128 over a 1-D tensor of 100: the block's last 28 lanes are padding."""

    @pallasite.kernel
    def tail_reduction(x: torch.Tensor) -> torch.Tensor:
        (n,) = x.size()
        out = torch.empty([1], dtype=out_dtype)
        for tile in hl.tile(n, block_size=128):
            out[tile.id] = reduce(x[tile])
        return out

    return tail_reduction


# (id, reduce, input, identity the padded tail must be replaced with)
TAIL_REDUCTIONS = [
    ("sum", lambda v: v.sum(), "normal", 0),
    ("mean_over_valid_count", lambda v: v.mean(), "positive", 0),
    ("amax_of_negatives", lambda v: v.amax(), "negative", -math.inf),
    ("max_of_negatives", lambda v: torch.max(v), "negative", -math.inf),
    ("max_dim_values", lambda v: torch.max(v, dim=0).values, "negative", -math.inf),
    ("amin_of_positives", lambda v: v.amin(), "positive", math.inf),
    ("min_dim_values", lambda v: v.min(0)[0], "positive", math.inf),
    ("prod", lambda v: v.prod(), "near_one", 1),
    ("argmax_of_negatives", lambda v: v.argmax(), "negative", -math.inf),
    ("argmin_of_positives", lambda v: torch.argmin(v, dim=0), "positive", math.inf),
    ("max_dim_indices", lambda v: torch.max(v, 0).indices, "negative", -math.inf),
    ("logsumexp", lambda v: torch.logsumexp(v, 0), "normal", -math.inf),
    ("any", lambda v: (v > 0.5).any(), "positive", False),
    ("all", lambda v: (v > 0.5).all(), "positive", True),
]

TAIL_INPUTS = {
    "normal": lambda: torch.randn(100, generator=_gen(4)),
    "positive": lambda: torch.rand(100, generator=_gen(5)) + 1,
    "negative": lambda: -torch.rand(100, generator=_gen(6)) - 1,
    "near_one": lambda: 1 + 0.01 * torch.randn(100, generator=_gen(7)),
}


@pytest.mark.parametrize(
    "reduce, inputs, identity",
    [pytest.param(fn, inputs, identity, id=name) for name, fn, inputs, identity in TAIL_REDUCTIONS],
)
def test_padded_tail_is_masked_with_the_reduction_identity(reduce, inputs, identity):
    x = TAIL_INPUTS[inputs]()
    expected = as_device_dtype(reduce(x)).reshape(1)
    kernel = tail_reduction_kernel(reduce, expected.dtype)
    torch.testing.assert_close(kernel(x), expected, atol=1e-5, rtol=1e-5)
    assert mask_fills(kernel, (x,)) == {identity}


def test_a_bool_result_at_a_scalar_index_is_stored_as_a_one_element_run():
    # A bool tensor cannot live in SMEM (32-bit only) and Mosaic stores only vectors to
    # VMEM: the store writes the run [tile.id, tile.id + 1).
    x = TAIL_INPUTS["positive"]()
    kernel = tail_reduction_kernel(lambda v: (v > 1.5).any(), torch.bool)
    torch.testing.assert_close(kernel(x), (x > 1.5).any().reshape(1))
    codes = check_tpu_lowering(kernel, (x,))
    assert "out_ref[pl.ds(tile_id, 1)] = " in codes["v7x"]


@pallasite.kernel
def tile_sizes(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    (n,) = x.size()
    sizes = torch.empty([(n + 127) // 128], dtype=torch.float32)
    index_sums = torch.empty([(n + 127) // 128], dtype=torch.int32)
    for tile in hl.tile(n, block_size=128):
        sizes[tile.id] = hl.full([tile], 1.0).sum()
        index_sums[tile.id] = tile.index.sum()
    return sizes, index_sums


def test_values_shaped_by_a_partial_tile_reduce_over_its_valid_part():
    sizes, index_sums = tile_sizes(torch.randn(300, generator=_gen(8)))
    torch.testing.assert_close(sizes, torch.tensor([128.0, 128.0, 44.0]))
    expected = torch.tensor([sum(range(0, 128)), sum(range(128, 256)), sum(range(256, 300))], dtype=torch.int32)
    torch.testing.assert_close(index_sums, expected)


def test_int32_sum_and_min_mask_the_tail():
    x = torch.randint(1, 100, (100,), dtype=torch.int32, generator=_gen(8))
    for reduce in (torch.sum, torch.amin, torch.amax):
        kernel = tail_reduction_kernel(reduce, torch.int32)
        torch.testing.assert_close(kernel(x), reduce(x).reshape(1).to(torch.int32))


def test_no_mask_when_the_block_divides_the_dim():
    x = torch.randn(128, generator=_gen(9))  # one tile: `out` has one element
    kernel = tail_reduction_kernel(torch.sum, torch.float32)
    assert mask_fills(kernel, (x,)) == set()


def per_n_tile_kernel(reduce, out_dtype: torch.dtype):
    """`out[tile_m, tile_n.id] = reduce(x[tile_m, tile_n])`: one result per row and column tile."""

    @pallasite.kernel
    def per_n_tile(x: torch.Tensor) -> torch.Tensor:
        m, n = x.size()
        out = torch.empty([m, (n + 127) // 128], dtype=out_dtype)
        for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
            out[tile_m, tile_n.id] = reduce(x[tile_m, tile_n], tile_n)
        return out

    return per_n_tile


PER_N_TILE = [
    ("sum", lambda v, tile: v.sum(1)),
    ("mean", lambda v, tile: v.mean(dim=1)),
    ("amax", lambda v, tile: v.amax(1)),
    ("amin", lambda v, tile: torch.amin(v, 1)),
    ("max_values", lambda v, tile: v.max(1).values),
    ("prod", lambda v, tile: (v * 0.01 + 1).prod(1)),
    ("argmin", lambda v, tile: torch.argmin(v, dim=1)),
    ("sum_through_transpose", lambda v, tile: v.T.sum(0)),
    ("amax_through_new_axis", lambda v, tile: v[:, None, :].amax(dim=(1, 2))),
    ("masked_sum_of_pointwise", lambda v, tile: torch.where(v > 0, v * 2, -v).sum(1)),
]


@pytest.mark.parametrize("reduce", [pytest.param(fn, id=name) for name, fn in PER_N_TILE])
def test_reduction_over_tiled_dim_with_partial_last_tile(reduce):
    # n = 200 with blocks of 128: the second column tile holds 72 valid columns.
    x = torch.randn(16, 200, generator=_gen(10))
    columns = [(0, 128), (128, 200)]
    expected = torch.stack([as_device_dtype(reduce(x[:, begin:end], None)) for begin, end in columns], dim=1)
    result = per_n_tile_kernel(reduce, expected.dtype)(x)
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)


def test_argmax_offset_by_tile_begin_gives_the_column():
    x = torch.randn(16, 200, generator=_gen(11))
    kernel = per_n_tile_kernel(lambda v, tile: v.argmax(1) + tile.begin, torch.int32)
    result = kernel(x)
    torch.testing.assert_close(result[:, 0], x[:, :128].argmax(1).to(torch.int32))
    torch.testing.assert_close(result[:, 1], (x[:, 128:].argmax(1) + 128).to(torch.int32))


@pallasite.kernel
def mean_tail_keepdim(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m, 1], dtype=torch.float32)
    for tile_m, tile_n in hl.tile([m, n], block_size=[8, 256]):
        out[tile_m, :] = x[tile_m, tile_n].mean(dim=1, keepdim=True)
    return out


def test_mean_over_block_larger_than_the_dim_divides_by_valid_count():
    x = torch.rand(16, 200, generator=_gen(12)) + 1
    torch.testing.assert_close(mean_tail_keepdim(x), x.mean(1, keepdim=True))
    assert mask_fills(mean_tail_keepdim, (x,)) == {0}


def test_tail_masked_reductions_lower_to_mosaic():
    check_tpu_lowering(mean_tail_keepdim, (torch.rand(16, 200, generator=_gen(12)),))
    argmax_tail = tail_reduction_kernel(lambda v: v.argmax(), torch.int32)
    check_tpu_lowering(argmax_tail, (TAIL_INPUTS["negative"](),))


# -------------------------------------------------------------------- views --


@pallasite.kernel
def new_axes(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m, n = x.size()
    trailing = torch.empty([m, n, 1], dtype=x.dtype)
    middle = torch.empty([m, 1, n], dtype=x.dtype)
    squeezed = torch.empty([m, n], dtype=x.dtype)
    for tile_m in hl.tile(m, block_size=8):
        row = x[tile_m, :]
        trailing[tile_m, :, :] = row[:, :, None]
        middle[tile_m, :, :] = row.unsqueeze(1)
        squeezed[tile_m, :] = row[:, None, :].squeeze(1) + row.unsqueeze(-1).squeeze() + row[..., None, :][:, 0]
    return trailing, middle, squeezed


def test_none_unsqueeze_and_squeeze():
    x = torch.randn(16, 128, generator=_gen(20))
    trailing, middle, squeezed = new_axes(x)
    torch.testing.assert_close(trailing, x[:, :, None])
    torch.testing.assert_close(middle, x.unsqueeze(1))
    torch.testing.assert_close(squeezed, 3 * x)


@pallasite.kernel
def reshapes(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m, n = x.size()
    split = torch.empty([m, 2, n // 2], dtype=x.dtype)
    halves_summed = torch.empty([m, n // 2], dtype=x.dtype)
    merged = torch.empty([m, n], dtype=x.dtype)
    for tile_m in hl.tile(m, block_size=8):
        row = x[tile_m, :]
        split[tile_m, :, :] = row.reshape(tile_m.block_size, 2, n // 2)
        halves_summed[tile_m, :] = row.view(-1, 2, n // 2).sum(1)
        merged[tile_m, :] = row.reshape(8, 2, -1).flatten(1) * 2
    return split, halves_summed, merged


def test_reshape_view_and_flatten():
    x = torch.randn(16, 256, generator=_gen(21))
    split, halves_summed, merged = reshapes(x)
    torch.testing.assert_close(split, x.reshape(16, 2, 128))
    torch.testing.assert_close(halves_summed, x.view(16, 2, 128).sum(1))
    torch.testing.assert_close(merged, x * 2)


@pallasite.kernel
def transposes(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    k, n = x.size()
    by_t = torch.empty([n, k], dtype=x.dtype)
    by_transpose = torch.empty([n, k], dtype=x.dtype)
    by_permute = torch.empty([n, k], dtype=x.dtype)
    by_torch_t = torch.empty([n, k], dtype=x.dtype)
    for tile_n in hl.tile(n, block_size=128):
        block = x[:, tile_n]
        by_t[tile_n, :] = block.T
        by_transpose[tile_n, :] = block.transpose(0, 1) + 1
        by_permute[tile_n, :] = torch.permute(block, (1, 0)) * 2
        by_torch_t[tile_n, :] = torch.t(block).contiguous()
    return by_t, by_transpose, by_permute, by_torch_t


def test_transpose_permute_and_dot_t():
    x = torch.randn(16, 256, generator=_gen(22))
    by_t, by_transpose, by_permute, by_torch_t = transposes(x)
    torch.testing.assert_close(by_t, x.T)
    torch.testing.assert_close(by_transpose, x.transpose(0, 1) + 1)
    torch.testing.assert_close(by_permute, x.permute(1, 0) * 2)
    torch.testing.assert_close(by_torch_t, x.t())


def test_transpose_lowers_to_mosaic():
    check_tpu_lowering(transposes, (torch.randn(16, 256, generator=_gen(22)),))


@pallasite.kernel
def permute_3d(x: torch.Tensor) -> torch.Tensor:
    b, s, d = x.size()
    out = torch.empty([b, d, s], dtype=x.dtype)
    for tile_b in hl.tile(b, block_size=1):
        out[tile_b, :, :] = x[tile_b, :, :].permute(0, 2, 1)
    return out


def test_permute_of_a_3d_block():
    x = torch.randn(3, 16, 128, generator=_gen(23))
    torch.testing.assert_close(permute_3d(x), x.permute(0, 2, 1))


@pallasite.kernel
def broadcasts(x: torch.Tensor, row: torch.Tensor, col: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.size()
    combined = torch.empty_like(x)
    expanded = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
        block = x[tile_m, tile_n]
        combined[tile_m, tile_n] = block * row[tile_n][None, :] + col[tile_m, 0][:, None] - row[tile_n]
        expanded[tile_m, tile_n] = block.amax(1, keepdim=True).expand(8, 128) + col[tile_m, :].expand(-1, 128)
    return combined, expanded


def test_broadcasting_rows_columns_and_expand():
    # 20 rows: a partial last row tile; the per-row maximum spans one column tile.
    x = torch.randn(20, 256, generator=_gen(24))
    row = torch.randn(256, generator=_gen(25))
    col = torch.randn(20, 1, generator=_gen(26))
    combined, expanded = broadcasts(x, row, col)
    torch.testing.assert_close(combined, x * row[None, :] + col - row)
    block_max = torch.cat([x[:, :128].amax(1, keepdim=True).expand(-1, 128),
                           x[:, 128:].amax(1, keepdim=True).expand(-1, 128)], dim=1)
    torch.testing.assert_close(expanded, block_max + col)


@pallasite.kernel
def broadcast_store(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m, block_size=8):
        out[tile_m, :] = x[tile_m, :].sum(1, keepdim=True)  # (8, 1) stored into an (8, n) block
    return out


def test_store_broadcasts_a_column_over_the_block():
    x = torch.randn(16, 128, generator=_gen(27))
    torch.testing.assert_close(broadcast_store(x), x.sum(1, keepdim=True).expand(-1, 128), atol=1e-5, rtol=1e-5)
