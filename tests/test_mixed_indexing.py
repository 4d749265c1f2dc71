"""One tensor axis indexed several ways in one loop (issue #7 §3).

A scalar and a tile, ':' and an inner tile, an outer and an inner tile of
the same dim: the plan gives the axis one resident block that covers every
access, and each access reads its own part of it.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan import BlockKind
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output



@pallasite.kernel
def minus_last(x):
    out = torch.empty_like(x)
    n = x.size(1)
    for tb in hl.tile(x.size(0), block_size=1):
        last = x[tb.begin, n - 1]
        for tn in hl.tile(n):
            out[tb.begin, tn] = x[tb.begin, tn] - last
    return out


@pallasite.kernel
def two_pass(x):
    out = torch.empty_like(x)
    for tm in hl.tile(x.size(0)):
        row_max = x[tm, :].amax(-1)
        for tn in hl.tile(x.size(1)):
            out[tm, tn] = torch.exp(x[tm, tn] - row_max[:, None])
    return out


@pallasite.kernel
def gram_apply(x):
    m, d = x.size()
    out = torch.empty([m, d], dtype=torch.float32, device=x.device)
    for tm in hl.tile(m):
        acc = hl.zeros([tm, d], dtype=torch.float32)
        for tk in hl.tile(m):
            rows = x[tk, :]
            acc = acc + torch.matmul(torch.matmul(x[tm, :], rows.T), rows)
        out[tm, :] = acc
    return out


@pallasite.kernel
def stamp_first(x):
    for tb in hl.tile(x.size(0), block_size=1):
        total = hl.zeros([1], dtype=torch.float32)
        for tn in hl.tile(x.size(1)):
            total = total + x[tb.begin, tn].sum(-1, keepdim=True)
        x[tb.begin, 0] = total[0]
    return x


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("n", [256, 300])
def test_a_scalar_read_next_to_tile_reads_of_the_same_axis(loop_type, n):
    x = torch.randn(4, n)
    _, out = code_and_output(minus_last, (x,), block_sizes=[128], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, x - x[:, -1:])


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("n", [512, 300])
def test_a_two_pass_reduction_reads_the_row_then_its_tiles(loop_type, n):
    x = torch.randn(16, n)
    _, out = code_and_output(two_pass, (x,), block_sizes=[8, 128], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, torch.exp(x - x.amax(-1, keepdim=True)))


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("m", [64, 40])
def test_an_outer_and_an_inner_tile_of_the_same_dim(loop_type, m):
    x = torch.randn(m, 128) / 8
    _, out = code_and_output(gram_apply, (x,), block_sizes=[16, 16], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, x @ (x.T @ x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_scalar_write_next_to_tile_reads_of_the_same_axis(loop_type):
    x = torch.randn(8, 384)
    expected = x.clone()
    expected[:, 0] = x.sum(-1)
    _, out = code_and_output(stamp_first, (x.clone(),), block_sizes=[128], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)


def test_the_plan_gives_the_axis_one_resident_block_and_says_why():
    x = torch.randn(16, 300)
    plan = two_pass.bind((x,)).plan({"block_sizes": [8, 128]})
    (x_operand,) = [op for op in plan.calls[0].inputs if op.symbol.name == "x"]
    block = x_operand.axes[1]
    assert block.kind is BlockKind.RESIDENT and block.size >= 300
    assert "several ways" in block.reason


@pytest.mark.parametrize("kernel, args, sizes", [
    (minus_last, (torch.randn(4, 300),), [128]),
    (two_pass, (torch.randn(16, 300),), [8, 128]),
    (gram_apply, (torch.randn(40, 128),), [16, 16]),
    (stamp_first, (torch.randn(8, 384),), [128]),
])
def test_mixed_indexing_lowers_to_mosaic(kernel, args, sizes):
    for loop_type in LOOP_TYPES:
        check_tpu_lowering(kernel, args, block_sizes=sizes, pallas_loop_type=loop_type)
