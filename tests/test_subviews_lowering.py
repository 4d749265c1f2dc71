"""The narrowing-read forms of issue 20 §2, under every loop type: each is a read of the
VMEM ref the block was loaded into (`ref[pl.ds(...)]`, decided in plan/subviews.py), never a
slice of a loaded value (Mosaic has no `dynamic_slice`), and each kernel lowers for TPU
v5e, v6e and v7x besides matching torch and reference mode."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref



@pallasite.kernel
def six_forms(x, w, x3):
    """Per outer tile of 8 rows, read in runs of inner tiles relative to its begin."""
    t, d = x.shape
    out = torch.zeros([6, (t + 7) // 8, d], dtype=torch.float32, device=x.device)
    for tt in hl.tile(t, block_size=8):
        blk = x[tt, :]
        wb = w[:, :]
        heads = x3[tt, :, :]
        live = tt.end - tt.begin
        prefix = hl.zeros([d], dtype=torch.float32)
        for ts in hl.tile(min(live, 4), block_size=2):  # a prefix of the live rows
            prefix = prefix + blk[ts.index].sum(0)
        inside = hl.zeros([d], dtype=torch.float32)
        for ts in hl.tile(live, block_size=2):  # weighted runs inside the tile's end
            inside = inside + (blk[ts.index] * wb[ts.index]).sum(0)
        past = hl.zeros([d], dtype=torch.float32)
        for ts in hl.tile(live, block_size=4):  # the last run passes the end of a short tile
            past = past + (blk[ts.index] * 2.0 + wb[ts.index]).sum(0)
        row = hl.zeros([d], dtype=torch.float32)
        for ts in hl.tile(live, block_size=1):  # a head view, then a row of it
            row = row * 0.5 + heads[:, 1, :][ts.begin]
        axis = hl.zeros([d], dtype=torch.float32)
        for ts in hl.tile(live, block_size=2):  # a new axis after a run
            axis = axis + blk[ts.index, None, :].sum(0)[0] + blk[ts.index][None].sum(1)[0]
        head_run = hl.zeros([d], dtype=torch.float32)
        for ts in hl.tile(live, block_size=2):  # a head view, then a run of it
            head_run = head_run + heads[:, 2][ts.index].sum(0)
        out[0, tt.id, :] = prefix
        out[1, tt.id, :] = inside
        out[2, tt.id, :] = past
        out[3, tt.id, :] = row
        out[4, tt.id, :] = axis
        out[5, tt.id, :] = head_run
    return out


def _six_forms_ref(x, w, x3):
    t, d = x.shape
    out = torch.zeros(6, (t + 7) // 8, d)
    for i, start in enumerate(range(0, t, 8)):
        rows, wts, heads = x[start:start + 8], w[:min(8, t - start)], x3[start:start + 8]
        out[0, i] = rows[:4].sum(0)
        out[1, i] = (rows * wts).sum(0)
        out[2, i] = (rows * 2.0 + wts).sum(0)
        for r in range(rows.shape[0]):
            out[3, i] = out[3, i] * 0.5 + heads[r, 1]
        out[4, i] = 2 * rows.sum(0)
        out[5, i] = heads[:, 2].sum(0)
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_six_forms_read_the_ref_match_and_lower(loop_type):
    t = 13  # the last outer tile holds 5 rows: runs pass its end, and are masked there
    g = torch.Generator().manual_seed(t)
    args = (torch.randn(t, 128, generator=g), torch.randn(8, 128, generator=g), torch.randn(t, 4, 128, generator=g))
    expected = _six_forms_ref(*args)
    _, out = code_and_output(six_forms, args, pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(run_ref(six_forms, args, pallas_loop_type=loop_type), expected, rtol=1e-5, atol=1e-4)
    plan = six_forms.bind(args).plan(pallasite.Config(pallas_loop_type=loop_type))
    reads = [read for call in plan.calls for read in call.subviews.values()]
    # every narrowing of a loaded block reads its ref; only `.sum(0)[0]`'s constant index slices a value
    assert sorted(read.ref_name or "value" for read in reads) == ["value"] * 2 + ["w_ref"] * 2 + ["x3_ref"] * 4 + [
        "x_ref"] * 5
    check_tpu_lowering(six_forms, args, pallas_loop_type=loop_type)
