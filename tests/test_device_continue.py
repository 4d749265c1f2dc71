"""`if <condition>: continue` directly in a tile loop's body skips the rest of the iteration
(Helion's decoding attention skips a key block with no valid column so): traced as an `if`
whose branch holds the rest of the body, a device condition as lax.cond / pl.when."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def masked_row_sums(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.zeros([m], dtype=torch.float32)
    for tm in hl.tile(m, block_size=8):
        acc = hl.zeros([tm], dtype=torch.float32)
        limit = lengths[tm.begin]
        for tn in hl.tile(n, block_size=128):
            valid = tn.index[None, :] < limit
            if torch.all(~valid):
                continue  # a block past every row's length: skipped, acc unchanged
            acc = acc + torch.where(valid, x[tm, tn], 0.0).sum(-1)
        out[tm] = acc
    return out


def masked_row_sums_torch(x, lengths):
    out = torch.zeros(x.shape[0])
    for b in range(0, x.shape[0], 8):
        n = int(lengths[b])
        out[b:b + 8] = x[b:b + 8, :n].sum(-1)
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_device_continue_skips_the_rest_of_an_inner_iteration(loop_type):
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(-4, 5, (32, 512), generator=gen).float()  # exact sums in any order
    lengths = torch.tensor([512, 0, 130, 300] * 2, dtype=torch.int32).repeat_interleave(4)
    code, result = code_and_output(masked_row_sums, (x, lengths), pallas_loop_type=loop_type)
    expected = masked_row_sums_torch(x, lengths)
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(masked_row_sums, (x, lengths), pallas_loop_type=loop_type), expected)
    assert "continue" in code  # the user's line, quoted above the cond it became


@pallasite.kernel
def scale_positive_rows(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tm in hl.tile(x.size(0), block_size=8):
        if x[tm.begin, 0] <= 0:
            continue  # the program leaves its rows as they were (zeros)
        out[tm, :] = x[tm, :] * 3
    return out


def test_a_device_continue_in_the_grid_loop_skips_the_program():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(64, 128, generator=gen)
    x[::8, 0] = torch.tensor([1.0, -1.0]).repeat(4)
    expected = torch.zeros_like(x)
    for b in range(0, 64, 8):
        if x[b, 0] > 0:
            expected[b:b + 8] = x[b:b + 8] * 3
    torch.testing.assert_close(scale_positive_rows(x), expected)
    torch.testing.assert_close(run_ref(scale_positive_rows, (x,)), expected)


@pallasite.kernel
def host_continue(x: torch.Tensor, skip_odd: bool) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tm in hl.tile(x.size(0), block_size=8):
        for tn in hl.tile(x.size(1), block_size=128):
            if skip_odd:
                continue  # a host condition: picked while tracing
            out[tm, tn] = x[tm, tn] + 1
    return out


@pytest.mark.parametrize("skip", [True, False])
def test_a_continue_on_a_host_value_is_picked_while_tracing(skip):
    x = torch.randn(16, 256)
    expected = torch.zeros_like(x) if skip else x + 1
    torch.testing.assert_close(host_continue(x, skip), expected)
    torch.testing.assert_close(run_ref(host_continue, (x, skip)), expected)


@pallasite.kernel
def continue_inside_a_branch(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tm in hl.tile(x.size(0), block_size=8):
        if x[tm.begin, 0] > 0:
            if x[tm.begin, 1] > 0:
                continue
        out[tm, :] = x[tm, :]
    return out


def test_a_continue_nested_in_a_branch_is_refused_with_what_works():
    with pytest.raises(exc.UnsupportedSyntax, match=r"if <condition>: continue"):
        continue_inside_a_branch(torch.randn(16, 128))


@pallasite.kernel
def split_k_sums(x: torch.Tensor) -> torch.Tensor:
    """Each program sums its own third of the columns, skipping the others' blocks with a
    chained comparison (Helion's blockwise fp8 GEMM splits K so)."""
    m, n = x.shape
    out = torch.zeros([3, m], dtype=torch.float32)
    for ts in hl.grid(3):
        lo = ts * (n // 3)
        hi = lo + n // 3
        acc = hl.zeros([m], dtype=torch.float32)
        for tn in hl.tile(n, block_size=128):
            if not (lo <= tn.begin < hi):
                continue
            acc = acc + x[:, tn].sum(-1)
        out[ts, :] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_chained_comparison_guards_a_continue(loop_type):
    x = torch.randint(-4, 5, (8, 3 * 256), generator=torch.Generator().manual_seed(5)).float()  # exact sums
    expected = x.reshape(8, 3, 256).sum(-1).T.contiguous()
    code, result = code_and_output(split_k_sums, (x,), pallas_loop_type=loop_type)
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(split_k_sums, (x,), pallas_loop_type=loop_type), expected)


@pallasite.kernel
def scaled_by_flag(x: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for g in hl.grid(x.size(0)):
        f = flags[g].item()  # a device scalar, as torch's item() gives the one element
        total = x[g, :].sum().item()
        out[g, :] = x[g, :] * f + total
    return out


def test_item_of_a_one_element_device_value_is_a_device_scalar():
    x = torch.randint(-4, 5, (8, 128), generator=torch.Generator().manual_seed(6)).float()
    flags = torch.arange(8, dtype=torch.float32)
    expected = x * flags[:, None] + x.sum(1, keepdim=True)
    torch.testing.assert_close(scaled_by_flag(x, flags), expected)
    torch.testing.assert_close(run_ref(scaled_by_flag, (x, flags)), expected)


@pallasite.kernel
def stop_early(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tm in hl.tile(x.size(0), block_size=8):
        for tn in hl.tile(x.size(1), block_size=128):
            if tn.begin > 128:
                break
            out[tm, tn] = x[tm, tn]
    return out


def test_break_is_refused_saying_what_to_write():
    with pytest.raises(exc.UnsupportedSyntax, match="if <condition>: continue"):
        stop_early(torch.randn(16, 512))
