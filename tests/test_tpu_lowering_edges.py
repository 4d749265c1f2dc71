"""Kernels that ran in interpret mode but did not lower to Mosaic (or to check_tpu_lowering).

Mosaic loads and stores SMEM one scalar at a time: a whole-ref copy-in
(`out_ref[...] = out_in_ref[...]`) ran in interpret mode but failed to lower.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.testing import check_tpu_lowering, code_and_output


@pallasite.kernel
def row_sums_into_zeros(x):
    b, n = x.size()
    out = torch.zeros([b], dtype=torch.float32, device=x.device)
    for g in hl.grid(b):
        out[g] = x[g, :].sum()
    return out


@pallasite.kernel
def row_sums_in_place(x, out):
    for g in hl.grid(x.size(0)):
        out[g] = out[g] + x[g, :].sum()
    return out


@pallasite.kernel
def grid_cells_in_place(x, out):
    for g, h in hl.grid([x.size(0), x.size(1)]):
        out[g, h] = out[g, h] * 2.0 + x[g, h, :].sum()
    return out


def test_a_zeros_output_written_by_scalar_index():
    x = torch.randn(4, 44)
    code, out = code_and_output(row_sums_into_zeros, (x,))
    torch.testing.assert_close(out, x.sum(-1))
    assert "_copy_scalar" in code  # one scalar at a time
    check_tpu_lowering(row_sums_into_zeros, (x,))


def test_a_1d_argument_updated_in_place():
    x, out = torch.randn(5, 44), torch.randn(5)
    _, result = code_and_output(row_sums_in_place, (x, out.clone()))
    torch.testing.assert_close(result, out + x.sum(-1))
    check_tpu_lowering(row_sums_in_place, (x, out.clone()))


def test_a_2d_argument_updated_in_place():
    x, out = torch.randn(3, 5, 128), torch.randn(3, 5)
    _, result = code_and_output(grid_cells_in_place, (x, out.clone()))
    torch.testing.assert_close(result, out * 2 + x.sum(-1))
    check_tpu_lowering(grid_cells_in_place, (x, out.clone()))


@pallasite.kernel
def scaled_rows(x, eps: float = 1e-5):
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :] * torch.rsqrt(x[tile, :].pow(2).mean(-1, keepdim=True) + eps)
    return out


def test_check_tpu_lowering_fills_in_parameter_defaults():
    # check_tpu_lowering(k, [x]) for `def k(x, eps=1e-5)` used to fail with
    # "missing 1 required positional argument: 'eps'".
    check_tpu_lowering(scaled_rows, [torch.randn(16, 128)])


@pallasite.kernel
def row_and_column_products(x):
    rows = torch.empty([x.size(0)], dtype=x.dtype, device=x.device)
    cols = torch.empty([x.size(0) // 8, x.size(1)], dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0), block_size=8):
        block = x[tile, :]
        rows[tile] = block.prod(-1)
        cols[tile.id, :] = block.prod(0)
    return rows, cols


@pallasite.kernel
def whole_tile_product(x):
    out = torch.empty([x.size(0) // 8], dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0), block_size=8):
        out[tile.id] = x[tile, :].prod()
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_prod_lowers_as_halves_and_matches_torch(dtype):
    # Mosaic has no reduce_prod: x.prod(dim) ran in interpret mode and failed to lower.
    x = (torch.rand(16, 44) * 0.5 + 0.75) if dtype == torch.float32 else torch.randint(-1, 2, (16, 44), dtype=dtype)
    code, (rows, cols) = code_and_output(row_and_column_products, (x,))
    assert "prod_by_halves" in code and "jnp.prod" not in code
    torch.testing.assert_close(rows, x.prod(-1).to(dtype))
    torch.testing.assert_close(cols, torch.stack([x[:8].prod(0), x[8:].prod(0)]).to(dtype))
    check_tpu_lowering(row_and_column_products, (x,))


def test_a_whole_tile_product_lowers():
    x = torch.rand(16, 128) * 0.2 + 0.9
    _, out = code_and_output(whole_tile_product, (x,))
    torch.testing.assert_close(out, torch.stack([x[:8].prod(), x[8:].prod()]), rtol=1e-4, atol=0)
    check_tpu_lowering(whole_tile_product, (x,))


@pallasite.kernel
def chunked_row_product(x):
    out = torch.empty([x.size(0)], dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile, :].prod(-1)
    return out


def test_a_chunked_product_lowers():
    x = torch.rand(8, 300) * 0.02 + 0.99
    _, out = code_and_output(chunked_row_product, (x,), block_sizes=[8], reduction_loops=[128])
    torch.testing.assert_close(out, x.prod(-1), rtol=1e-4, atol=0)
    check_tpu_lowering(chunked_row_product, (x,), block_sizes=[8], reduction_loops=[128])
