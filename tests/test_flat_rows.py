"""A flat gather whose index is `rows[..., None] * w + cols` (cols: `hl.arange(w)` or a tile
over [0, w)) reads rows of the tensor seen as [n // w, w] (frontend/flat_rows.py): the
one-hot, or the row copies, span n // w rows, not n elements. Helion's jagged programs
(HSTU attention, grouped GEMM, jagged mean) index their flat views so."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.plan.plans import GatherMethod
from pallasite.testing import code_and_output, run_ref

from plan_helpers import only_call, randn


@pallasite.kernel
def whole_rows(x, idx):
    d = x.size(1)
    x_flat = x.view(-1)
    out = torch.empty([idx.size(0), d], dtype=x.dtype, device=x.device)
    for t in hl.tile(idx.size(0)):
        out[t, :] = hl.load(x_flat, [idx[t][:, None] * d + hl.arange(d)[None, :]]) * 2
    return out


def _gathers(call):
    return {a.ref_name: a.gather for a in call.accesses.values() if a.gather is not None}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_whole_rows_gather_rows_of_the_2d_view(dtype):
    x = (randn(40, 128) * 10).to(dtype)
    idx = torch.tensor([5, 39, 0, 17, 17, 2, 9], dtype=torch.int32)
    (gather,) = _gathers(only_call(whole_rows, (x, idx))).values()
    assert gather.rows == 40  # a one-hot over 40 rows, not over 5120 elements
    code, result = code_and_output(whole_rows, (x, idx))
    assert "x_rows = x_ref[...]" in code and "x_flat_rows" not in code  # x_flat's rows of 128 are x
    torch.testing.assert_close(result, x[idx.long()] * 2)
    torch.testing.assert_close(run_ref(whole_rows, (x, idx)), result)


def test_rows_past_the_budget_are_copied_one_row_each():
    x, idx = randn(64, 256), torch.tensor([63, 0, 31, 31, 7], dtype=torch.int32)
    config = dict(pallas_indirect_access_mode="dma")
    gathers = _gathers(only_call(whole_rows, (x, idx), **config))
    assert gathers["x_hbm"].method is GatherMethod.ROW_DMA
    _, result = code_and_output(whole_rows, (x, idx), **config)
    torch.testing.assert_close(result, x[idx.long()] * 2)


def test_a_row_out_of_range_is_a_shape_mismatch_naming_the_line():
    x, idx = randn(8, 128), torch.tensor([1, 8], dtype=torch.int32)
    with pytest.raises(pallasite.exc.ShapeMismatch, match="hl.load"):
        whole_rows(x, idx)


@pallasite.kernel
def masked_rows(x_flat, offsets, d: int):
    """Segment sums of rows, each segment's rows read through the flat tensor (an argument,
    as Helion's jagged programs pass it: its rows view is a reshape), masked per row."""
    segments, d = offsets.size(0) - 1, hl.specialize(d)
    out = torch.zeros([segments, d], dtype=x_flat.dtype, device=x_flat.device)
    for tb in hl.tile(segments, block_size=4):
        starts = offsets[tb]
        count = offsets[tb.index + 1] - starts
        for td in hl.tile(d):
            acc = hl.zeros([tb, td], dtype=x_flat.dtype)
            for tk in hl.tile(0, count.amax(), block_size=8):
                live = (tk.index[None, :] < count[:, None])[:, :, None]
                flat = (starts[:, None] + tk.index[None, :])[:, :, None] * d + td.index[None, None, :]
                acc = acc + hl.load(x_flat, [flat], extra_mask=live).sum(1)
            out[tb, td] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("d, block", [(256, 128), (200, 128), (8, 8)])
def test_masked_rows_at_a_tile_of_columns(loop_type, d, block):
    lengths = [3, 0, 9, 1, 16, 5]
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    x = randn(int(offsets[-1]), d)
    expected = torch.stack([x[offsets[i]:offsets[i + 1]].sum(0) for i in range(len(lengths))])
    config = dict(block_sizes=[block], pallas_loop_type=loop_type)
    args = (x.view(-1), offsets, d)
    call = only_call(masked_rows, args, **config)
    assert {name for name in _gathers(call)} == {"x_flat_rows_ref"}
    _, result = code_and_output(masked_rows, args, **config)
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(run_ref(masked_rows, args, **config), result, atol=1e-5, rtol=1e-5)


@pallasite.kernel
def rows_in_place(x_flat, idx, d: int):
    """Each program reads rows of x_flat and writes them back doubled through the same
    flat tensor: both go through its rows view, one operand updated in place."""
    d = hl.specialize(d)
    for t in hl.tile(x_flat.size(0) // d, block_size=8):
        flat = idx[t][:, None] * d + hl.arange(d)[None, :]
        hl.store(x_flat, [flat], hl.load(x_flat, [flat]) * 2)
    return x_flat


@pallasite.kernel
def write_then_read_later(x, idx):
    """A first loop writes x, a second reads its rows through the flat view: the view the
    second loop reads is taken after the first loop's writes."""
    n, d = x.size()
    x_flat = x.view(-1)
    out = torch.empty_like(x)
    for t in hl.tile(n):
        x[t, :] = x[t, :] * 3
    for t in hl.tile(n):
        out[t, :] = hl.load(x_flat, [idx[t][:, None] * d + hl.arange(d)[None, :]])
    return out


@pallasite.kernel
def rows_then_elements(x, idx):
    """Rows read through the flat view, then elements written through it by a flat index
    of another form: the loop writes the buffer it read as rows, so it is traced again
    reading it element by element (one operand, updated in place)."""
    n, d = x.size()
    x_flat = x.view(-1)
    for t in hl.tile(n, block_size=8):
        flat = idx[t][:, None] * d + hl.arange(d)[None, :]
        hl.store(x_flat, [flat + 0], hl.load(x_flat, [flat]) * 2)
    return x


_SWAPS = torch.tensor([1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14], dtype=torch.int32)


def test_rows_read_and_written_through_the_flat_view_are_one_operand():
    x = randn(16 * 128)
    call = only_call(rows_in_place, (x.clone(), _SWAPS, 128))
    (gather,) = _gathers(call).values()
    (scatter,) = [a.scatter for a in call.accesses.values() if a.scatter is not None]
    assert gather.rows == 16 and [op.symbol.name for op in call.outputs] == ["x_flat_rows"]
    _, result = code_and_output(rows_in_place, (x.clone(), _SWAPS, 128))
    torch.testing.assert_close(result, x * 2)
    torch.testing.assert_close(run_ref(rows_in_place, (x.clone(), _SWAPS, 128)), result)


def test_a_loop_that_writes_the_buffer_another_way_reads_it_element_by_element():
    x = randn(16, 128)
    (gather,) = _gathers(only_call(rows_then_elements, (x.clone(), _SWAPS))).values()
    assert gather.rows == x.numel()  # the flat tensor itself, updated in place
    _, result = code_and_output(rows_then_elements, (x.clone(), _SWAPS))
    torch.testing.assert_close(result, x * 2)


@pallasite.kernel
def scatter_rows(values, idx, mask_rows: bool):
    """out rows idx[i] = values[i] through the flat view; masked: only rows whose index is even."""
    n, d = values.size()
    out_flat = torch.zeros([64 * d], dtype=values.dtype, device=values.device)
    for t in hl.tile(n):
        rows = idx[t]
        flat = rows[:, None] * d + hl.arange(d)[None, :]
        if mask_rows:
            hl.store(out_flat, [flat], values[t, :] + 1, extra_mask=(rows % 2 == 0)[:, None])
        else:
            hl.store(out_flat, [flat], values[t, :] + 1)
    return out_flat.view(64, d)


@pytest.mark.parametrize("mask_rows", [False, True])
def test_whole_rows_scatter_into_rows_of_the_2d_view(mask_rows):
    values, idx = randn(24, 128), torch.randperm(64)[:24].to(torch.int32)
    call = only_call(scatter_rows, (values, idx, mask_rows))
    (scatter,) = [a.scatter for a in call.accesses.values() if a.scatter is not None]
    assert [op.symbol.name for op in call.outputs] == ["out_flat_rows"]
    expected = torch.zeros(64, 128)
    keep = (idx % 2 == 0) if mask_rows else torch.ones(24, dtype=torch.bool)
    expected[idx.long()[keep]] = (values + 1)[keep]
    _, result = code_and_output(scatter_rows, (values, idx, mask_rows))
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(scatter_rows, (values, idx, mask_rows)), expected)


def test_a_later_loop_reads_rows_written_by_an_earlier_one():
    x, idx = randn(16, 128), torch.tensor([15, 3, 3, 0, 8, 9, 1, 2, 4, 5, 6, 7, 10, 11, 12, 13], dtype=torch.int32)
    _, result = code_and_output(write_then_read_later, (x.clone(), idx))
    torch.testing.assert_close(result, (x * 3)[idx.long()])


@pallasite.kernel
def columns_not_a_run(x, idx):
    """cols = 2 * arange: not the positions of a row's columns, so the gather stays flat."""
    d = x.size(1)
    x_flat = x.view(-1)
    out = torch.empty([idx.size(0), d // 2], dtype=x.dtype, device=x.device)
    for t in hl.tile(idx.size(0)):
        out[t, :] = hl.load(x_flat, [idx[t][:, None] * d + hl.arange(0, d, 2)[None, :]])
    return out


def test_other_flat_indices_stay_element_gathers():
    x, idx = randn(8, 16), torch.tensor([7, 0, 3], dtype=torch.int32)
    (gather,) = _gathers(only_call(columns_not_a_run, (x, idx))).values()
    assert gather.rows == x.numel()
    _, result = code_and_output(columns_not_a_run, (x, idx))
    torch.testing.assert_close(result, x[idx.long()][:, ::2])


@pallasite.kernel
def where_by_hand(x, idx):
    """The user masks the index with torch.where (no extra_mask): a masked row reads element 0
    in every lane, as torch does, so it is not a row gather (found by the trial)."""
    d = x.size(1)
    x_flat = x.view(-1)
    out = torch.empty([idx.size(0), d], dtype=x.dtype, device=x.device)
    for t in hl.tile(idx.size(0)):
        r = idx[t]
        out[t, :] = hl.load(x_flat, [torch.where((r != 2)[:, None], r[:, None] * d + hl.arange(d)[None, :], 0)])
    return out


@pallasite.kernel
def mask_over_segments(x, starts, keep):
    """A per-row mask that broadcasts over the window's rows too ([b, 1, 1] over [b, 4, d])."""
    d = x.size(1)
    x_flat = x.view(-1)
    out = torch.zeros([starts.size(0), 4, d], dtype=x.dtype, device=x.device)
    for tb in hl.tile(starts.size(0)):
        flat = (starts[tb][:, None] + hl.arange(4)[None, :])[:, :, None] * d + hl.arange(d)[None, None, :]
        out[tb, :, :] = hl.load(x_flat, [flat], extra_mask=(keep[tb] != 0)[:, None, None])
    return out


def test_masks_the_user_writes_and_masks_that_broadcast():
    x = torch.arange(4 * 8, dtype=torch.float32).reshape(4, 8)
    idx = torch.tensor([1, 2, 3], dtype=torch.int32)
    expected = x.view(-1)[torch.where((idx != 2)[:, None], idx.long()[:, None] * 8 + torch.arange(8), 0)]
    _, result = code_and_output(where_by_hand, (x, idx))
    torch.testing.assert_close(result, expected)
    x = randn(16, 128)
    starts, keep = torch.tensor([0, 5, 12], dtype=torch.int32), torch.tensor([1, 0, 1], dtype=torch.int32)
    expected = torch.stack([x[s:s + 4] * k for s, k in zip(starts.tolist(), keep.tolist())])
    assert "x_rows = x_ref" in code_and_output(mask_over_segments, (x, starts, keep))[0]
    _, result = code_and_output(mask_over_segments, (x, starts, keep))
    torch.testing.assert_close(result, expected)


@pallasite.kernel
def read_then_scatter_rows(out, idx):
    """Reads out's rows through out itself, then writes rows through its flat view, whose
    rows are out itself: one operand (it was an element scatter, whose one-hot overflowed
    VMEM: found by the trial)."""
    n, d = out.size()
    out_flat = out.view(-1)
    for t in hl.tile(n):
        v = out[t, :] + 1
        hl.store(out_flat, [idx[t][:, None] * d + hl.arange(d)[None, :]], v)
    return out


def test_a_scatter_of_rows_after_a_read_through_the_base():
    out, idx = randn(256, 128), torch.arange(256, dtype=torch.int32)
    code, result = code_and_output(read_then_scatter_rows, (out.clone(), idx))
    assert "out_flat_rows" not in code and "'out'" in code
    torch.testing.assert_close(result, out + 1)
