"""A device `if` that encloses an inner tile loop (Helion's grouped GEMM and MoE):
`pl.when` / `lax.cond` around the loop, under every inner-loop strategy."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.plan.plans import Memory
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def grouped_matmul(a: torch.Tensor, b: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Each group's rows of `a` times `b`; a group with no rows runs no tile."""
    total, k = a.shape
    n = b.size(1)
    out = torch.zeros([total, n], dtype=torch.float32)
    for g in hl.grid(offsets.size(0) - 1):
        start = offsets[g]
        end = offsets[g + 1]
        rows = end - start
        if rows != 0:
            for tm, tn in hl.tile([rows, n]):
                acc = hl.zeros([tm, tn], dtype=torch.float32)
                for tk in hl.tile(k):
                    acc = torch.addmm(acc, a[start + tm.index, tk], b[tk, tn])
                out[start + tm.index, tn] = acc
    return out


def _groups(sizes, k=256, n=128, seed=0):
    gen = torch.Generator().manual_seed(seed)
    offsets = torch.tensor([0, *torch.tensor(sizes).cumsum(0).tolist()], dtype=torch.int32)
    a = torch.randn(int(offsets[-1]), k, generator=gen)
    b = torch.randn(k, n, generator=gen)
    return a, b, offsets


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_if_around_a_loop_nest_skips_empty_groups(loop_type):
    a, b, offsets = _groups([24, 0, 8, 0, 16])
    config = dict(block_sizes=[8, 128, 128], pallas_loop_type=loop_type)
    code, result = code_and_output(grouped_matmul, (a, b, offsets), **config)
    expected = a @ b
    torch.testing.assert_close(result, expected, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(run_ref(grouped_matmul, (a, b, offsets), **config), expected,
                               atol=1e-3, rtol=1e-3)
    assert "pl.when" in code and "if rows != 0:" in code
    # the loops inside the if are planned as without it (b streams where the strategy can)
    assert _placement(grouped_matmul, (a, b, offsets), config) == _placement(
        grouped_matmul_unguarded, (a, b, offsets), config)
    if loop_type == "fori_loop":  # streams any window, so b's tiles are copied step by step
        assert _placement(grouped_matmul, (a, b, offsets), config)["b"] is Memory.HBM


@pallasite.kernel
def grouped_matmul_unguarded(a: torch.Tensor, b: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    total, k = a.shape
    n = b.size(1)
    out = torch.zeros([total, n], dtype=torch.float32)
    for g in hl.grid(offsets.size(0) - 1):
        start = offsets[g]
        rows = offsets[g + 1] - start
        for tm, tn in hl.tile([rows, n]):
            acc = hl.zeros([tm, tn], dtype=torch.float32)
            for tk in hl.tile(k):
                acc = torch.addmm(acc, a[start + tm.index, tk], b[tk, tn])
            out[start + tm.index, tn] = acc
    return out


def _placement(kernel, args, config) -> dict:
    call = kernel.bind(args).plan(pallasite.Config(**config)).calls[0]
    return {op.symbol.name: op.memory for op in (*call.inputs, *call.outputs)}


@pallasite.kernel
def gated_row_sums(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Row sums of the tiles whose gate is set, else minus the first column; the
    accumulator is defined before the if and keeps its value when the if is false."""
    m, k = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32) + 1.0
        if gate[tm.id] > 0:
            for tk in hl.tile(k):
                acc = acc + x[tm, tk].sum(-1)
        else:
            acc = acc - x[tm, 0]
        out[tm] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_accumulator_before_the_if_is_merged_with_else(loop_type):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(32, 384, generator=gen)
    gate = torch.tensor([1, 0, 0, 1], dtype=torch.int32)
    config = dict(block_sizes=[8, 128], pallas_loop_type=loop_type)
    code, result = code_and_output(gated_row_sums, (x, gate), **config)
    rows_gated = gate.repeat_interleave(8) > 0
    expected = torch.where(rows_gated, 1.0 + x.sum(-1), 1.0 - x[:, 0])
    torch.testing.assert_close(result, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(run_ref(gated_row_sums, (x, gate), **config), expected, atol=1e-4, rtol=1e-4)
    assert "lax.cond" in code


@pallasite.kernel
def bounded_copy(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Copies the first lengths[r] columns of each row block; the bound is read inside the if."""
    m, n = x.shape
    out = torch.zeros_like(x)
    for tm in hl.tile(m):
        if lengths[tm.id] > 0:
            length = lengths[tm.id]
            for tn in hl.tile(length):
                out[tm, tn] = x[tm, tn] * 2.0
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_loop_bound_read_inside_the_if(loop_type):
    x = torch.randn(32, 384, generator=torch.Generator().manual_seed(2))
    lengths = torch.tensor([256, 0, 384, 128], dtype=torch.int32)
    config = dict(block_sizes=[8, 128], pallas_loop_type=loop_type)
    _, result = code_and_output(bounded_copy, (x, lengths), **config)
    expected = torch.zeros_like(x)
    for r in range(4):
        expected[r * 8:r * 8 + 8, :lengths[r]] = x[r * 8:r * 8 + 8, :lengths[r]] * 2.0
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(bounded_copy, (x, lengths), **config), expected)


@pallasite.kernel
def flagged_blocks(x: torch.Tensor, y: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    """An if inside an inner loop that encloses another inner loop; the accumulator is
    carried by the outer inner loop and only updated where the flag is set."""
    m, k = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tk in hl.tile(k):
            if flags[tk.id] != 0:
                part = x[tm, tk].sum(-1)
                for tj in hl.tile(y.size(1)):
                    acc = acc + part * y[tm, tj].sum(-1)
        out[tm] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_if_inside_an_inner_loop_around_another(loop_type):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(16, 384, generator=gen)
    y = torch.randn(16, 256, generator=gen)
    flags = torch.tensor([1, 0, 1], dtype=torch.int32)
    config = dict(block_sizes=[8, 128, 128], pallas_loop_type=loop_type)
    kept = flags.repeat_interleave(128).bool()
    expected = x[:, kept].sum(-1) * y.sum(-1)
    _, result = code_and_output(flagged_blocks, (x, y, flags), **config)
    torch.testing.assert_close(result, expected, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(run_ref(flagged_blocks, (x, y, flags), **config), expected, atol=1e-3, rtol=1e-3)


@pallasite.kernel
def signed_rows(x, flags):
    """Both branches of a device if hold a tile loop of one variable name (a trial: refused as
    "'tn' is assigned a host value"; the loop variable has no value after the if)."""
    m, n = x.size()
    out = torch.zeros_like(x)
    for g in hl.grid(m):
        if flags[g] > 0:
            for tn in hl.tile(n):
                out[g, tn] = x[g, tn] * 3.0
        else:
            for tn in hl.tile(n):
                out[g, tn] = -x[g, tn]
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_both_branches_may_loop_over_tiles_of_one_name(loop_type):
    flags, x = torch.tensor([1, 0, 0, 1, 1, 0, 1], dtype=torch.int32), torch.randn(7, 37)
    expected = torch.where(flags[:, None] > 0, x * 3, -x)
    _, out = code_and_output(signed_rows, (x, flags), block_sizes=[16, 16], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(signed_rows, (x, flags), block_sizes=[16, 16]), expected)
