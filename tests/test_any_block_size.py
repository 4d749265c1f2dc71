"""Any block size the user chooses works (issue #7 §2).

A block size tiles the iteration space; it is not a promise about the
BlockSpec. When a tile is not a legal TPU block for some tensor axis (or its
begin is not a block multiple), that axis stays resident from element 0 and
each tile is read and written at its offset; the plan records why.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan import BlockKind, Semantics
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel
def row_sums(x):
    out = torch.empty([x.size(0)], dtype=x.dtype, device=x.device)
    for t in hl.tile(x.size(0)):
        out[t] = x[t, :].sum(-1)
    return out


@pallasite.kernel
def add_one(x):
    out = torch.empty_like(x)
    for tm, tn in hl.tile([x.size(0), x.size(1)]):
        out[tm, tn] = x[tm, tn] + 1.0
    return out


@pallasite.kernel
def scale_from(x, begin: hl.constexpr):
    out = torch.zeros_like(x)
    for t in hl.tile(begin, x.size(0)):
        out[t, :] = x[t, :] * 2.0
    return out


@pallasite.kernel
def col_norms(x):
    m, n = x.size()
    out = torch.empty([n], dtype=torch.float32, device=x.device)
    for tn in hl.tile(n):
        acc = hl.zeros([tn], dtype=torch.float32)
        for tm in hl.tile(m):
            v = x[tm, tn]
            acc = acc + (v * v).sum(0)
        out[tn] = torch.sqrt(acc)
    return out


def test_an_8_block_over_a_rank_1_output_of_40():
    x = torch.randn(40, 128)
    _, out = code_and_output(row_sums, (x,), block_sizes=[8])
    torch.testing.assert_close(out, x.sum(-1), rtol=1e-5, atol=1e-5)
    plan = row_sums.bind((x,)).plan({"block_sizes": [8]})
    (out_operand,) = plan.calls[0].outputs
    assert out_operand.axes[0].kind is BlockKind.RESIDENT
    assert "not a legal TPU block" in out_operand.axes[0].reason
    # every program writes part of the one resident block: the axis cannot be split
    assert plan.calls[0].grid[0].semantics is Semantics.ARBITRARY


@pytest.mark.parametrize("shape, sizes", [
    ((24, 10), [8, 16]),  # 16 over a last dim of 10
    ((24, 1), [8, 16]),  # 16 over a last dim of 1
    ((5, 128), [2, 128]),  # 2 over a second-to-last dim of 5
    ((5, 10), [2, 16]),  # both
    ((3, 7, 200), [1, 3, 128]),  # 3 over a second-to-last dim of 7, a partial last tile
])
def test_illegal_tiles_of_a_pointwise_kernel(shape, sizes):
    kernel = add_one if len(shape) == 2 else add_one_3d
    x = torch.randn(*shape)
    _, out = code_and_output(kernel, (x,), block_sizes=sizes)
    torch.testing.assert_close(out, x + 1.0)


@pallasite.kernel
def add_one_3d(x):
    out = torch.empty_like(x)
    for tb, tm, tn in hl.tile([x.size(0), x.size(1), x.size(2)]):
        out[tb, tm, tn] = x[tb, tm, tn] + 1.0
    return out


@pytest.mark.parametrize("begin", [3, 5])
def test_a_grid_tile_whose_begin_is_not_a_block_multiple(begin):
    x = torch.randn(37, 128)
    _, out = code_and_output(scale_from, (x, begin), block_sizes=[8])
    expected = torch.zeros_like(x)
    expected[begin:] = x[begin:] * 2.0
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_an_illegal_inner_tile_with_a_grid_tile_of_the_same_tensor(loop_type):
    x = torch.randn(20, 10)
    _, out = code_and_output(col_norms, (x,), block_sizes=[16, 4], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, x.norm(dim=0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel, args, sizes", [
    (row_sums, (torch.randn(40, 128),), [8]),
    (add_one, (torch.randn(24, 10),), [8, 16]),
    (add_one, (torch.randn(5, 10),), [2, 16]),
    (add_one_3d, (torch.randn(3, 7, 200),), [1, 3, 128]),
    (scale_from, (torch.randn(37, 128), 3), [8]),
])
def test_the_fallback_layouts_lower_to_mosaic(kernel, args, sizes):
    check_tpu_lowering(kernel, args, block_sizes=sizes)


@pallasite.kernel
def block_sums(x):
    b, m, n = x.size()
    out = torch.empty([b], dtype=torch.float32, device=x.device)
    for tb in hl.tile(b):
        acc = hl.zeros([tb], dtype=torch.float32)
        for tm, tn in hl.tile([m, n]):
            acc = acc + x[tb, tm, tn].sum([1, 2])
        out[tb] = acc
    return out


def test_a_block_larger_than_its_static_dim_is_clamped_to_the_smallest_legal_block_covering_it():
    """Trial LL: block_sizes=[4096, 4096] over a 5 x 200 tensor planned 4096 padded rows and
    columns (576 MiB of VMEM, refused); a block past the dim tiles the same one tile."""
    x = torch.randn(5, 200)
    for sizes in ([4096, 4096], [65536, 16]):
        code, result = code_and_output(add_one, (x,), block_sizes=sizes)
        torch.testing.assert_close(result, x + 1.0)
    assert add_one.bind((x,)).resolve_config({"block_sizes": [4096, 4096]})["block_sizes"] == [5, 200]
    x3 = torch.randn(5, 33, 200)
    for loop_type in LOOP_TYPES:
        _, result = code_and_output(block_sums, (x3,), block_sizes=[256, 128, 16], pallas_loop_type=loop_type)
        torch.testing.assert_close(result, x3.sum((1, 2)), atol=1e-3, rtol=1e-4)


@pallasite.kernel
def into_block_width(x):
    m, n = x.size()
    out = torch.zeros([m, 128], dtype=x.dtype, device=x.device)
    for tm in hl.tile(m):
        for tn in hl.tile(n):
            out[tm, 0:tn.block_size] = x[tm, tn]
    return out


def test_reference_mode_clamps_given_block_sizes_as_the_compiler_does():
    """tn.block_size is the clamped block in both modes: 128 over n = 100 is one block of 100."""
    x = torch.randn(16, 100)
    expected = torch.nn.functional.pad(x, (0, 28))
    config = dict(block_sizes=[8, 128], pallas_loop_type="fori_loop")
    _, result = code_and_output(into_block_width, (x,), **config)
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(into_block_width, (x,), **config), expected)
