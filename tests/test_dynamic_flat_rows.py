"""Flat views under static_shapes=False: `x.view(-1)` keeps the formula of its length
(`x_size0 * x_size1`), so one variant serves every size of the bucket, and a flat index
`rows[..., None] * w + cols` with a symbolic width w still reads rows of the 2-D view
(frontend/flat_rows.py). Helion's grouped GEMM (`grouped_gemm_jagged_tile`, written with
static_shapes=False) gathers A's rows and stores the output's rows so."""
from __future__ import annotations

import warnings

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel(static_shapes=False)
def flat_gather(x, idx):
    x_flat = x.view(-1)
    out = torch.empty(idx.shape, dtype=x.dtype, device=x.device)
    for t in hl.tile(idx.size(0)):
        out[t] = x_flat[idx[t]]
    return out


@pallasite.kernel(static_shapes=False)
def flat_row_gather(x, rows):
    d = x.size(1)
    x_flat = x.view(-1)
    out = torch.empty([rows.size(0), d], dtype=x.dtype, device=x.device)
    for t in hl.tile(rows.size(0)):
        for td in hl.tile(d):
            r = rows[t]
            out[t, td] = hl.load(x_flat, [r[:, None] * d + td.index[None, :]])
    return out


def _no_pinned_size():
    context = warnings.catch_warnings()
    context.__enter__()
    warnings.simplefilter("error")  # a pinned size warns: every new size would compile again
    return context


@pytest.mark.parametrize("kernel", [flat_gather, flat_row_gather])
def test_a_flat_view_serves_every_size_of_the_bucket(kernel):
    kernel.reset()
    context = _no_pinned_size()
    try:
        for n, d, m in [(40, 24, 16), (100, 56, 30), (90, 70, 140)]:  # one gather method (a guard)
            x = torch.randn(n, d)
            if kernel is flat_gather:
                index = torch.randint(0, n * d, (m,), dtype=torch.int32)
                expected = x.view(-1)[index.long()]
            else:
                index = torch.randint(0, n, (m,), dtype=torch.int32)
                expected = x[index.long()]
            config = dict(block_sizes=[128] if kernel is flat_gather else [128, 128])
            torch.testing.assert_close(code_and_output(kernel, (x, index), **config)[1], expected)
            torch.testing.assert_close(run_ref(kernel, (x, index), **config), expected)
    finally:
        context.__exit__(None, None, None)
    assert kernel.cache_size == 1


@pallasite.kernel(static_shapes=False)
def grouped_gemm_flat(a_packed, b, group_offsets):
    total_m, k = a_packed.shape
    _, n = b.shape
    a_flat = a_packed.view(-1)
    b_flat = b.view(-1)
    out = torch.empty(total_m, n, dtype=torch.promote_types(a_packed.dtype, b.dtype), device=a_packed.device)
    out_flat = out.view(-1)
    groups = group_offsets.size(0) - 1
    for tile_g in hl.tile(groups):
        starts = group_offsets[tile_g]
        ends = group_offsets[tile_g.index + 1]
        for tile_m in hl.jagged_tile(ends - starts):
            row_indices = starts[:, None] + tile_m.index[None, :]
            for tile_n in hl.tile(n):
                acc = hl.zeros([tile_g, tile_m, tile_n], dtype=torch.float32)
                for tile_k in hl.tile(k):
                    a_blk = hl.load(a_flat, [row_indices[:, :, None] * k + tile_k.index[None, None, :]])
                    b_blk = hl.load(b_flat, [starts[:, None, None] * 0 + tile_k.index[None, :, None] * n
                                             + tile_n.index[None, None, :]])
                    acc = torch.baddbmm(acc, a_blk, b_blk)
                hl.store(out_flat, [row_indices[:, :, None] * n + tile_n.index[None, None, :]], acc.to(out.dtype))
    return out


def _grouped_inputs(sizes, k, n):
    a = torch.randn(sum(sizes), k).to(torch.bfloat16)
    b = torch.randn(k, n).to(torch.bfloat16)
    offsets = torch.tensor([0, *torch.tensor(sizes).cumsum(0).tolist()], dtype=torch.int32)
    return a, b, offsets


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_grouped_gemm_through_flat_views_serves_two_sizes(loop_type):
    grouped_gemm_flat.reset()
    config = dict(block_sizes=[2, 32, 128, 128], pallas_loop_type=loop_type)
    for sizes, k, n in [([64, 128, 0, 37], 256, 128), ([20, 90, 130], 384, 256)]:
        inputs = _grouped_inputs(sizes, k, n)
        expected = (inputs[0].float() @ inputs[1].float()).to(torch.bfloat16)
        _, out = code_and_output(grouped_gemm_flat, inputs, **config)
        torch.testing.assert_close(out, expected, rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(run_ref(grouped_gemm_flat, inputs, **config), expected, rtol=1e-2, atol=1e-2)
    assert grouped_gemm_flat.cache_size == 1


def test_grouped_gemm_through_flat_views_default_config():
    grouped_gemm_flat.reset()
    inputs = _grouped_inputs([64, 128, 192, 256], 256, 128)
    expected = (inputs[0].float() @ inputs[1].float()).to(torch.bfloat16)
    torch.testing.assert_close(grouped_gemm_flat(*inputs), expected, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("static_shapes", [True, False])
def test_rows_of_one_tile_broadcast_over_a_group_axis_are_a_tile_not_a_gather(static_shapes):
    """`starts[:, None, None] * 0 + tile_k.index[None, :, None] * n + tile_n.index[None, None, :]`
    reads the tile [tile_k, tile_n] of b, broadcast over the group axis: a block, no row copies."""
    def body(b, starts):
        k, n = b.shape
        b_flat = b.view(-1)
        out = torch.empty([starts.size(0), k, n], dtype=b.dtype, device=b.device)
        for tile_g, tile_k, tile_n in hl.tile([starts.size(0), k, n]):
            s = starts[tile_g]
            out[tile_g, tile_k, tile_n] = hl.load(
                b_flat, [s[:, None, None] * 0 + tile_k.index[None, :, None] * n + tile_n.index[None, None, :]]) * 2
        return out

    kernel = pallasite.kernel(static_shapes=static_shapes)(body)
    b, starts = torch.randn(40, 200), torch.tensor([3, 1, 4], dtype=torch.int32)
    config = dict(block_sizes=[2, 16, 128])
    code, out = code_and_output(kernel, (b, starts), **config)
    expected = (b * 2).expand(3, 40, 200)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(kernel, (b, starts), **config), expected)
    # b's block per step, broadcast: neither a one-hot gather (a dot) nor row copies
    assert "jnp.broadcast_to(b.reshape((1, 16, 128)), (2, 16, 128))" in code
    assert "dot_general" not in code and "make_async_copy" not in code
