"""Narrowing reads of loaded blocks (issue #9): constant indices and slices, hl.static_range,
runs driven by inner tiles. The block is loaded once per outer tile and stays a VMEM ref;
each narrowing read is `ref[pl.ds(start, size), ...]` (plan: `SubviewRead`)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.plan.plans import RefOffset
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref



def _subview_reads(kernel, args, **config):
    plan = kernel.bind(args).plan(pallasite.Config(**config)) if config else kernel.bind(args).plan()
    return [read for call in plan.calls for read in call.subviews.values()]


# ------------------------------------------------------------ constant forms --


@pallasite.kernel
def constant_forms(x):
    t, r, d = x.shape
    out = torch.empty([t, 4, d], dtype=x.dtype, device=x.device)
    for tile_t in hl.tile(t, block_size=8):
        blk = x[tile_t, :, :]
        first = blk[:, 0]  # [bt, d]
        pair = blk[:, 1:3].sum(1)  # [bt, d]
        row = blk[:, 2]
        out[tile_t, 0, :] = first + pair
        out[tile_t, 1, :] = row * 2
        acc = hl.zeros([tile_t, d], dtype=torch.float32)
        for i in (0, 1, 2, 3):
            acc = acc + blk[:, i] * (i + 1)
        out[tile_t, 2, :] = acc
        acc2 = hl.zeros([tile_t, d], dtype=torch.float32)
        for i in hl.static_range(4):
            acc2 = acc2 + blk[:, i, :] * (i + 1)
        out[tile_t, 3, :] = acc2 - acc
    return out


def _constant_forms_ref(x):
    out = torch.empty(x.shape[0], 4, x.shape[2])
    out[:, 0] = x[:, 0] + x[:, 1:3].sum(1)
    out[:, 1] = x[:, 2] * 2
    out[:, 2] = sum(x[:, i] * (i + 1) for i in range(4))
    out[:, 3] = 0
    return out


@pytest.mark.parametrize("t", [16, 13])
def test_constant_indices_and_slices(t):
    x = torch.randn(t, 4, 128)
    _, out = code_and_output(constant_forms, (x,))
    torch.testing.assert_close(out, _constant_forms_ref(x))
    torch.testing.assert_close(run_ref(constant_forms, (x,)), _constant_forms_ref(x))
    reads = _subview_reads(constant_forms, (x,))
    assert reads and all(read.ref_name == "x_ref" for read in reads)


@pallasite.kernel
def first_rows(x):
    t, d = x.shape
    row = torch.empty([t // 8, d], dtype=x.dtype, device=x.device)
    pair = torch.empty([t // 8, 2, d], dtype=x.dtype, device=x.device)
    for tile_t in hl.tile(t, block_size=8):
        blk = x[tile_t, :]
        row[tile_t.id, :] = blk[2]
        pair[tile_t.id, :, :] = blk[1:3]
    return row, pair


def test_constant_row_and_slice_of_rows():
    x = torch.randn(32, 128)
    _, (row, pair) = code_and_output(first_rows, (x,))
    blocks = x.view(4, 8, 128)
    torch.testing.assert_close(row, blocks[:, 2])
    torch.testing.assert_close(pair, blocks[:, 1:3])
    (read, slab) = sorted(_subview_reads(first_rows, (x,)), key=lambda r: len(r.ref_shape))
    assert read.ref_index == (RefOffset((2,), None), _full())


def _full():
    from pallasite.ir import FullSlice
    return FullSlice()


# ---------------------------------------------------------------- tile runs --


@pallasite.kernel
def run_sums(x):
    """Per outer tile, the sum of its rows read in runs of an inner tile over its extent."""
    t, d = x.shape
    out = torch.zeros([(t + 7) // 8, d], dtype=torch.float32, device=x.device)
    for tile_t in hl.tile(t, block_size=8):
        blk = x[tile_t, :]
        live = tile_t.end - tile_t.begin
        acc = hl.zeros([d], dtype=torch.float32)
        for tile_s in hl.tile(live):
            acc = acc + blk[tile_s.index].sum(0)
        out[tile_t.id, :] = acc
    return out


def _run_sums_ref(x):
    t = x.shape[0]
    return torch.stack([x[i:i + 8].float().sum(0) for i in range(0, t, 8)])


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("t,inner", [(16, 2), (13, 2), (13, 4), (5, 8)])
def test_run_of_inner_tile_over_the_live_extent(loop_type, t, inner):
    x = torch.randn(t, 128)
    config = dict(block_sizes=[inner], pallas_loop_type=loop_type)
    code, out = code_and_output(run_sums, (x,), **config)
    torch.testing.assert_close(out, _run_sums_ref(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(run_ref(run_sums, (x,), **config), _run_sums_ref(x), rtol=1e-5, atol=1e-5)
    assert "pl.ds(" in code
    (read,) = _subview_reads(run_sums, (x,), **config)
    assert read.ref_name == "x_ref" and isinstance(read.ref_index[0], RefOffset)


@pallasite.kernel
def begin_recurrence(x):
    """A sequential recurrence over rows: one row per inner step (`blk[tile_s.begin]`)."""
    t, d = x.shape
    out = torch.empty_like(x)
    for tile_t in hl.tile(t, block_size=8):
        blk = x[tile_t, :]
        state = hl.zeros([d], dtype=torch.float32)
        for tile_s in hl.tile(tile_t.end - tile_t.begin, block_size=1):
            state = state * 0.5 + blk[tile_s.begin]
            out[tile_t.begin + tile_s.begin, :] = state
    return out


def _begin_recurrence_ref(x):
    out = torch.empty_like(x)
    for start in range(0, x.shape[0], 8):
        state = torch.zeros(x.shape[1])
        for row in range(start, min(start + 8, x.shape[0])):
            state = state * 0.5 + x[row]
            out[row] = state
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("t", [16, 11])
def test_begin_of_inner_tile_reads_one_row(loop_type, t):
    x = torch.randn(t, 128)
    _, out = code_and_output(begin_recurrence, (x,), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, _begin_recurrence_ref(x))


@pallasite.kernel
def static_inner_runs(x):
    t, d = x.shape
    out = torch.zeros([(t + 7) // 8, d], dtype=torch.float32, device=x.device)
    for tile_t in hl.tile(t, block_size=8):
        blk = x[tile_t, :]
        acc = hl.zeros([d], dtype=torch.float32)
        for tile_s in hl.tile(8):
            acc = acc + blk[tile_s.index].sum(0)
        out[tile_t.id, :] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_run_of_static_inner_tile(loop_type):
    x = torch.randn(24, 128)
    _, out = code_and_output(static_inner_runs, (x,), block_sizes=[4], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, _run_sums_ref(x), rtol=1e-5, atol=1e-5)


def test_static_inner_tile_past_a_partial_outer_tile_is_invalid_config():
    x = torch.randn(13, 128)  # the last outer tile holds 5 rows; the inner loop reads 8
    with pytest.raises(exc.InvalidConfig, match="can pass the end of tile 'tile_t'"):
        code_and_output(static_inner_runs, (x,), block_sizes=[4])


def test_inner_block_not_dividing_the_outer_block_is_invalid_config():
    x = torch.randn(16, 128)
    with pytest.raises(exc.InvalidConfig, match="the block of .tile_s. divides the 8 positions"):
        code_and_output(run_sums, (x,), block_sizes=[3])


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_tile_runs_lower_to_mosaic(loop_type):
    x = torch.randn(16, 128)
    check_tpu_lowering(run_sums, (x,), block_sizes=[8], pallas_loop_type=loop_type)
    check_tpu_lowering(begin_recurrence, (x,), pallas_loop_type=loop_type)


def test_constant_forms_lower_to_mosaic():
    check_tpu_lowering(constant_forms, (torch.randn(16, 4, 128),))
    check_tpu_lowering(first_rows, (torch.randn(32, 128),))


# ------------------------------------------------------- runs after views --


@pallasite.kernel
def head_rows(x):
    """A head view of the block, then rows of it in runs (`blk[:, h, :]` then `hb[tile_s.index]`)."""
    t, h, d = x.shape
    out = torch.zeros([(t + 7) // 8, h, d], dtype=torch.float32, device=x.device)
    for tile_t in hl.tile(t, block_size=8):
        blk = x[tile_t, :, :]
        for head in hl.static_range(h):
            hb = blk[:, head, :]
            acc = hl.zeros([d], dtype=torch.float32)
            for tile_s in hl.tile(tile_t.end - tile_t.begin, block_size=2):
                acc = acc + hb[tile_s.index].sum(0)
            out[tile_t.id, head, :] = acc
    return out


@pallasite.kernel
def grid_head_rows(x):
    """The head is an inner grid index (a device scalar), the rows a run."""
    t, h, d = x.shape
    out = torch.zeros([(t + 7) // 8, h, d], dtype=torch.float32, device=x.device)
    for tile_t in hl.tile(t, block_size=8):
        blk = x[tile_t, :, :]
        for head in hl.grid(h):
            acc = hl.zeros([d], dtype=torch.float32)
            for tile_s in hl.tile(tile_t.end - tile_t.begin, block_size=2):
                acc = acc + blk[:, head, :][tile_s.index].sum(0)
            out[tile_t.id, head, :] = acc
    return out


def _head_rows_ref(x):
    return torch.stack([x[i:i + 8].sum(0) for i in range(0, x.shape[0], 8)])


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("kernel", [head_rows, grid_head_rows])
def test_run_after_a_head_view(loop_type, kernel):
    x = torch.randn(13, 4, 128)
    _, out = code_and_output(kernel, (x,), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, _head_rows_ref(x), rtol=1e-5, atol=1e-4)
    check_tpu_lowering(kernel, (torch.randn(16, 4, 128),), pallas_loop_type=loop_type)


@pallasite.kernel
def none_after_run(x):
    """A None axis around a run: the mask follows the run's axis."""
    t, d = x.shape
    out = torch.zeros([(t + 7) // 8, d], dtype=torch.float32, device=x.device)
    for tile_t in hl.tile(t, block_size=8):
        blk = x[tile_t, :]
        acc = hl.zeros([d], dtype=torch.float32)
        for tile_s in hl.tile(tile_t.end - tile_t.begin, block_size=2):
            acc = acc + blk[None, tile_s.index].sum(1)[0] + blk[tile_s.index, None, :].sum(0)[0]
        out[tile_t.id, :] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_none_axis_around_a_run_masks_the_run_axis(loop_type):
    x = torch.randn(13, 128)
    _, out = code_and_output(none_after_run, (x,), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, 2 * _run_sums_ref(x), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(run_ref(none_after_run, (x,)), 2 * _run_sums_ref(x), rtol=1e-5, atol=1e-4)


# ------------------------------------------------------ carried state reads --


@pallasite.kernel
def carried_state_rows(x, w):
    """A state [k, d] carried across tokens and updated every token; each token reads a
    run of its rows (`state[tile_k.index]`) — a computed value, kept in VMEM scratch."""
    t, d = x.shape
    k = w.size(0)
    out = torch.empty([t, d], dtype=torch.float32, device=x.device)
    for tile_t in hl.tile(t, block_size=8):
        blk = x[tile_t, :]
        wb = w[:, :]
        state = hl.zeros([k, d], dtype=torch.float32)
        for tile_s in hl.tile(tile_t.end - tile_t.begin, block_size=1):
            state = state * 0.5 + wb * blk[tile_s.begin][None, :]
            acc = hl.zeros([d], dtype=torch.float32)
            for tile_k in hl.tile(k, block_size=4):
                acc = acc + state[tile_k.index].sum(0)
            out[tile_t.begin + tile_s.begin, :] = acc
    return out


def _carried_state_ref(x, w):
    out = torch.empty_like(x)
    for start in range(0, x.shape[0], 8):
        state = torch.zeros(w.shape)
        for row in range(start, min(start + 8, x.shape[0])):
            state = state * 0.5 + w * x[row][None, :]
            out[row] = state.sum(0)
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_runs_of_a_carried_state(loop_type):
    x, w = torch.randn(11, 128), torch.randn(8, 128)
    code, out = code_and_output(carried_state_rows, (x, w), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, _carried_state_ref(x, w), rtol=1e-4, atol=1e-4)
    reads = _subview_reads(carried_state_rows, (x, w), pallas_loop_type=loop_type)
    assert any(read.spill_from is not None for read in reads)
    check_tpu_lowering(carried_state_rows, (torch.randn(16, 128), w), pallas_loop_type=loop_type)


# ------------------------------------------------------------------ examples --


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_short_conv_example_under_each_loop_type(loop_type):
    from examples import short_conv as example

    inputs = example.example_inputs()
    _, out = code_and_output(example.short_conv, inputs, block_sizes=[16], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, example.reference(*inputs), atol=2e-2, rtol=2e-2)
    check_tpu_lowering(example.short_conv, inputs, block_sizes=[16], pallas_loop_type=loop_type)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_gdn_example_under_each_loop_type(loop_type):
    from examples import gdn as example

    inputs = example.example_inputs()
    _, (out, final) = code_and_output(example.gdn, inputs, block_sizes=[8], pallas_loop_type=loop_type)
    expected_out, expected_final = example.reference(*inputs)
    torch.testing.assert_close(out, expected_out, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(final, expected_final, atol=1e-4, rtol=1e-4)
    check_tpu_lowering(example.gdn, inputs, block_sizes=[8], pallas_loop_type=loop_type)
