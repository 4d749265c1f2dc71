"""A flattened worklist with head grid axes (`for seq, h in hl.grid([n, H])`) runs its
item axis `parallel` when every store is `out[tile_q, h, :]` (issue #8, plan/
worklist_isolation.py): each (head, item) program writes only its rows of its head, by
DMA from a VMEM scratch into the window `out_hbm.at[pl.ds(row, 2**b), h, :]`. Checked
bitwise against the per-segment grid under every loop type, on two simulated cores with
the race detector, and lowered to Mosaic."""
from __future__ import annotations

import itertools

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, schedule_report

from test_worklist_parallel import run_on_two_cores
from test_worklist_heads import (HEADS, LENGTHS, heads_grid_attention, heads_scale, heads_scale_reference, inputs,
                                 offsets_of, plan_of, softmax_reference)



@pallasite.kernel
def two_head_axes(x, offsets):
    """Two head grid axes, both indexing the store: `out[tile_q, h1, h2, :]`."""
    total, h1_count, h2_count, d = x.size()
    out = torch.zeros_like(x)
    for seq, h1, h2 in hl.grid([offsets.size(0) - 1, h1_count, h2_count]):
        for tile_q in hl.tile(offsets[seq], offsets[seq + 1]):
            out[tile_q, h1, h2, :] = x[tile_q, h1, h2, :] * 3.0 + h1 * 10 + h2
    return out


@pallasite.kernel
def one_head_not_stored(x, offsets):
    """`h2` does not index the store: the programs of both h2 write the same rows."""
    total, heads, d = x.size()
    out = torch.zeros_like(x)
    for seq, h, h2 in hl.grid([offsets.size(0) - 1, heads, 2]):
        for tile_q in hl.tile(offsets[seq], offsets[seq + 1]):
            out[tile_q, h, :] = x[tile_q, h, :] + 1.0
    return out


@pallasite.kernel
def head_and_whole_stores(x, offsets):
    """One store at the head, one of every head: the second writes other heads' rows."""
    total, heads, d = x.size()
    out = torch.zeros_like(x)
    for seq, h in hl.grid([offsets.size(0) - 1, heads]):
        for tile_q in hl.tile(offsets[seq], offsets[seq + 1]):
            out[tile_q, :, :] = x[tile_q, :, :]
            out[tile_q, h, :] = x[tile_q, h, :] * 2.0
    return out


@pallasite.kernel
def head_on_the_last_axis(x, offsets):
    """`out[tile_q, :, h]`: a head on the lane axis, where a row's window is one strided lane."""
    total, d, heads = x.size()
    out = torch.zeros_like(x)
    for seq, h in hl.grid([offsets.size(0) - 1, heads]):
        for tile_q in hl.tile(offsets[seq], offsets[seq + 1]):
            out[tile_q, :, h] = x[tile_q, :, h] * 2.0
    return out


def assert_items_write_their_head_rows(call, heads=("h",)):
    worklist = call.worklist
    assert [axis.semantics.value for axis in call.grid] == ["parallel"] * (len(heads) + 1)
    assert [axis.dim.name for axis in call.grid] == [*heads, "work_item"]
    (write_back,) = worklist.write_backs
    assert write_back.symbol.name == "out"
    assert tuple(dim.name for dim in write_back.head_axes if dim is not None) == heads
    assert worklist.isolation.reason == "" and worklist.store_isolation.startswith("parallel")
    assert all(name in worklist.store_isolation for name in heads)
    (out_operand,) = call.outputs
    assert out_operand.memory.value == "hbm"


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_head_grid_items_write_their_rows_in_parallel_bitwise_the_per_segment_result(loop_type):
    x = torch.randn(sum(LENGTHS), HEADS, 128)
    offsets = offsets_of(LENGTHS)
    cases = [(heads_scale, (x, offsets), [8], heads_scale_reference),
             (heads_grid_attention, inputs(), [8, 8], softmax_reference)]
    for kernel, args, blocks, reference in cases:
        call = plan_of(kernel, args, block_sizes=blocks, pallas_loop_type=loop_type)
        assert_items_write_their_head_rows(call)
        assert call.worklist.write_backs[0].head_axes[1] is None  # the last axis is whole
        _, flat = code_and_output(kernel, args, block_sizes=blocks, pallas_loop_type=loop_type)
        _, per_segment = code_and_output(kernel, args, block_sizes=blocks, pallas_loop_type=loop_type,
                                         pallas_flatten_worklist=False)
        assert torch.equal(flat, per_segment)  # a schedule change: bitwise the same
        torch.testing.assert_close(flat, reference(*args), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("loop_type, grouping", list(zip(LOOP_TYPES, itertools.cycle((2, 1)))))  # every loop type
def test_heads_and_items_split_over_two_cores_without_races(loop_type, grouping, monkeypatch):
    x = torch.randn(40, HEADS, 128)
    offsets = torch.tensor([3, 16, 16, 35], dtype=torch.int32)  # rows 0..3 and 35..40 keep their zeros
    config = dict(block_sizes=[8], pallas_loop_type=loop_type, pallas_worklist_grouping=grouping)
    assert_items_write_their_head_rows(plan_of(heads_scale, (x, offsets), **config))
    out = run_on_two_cores(heads_scale, (x, offsets), monkeypatch, **config)
    expected = torch.zeros_like(x)
    expected[3:35] = heads_scale_reference(x[3:35], offsets)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_two_head_axes_index_the_window_of_each_program(loop_type):
    x = torch.randn(sum(LENGTHS), 2, 3, 128)
    offsets = offsets_of(LENGTHS)
    call = plan_of(two_head_axes, (x, offsets), block_sizes=[8], pallas_loop_type=loop_type)
    assert_items_write_their_head_rows(call, heads=("h1", "h2"))
    _, out = code_and_output(two_head_axes, (x, offsets), block_sizes=[8], pallas_loop_type=loop_type)
    h1 = torch.arange(2, dtype=x.dtype)[None, :, None, None]
    h2 = torch.arange(3, dtype=x.dtype)[None, None, :, None]
    torch.testing.assert_close(out, x * 3.0 + h1 * 10 + h2)
    _, per_segment = code_and_output(two_head_axes, (x, offsets), block_sizes=[8], pallas_loop_type=loop_type,
                                     pallas_flatten_worklist=False)
    assert torch.equal(out, per_segment)


def test_a_head_axis_the_store_does_not_index_keeps_the_items_ordered_and_says_why():
    x = torch.randn(sum(LENGTHS), HEADS, 128)
    offsets = offsets_of(LENGTHS)
    call = plan_of(one_head_not_stored, (x, offsets), block_sizes=[8])
    worklist = call.worklist
    assert worklist.write_backs == () and call.grid[worklist.item_axis].semantics.value == "arbitrary"
    assert worklist.isolation.reason == ("'out' is not indexed by the head grid axis 'h2' (the programs of "
                                         "every 'h2' would write the same rows)")
    _, out = code_and_output(one_head_not_stored, (x, offsets), block_sizes=[8])
    torch.testing.assert_close(out, x + 1.0)
    call = plan_of(head_and_whole_stores, (x, offsets), block_sizes=[8])
    assert call.worklist.write_backs == () and call.grid[call.worklist.item_axis].semantics.value == "arbitrary"
    assert call.worklist.isolation.reason == "'out' is stored at different head axes"
    lanes = torch.randn(sum(LENGTHS), 128, HEADS)
    call = plan_of(head_on_the_last_axis, (lanes, offsets), block_sizes=[8])
    assert call.worklist.write_backs == () and call.grid[call.worklist.item_axis].semantics.value == "arbitrary"
    assert call.worklist.isolation.reason.startswith("'out' is indexed by a head on its last axis")
    _, out = code_and_output(head_on_the_last_axis, (lanes, offsets), block_sizes=[8])
    assert torch.equal(out, lanes * 2.0)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_all_empty_segments_under_parallel_heads_return_the_empty_output(loop_type):
    x = torch.randn(0, HEADS, 128)
    offsets = torch.tensor([0, 0, 0], dtype=torch.int32)
    call = plan_of(heads_scale, (x, offsets), block_sizes=[8], pallas_loop_type=loop_type)
    assert call.worklist is not None
    _, out = code_and_output(heads_scale, (x, offsets), block_sizes=[8], pallas_loop_type=loop_type)
    _, per_segment = code_and_output(heads_scale, (x, offsets), block_sizes=[8], pallas_loop_type=loop_type,
                                     pallas_flatten_worklist=False)
    assert out.shape == per_segment.shape == (0, HEADS, 128)


def test_decreasing_offsets_are_an_error_when_head_items_run_in_parallel():
    x = torch.randn(15, HEADS, 128)
    offsets = torch.tensor([0, 10, 5, 15], dtype=torch.int32)  # rows 5..10 in two segments
    with pytest.raises(pallasite.exc.ShapeMismatch, match="end before they begin"):
        code_and_output(heads_scale, (x, offsets), block_sizes=[8])
    _, out = code_and_output(heads_scale, (x, offsets), block_sizes=[8], pallas_flatten_worklist=False)
    torch.testing.assert_close(out, heads_scale_reference(x, offsets))


def test_schedule_report_counts_each_heads_write_backs():
    """Two head programs per item, each copying its head's rows: the traffic of `out` is
    its rows once, and each item waits once per head."""
    x = torch.randn(sum(LENGTHS), HEADS, 128)
    offsets = offsets_of(LENGTHS)
    config = dict(block_sizes=[8], pallas_loop_type="unroll")
    call = plan_of(heads_scale, (x, offsets), **config)
    (x_operand,) = [op for op in call.inputs if op.symbol.name == "x"]
    assert x_operand.memory.value == "vmem_block"  # each head's rows of x, resident: read once per head
    report = schedule_report(heads_scale, (x, offsets), **config)
    smem = 4 * offsets.numel() + 3 * 4 * call.worklist.max_items
    row_bytes = 128 * 4  # one head's row
    assert report["hbm_bytes"] == smem + 2 * sum(LENGTHS) * HEADS * row_bytes  # x read, out written
    items = sum(-(-n // 8) for n in LENGTHS)
    assert report["grid_programs"] == items * HEADS
    # the pipeline's first x block per head, then one waited write-back per (head, item)
    assert report["exposed_dma_waits"] == 1 + items * HEADS


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_parallel_head_items_lower_to_mosaic(loop_type):
    x = torch.randn(sum(LENGTHS), HEADS, 128, dtype=torch.bfloat16)
    offsets = offsets_of(LENGTHS)
    check_tpu_lowering(heads_scale, (x, offsets), block_sizes=[16], pallas_loop_type=loop_type)
    q, k, v, offsets = inputs()
    args = (q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16), offsets)
    check_tpu_lowering(heads_grid_attention, args, block_sizes=[16, 16], pallas_loop_type=loop_type)
    x4 = torch.randn(sum(LENGTHS), 2, 3, 128, dtype=torch.bfloat16)
    check_tpu_lowering(two_head_axes, (x4, offsets), block_sizes=[16], pallas_loop_type=loop_type)
