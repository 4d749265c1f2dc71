"""Grids plan/worklists.py must not flatten into (segment, q-tile) items (trial D):
- a grid that steps (`hl.grid(0, n, 4)`): an item's segment number stood for `g`, so a body
  scaled by `g + 1` read 1, 2, 3 where g is 0, 4, 8 (and the segment count was `n`, giving a
  false range error);
- a q loop whose store is under a device `if`: an item's rows are written back whole from a
  scratch never filled with the output's contents, so rows an item skipped came out as the
  previous item's values (or NaN) instead of keeping theirs.
Both now run per segment, as `pallas_flatten_worklist=False` did, and say why.
A grid whose segments end at a constant (`hl.tile(g, n)`) is flattened, without an end check."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel(config=pallasite.Config(block_sizes=[2]))
def stepped_segments(x):
    n = x.size(0)
    out = torch.zeros_like(x)
    for g in hl.grid(0, n, 4):
        for t in hl.tile(g, min(g + 4, n)):
            out[t, :] = x[t, :] * (g + 1)
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[8]))
def flagged_segments(x, offsets, flag):
    out = torch.zeros_like(x)
    for g in hl.grid(offsets.size(0) - 1):
        for t in hl.tile(offsets[g], offsets[g + 1]):
            if flag[g] > 0:
                out[t, :] = x[t, :] + 1.0
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[8]))
def skipped_first_tiles(x, offsets):
    out = torch.zeros_like(x)
    for g in hl.grid(offsets.size(0) - 1):
        for t in hl.tile(offsets[g], offsets[g + 1]):
            if t.begin == offsets[g]:
                continue
            out[t, :] = x[t, :] * 3.0
    return out


def test_a_stepped_grid_keeps_its_index():
    x = torch.ones(10, 128)
    expected = torch.tensor([1.0] * 4 + [5.0] * 4 + [9.0] * 2)[:, None].expand(10, 128)
    code, result = code_and_output(stepped_segments, (x,))
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(stepped_segments, (x,)), expected)
    assert "work_owner" not in code


def test_rows_a_guarded_store_skips_keep_their_contents():
    x = torch.arange(40.0)[:, None].repeat(1, 128)
    offsets = torch.tensor([0, 5, 5, 17, 30, 40], dtype=torch.int32)
    flag = torch.tensor([1, 1, 0, 1, 0], dtype=torch.int32)
    expected = torch.zeros_like(x)
    for g in range(5):
        if flag[g] > 0:
            expected[offsets[g]:offsets[g + 1]] = x[offsets[g]:offsets[g + 1]] + 1
    code, result = code_and_output(flagged_segments, (x, offsets, flag))
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(flagged_segments, (x, offsets, flag)), expected)
    assert "work_owner" not in code
    expected = torch.zeros_like(x)
    for g in range(5):
        begin, end = int(offsets[g]), int(offsets[g + 1])
        expected[begin + 8:end] = x[begin + 8:end] * 3
    _, result = code_and_output(skipped_first_tiles, (x, offsets))
    torch.testing.assert_close(result, expected)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8]))
def suffix_rows(x):
    n, m = x.size()
    out = torch.zeros([n, m])
    for g in hl.grid(n):
        for t in hl.tile(g, n):
            out[t, :] = x[t, :] + g  # row r is written last by g = r
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_worklist_whose_segments_end_at_a_constant(loop_type):
    """(trial J) `hl.tile(g, n)`: the segments' end is the constant n, which the interpret-mode
    check of segment ends took for an array (AttributeError: 'int' object has no attribute
    'shape'). A constant end inside the rows needs no check."""
    x = torch.randn(20, 128)
    expected = x + torch.arange(20.0)[:, None]
    code, result = code_and_output(suffix_rows, (x,), pallas_loop_type=loop_type)
    assert "worklist" in code
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(suffix_rows, (x,)), expected)
