"""A tuple or list of device values carried through an inner loop (`state = (m, l)`): one
carried value per item, as separate names would be (trial T: reference mode ran it, the
compiled kernel refused it)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def running_stats(x):
    m, n = x.size()
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        state = (hl.zeros([tm], dtype=torch.float32), hl.full([tm], float("-inf"), dtype=torch.float32))
        count = [hl.zeros([tm], dtype=torch.int32)]
        for tn in hl.tile(n):
            blk = x[tm, tn]
            state = (state[0] + blk.sum(1), torch.maximum(state[1], blk.amax(1)))
            count = [count[0] + (blk > 0).sum(1).to(torch.int32)]
        total, largest = state
        out[tm] = total + largest * 2 + count[0].float()
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_tuple_and_a_list_carried_through_an_inner_loop(loop_type):
    x = torch.randn(20, 300)
    expected = x.sum(1) + x.amax(1) * 2 + (x > 0).sum(1).float()
    code, out = code_and_output(running_stats, (x,), block_sizes=[8, 128], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    ref = run_ref(running_stats, (x,), block_sizes=[8, 128], pallas_loop_type=loop_type)
    torch.testing.assert_close(ref, expected, atol=1e-4, rtol=1e-4)
    assert "state_0" in code and "state_1" in code


@pallasite.kernel
def swapped_pair(x):
    m, n = x.size()
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        pair = (hl.zeros([tm], dtype=torch.float32), hl.full([tm], 1.0, dtype=torch.float32))
        for tn in hl.tile(n):
            pair = (pair[1], pair[0] + x[tm, tn].sum(1))  # each item reads the other's old value
        out[tm] = pair[0] - pair[1]
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_items_rebound_together_read_the_old_values(loop_type):
    x = torch.randn(8, 384)
    a, b = torch.zeros(8), torch.ones(8)
    for block in x.split(128, dim=1):
        a, b = b, a + block.sum(1)
    code, out = code_and_output(swapped_pair, (x,), block_sizes=[8, 128], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, a - b, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(run_ref(swapped_pair, (x,), block_sizes=[8, 128], pallas_loop_type=loop_type),
                               a - b, atol=1e-4, rtol=1e-4)


@pallasite.kernel
def shrinking_tuple(x):
    m, n = x.size()
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        state = (hl.zeros([tm], dtype=torch.float32), hl.zeros([tm], dtype=torch.float32))
        for tn in hl.tile(n):
            state = (state[0] + x[tm, tn].sum(1),)
        out[tm] = state[0]
    return out


def test_a_tuple_whose_length_changes_in_the_loop_is_refused():
    with pytest.raises(exc.UnsupportedSyntax, match="tuple of 2 device values before the loop"):
        code_and_output(shrinking_tuple, (torch.randn(8, 256),))


@pallasite.kernel
def tuple_swapped_under_an_if(x):
    m, n = x.size()
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        st = (hl.zeros([tm], dtype=torch.float32), hl.zeros([tm], dtype=torch.float32))
        for tn in hl.tile(n):
            s = x[tm, tn].sum(1)
            st = (st[0] + s, st[1] - s)
            if tn.begin > 0:
                st = [st[1], st[0]][::-1]
                st = (st[1], st[0])
        out[tm] = st[0] - st[1] * 10
    return out


@pallasite.kernel
def grid_tuple_under_an_if(x):
    m, n = x.size()
    out = torch.empty([m], dtype=torch.float32)
    for g in hl.grid(m):
        a, b = x[g, :].sum(), x[g, :].amax()
        st = (a, b)
        if a > 0:
            st = (b, a)
        out[g] = st[0] - st[1] * 10
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_tuple_rebound_under_a_device_if(loop_type):
    """`if c: st = (b, a)` was refused compiled ('a host value in a branch', trial W)."""
    x = torch.randn(8, 384)
    a, b = torch.zeros(8), torch.zeros(8)
    for i, block in enumerate(x.split(128, dim=1)):
        a, b = a + block.sum(1), b - block.sum(1)
        if i > 0:
            a, b = b, a
    expected = a - b * 10
    for result in (code_and_output(tuple_swapped_under_an_if, (x,), block_sizes=[8, 128], pallas_loop_type=loop_type)[1],
                   run_ref(tuple_swapped_under_an_if, (x,), block_sizes=[8, 128], pallas_loop_type=loop_type)):
        torch.testing.assert_close(result, expected, atol=1e-3, rtol=1e-4)
    y = torch.randn(6, 40)
    sums, peaks = y.sum(1), y.amax(1)
    grid_expected = torch.where(sums > 0, peaks - sums * 10, sums - peaks * 10)
    torch.testing.assert_close(code_and_output(grid_tuple_under_an_if, (y,))[1], grid_expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(run_ref(grid_tuple_under_an_if, (y,)), grid_expected, atol=1e-4, rtol=1e-4)
