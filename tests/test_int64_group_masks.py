"""int64 offsets in a group's row mask (Helion's `start + tile_m.index < end`): a tile's
positions whose range planning knows (a static extent, `hl.arange`) or a call knows (a loop an
int argument bounds) enter the host-checked range steps of `plan/narrowed_arguments.py`; a
range data decides is refused, naming the form that needs none."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def rows_masked_by_group_end(A, offsets):
    out = torch.zeros_like(A)
    for g in hl.grid(offsets.size(0) - 1):
        start, end = offsets[g], offsets[g + 1]
        for tile_m in hl.tile(160):
            rows = start + tile_m.index
            ok = (rows < end)[:, None]
            v = hl.load(A, [rows, slice(None)], extra_mask=ok)
            hl.store(out, [rows, slice(None)], v * 2 + (start + hl.arange(32) < 3)[:, None], extra_mask=ok)
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_int64_offsets_plus_positions_compared_are_checked_steps(loop_type):
    """Trial NN: `start + tile_m.index < end` (Helion's mask of a group's rows) with int64 offsets
    was refused as data: a tile's positions and `hl.arange` values have a range planning knows, so
    the add is a host-checked step like `offsets[g] + 1`."""
    A = torch.randn(300, 128)
    offsets = torch.tensor([0, 37, 37, 170, 300])
    starts = offsets[:-1].repeat_interleave(offsets.diff())
    local = torch.arange(300) - starts
    expected = A * 2 + (starts + local % 32 < 3)[:, None]
    config = dict(block_sizes=[32], pallas_loop_type=loop_type)
    _, result = code_and_output(rows_masked_by_group_end, (A, offsets), **config)
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(rows_masked_by_group_end, (A, offsets), **config), expected)
    with pytest.raises(exc.KernelArgumentError, match=r"'offsets' holds values in \[0, 2147483600\].*its add"):
        code_and_output(rows_masked_by_group_end, (A, torch.tensor([0, 2147483600])), **config)


@pallasite.kernel
def rows_up_to_max_len(A, offsets, max_len: int):
    out = torch.zeros_like(A)
    for g in hl.grid(offsets.size(0) - 1):
        start, end = offsets[g], offsets[g + 1]
        for tile_m in hl.tile(max_len):
            rows = start + tile_m.index
            ok = (rows < end)[:, None]
            hl.store(out, [rows, slice(None)], hl.load(A, [rows, slice(None)], extra_mask=ok) * 2, extra_mask=ok)
    return out


def test_positions_of_a_loop_bounded_by_an_int_argument_are_ranged_at_each_call():
    """Trial NN's form: `hl.tile(max_len)`, max_len a runtime int argument; the add's range is
    known once a call gives max_len (`ir/intervals.py` with the call's scalars)."""
    A, offsets = torch.randn(300, 128), torch.tensor([0, 37, 37, 170, 300])
    config = dict(block_sizes=[32], pallas_loop_type="fori_loop")
    torch.testing.assert_close(code_and_output(rows_up_to_max_len, (A, offsets, 160), **config)[1], A * 2)
    torch.testing.assert_close(run_ref(rows_up_to_max_len, (A, offsets, 160), **config), A * 2)
    with pytest.raises(exc.KernelArgumentError, match=r"its add at .*rows = start \+ tile_m.index"):
        code_and_output(rows_up_to_max_len, (A, offsets, 2**31 - 10), **config)


@pallasite.kernel
def group_rows_but_last(A, offsets, compare_positions: hl.constexpr):
    out = torch.zeros_like(A)
    for g in hl.grid(offsets.size(0) - 1):
        start, end = offsets[g], offsets[g + 1]
        for tile_m in hl.tile(end - start):
            if compare_positions:
                ok = (tile_m.index < end - start - 1)[:, None]
            else:
                ok = (start + tile_m.index < end - 1)[:, None]
            out[start + tile_m.index, :] = torch.where(ok, A[start + tile_m.index, :], 0.0)
    return out


def test_int64_offsets_plus_positions_of_a_data_decided_range_say_to_compare_the_positions():
    """Trial OO: `start + tile_m.index < end - 1` over `hl.tile(end - start)` is refused (the range
    has no bound before the call); the message now names the form that needs none."""
    A, offsets = torch.randn(100, 128), torch.tensor([0, 30, 30, 100])
    with pytest.raises(exc.UnsupportedDtype, match=r"compare the positions with the range's length instead"):
        group_rows_but_last(A, offsets, False)
    expected = A.clone()
    expected[[29, 99]] = 0
    torch.testing.assert_close(group_rows_but_last(A, offsets, True), expected)
    torch.testing.assert_close(run_ref(group_rows_but_last, (A, offsets, True)), expected)
