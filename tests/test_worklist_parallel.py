"""A flattened worklist's item axis runs `parallel` when each item writes only its own
rows (issue #8 §2, plan/worklist_isolation.py): the output stays in HBM and each item
copies its valid rows [start, start + extent) from a VMEM scratch by DMA. Checked on two
simulated TensorCores with the race detector on unaligned segments (tiles straddle
segment boundaries), against torch, and where the ordered scheme stays, why."""
from __future__ import annotations

import itertools

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.runtime import interpret
from pallasite.testing import check_tpu_lowering, code_and_output, schedule_report

from examples.jagged_attention import jagged_attention, reference

LENGTHS = (13, 0, 3, 29, 1)  # unaligned, an empty and a one-row segment


def offsets_of(lengths) -> torch.Tensor:
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)


def qkv(total: int, d: int = 64, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(total, d, generator=generator) for _ in range(3))


def plan_of(kernel, args, **config):
    bound = kernel.bind(tuple(args))
    return bound.plan(bound.resolve_config(pallasite.Config(**config))).calls[0]


def run_on_two_cores(kernel, args, monkeypatch, **config):
    """Compile afresh on two simulated cores (parallel axes split, visited out of order);
    a race raises exc.DataRace."""
    monkeypatch.setenv(interpret.RACES_ENV, "1")
    monkeypatch.setenv(interpret.CORES_ENV, "2")
    monkeypatch.setenv(interpret.SEED_ENV, "7")
    kernel.reset()
    try:
        compiled = kernel.bind(tuple(args)).compile_config(config)
        assert compiled.module.INTERPRET.num_cores_or_threads == 2
        assert compiled.module.INTERPRET.detect_races
        return compiled(*args)
    finally:
        kernel.reset()


@pytest.mark.parametrize("loop_type, grouping", zip(LOOP_TYPES, itertools.cycle((1, 2))))  # every loop type
def test_items_write_their_own_rows_in_parallel_without_races(loop_type, grouping, monkeypatch):
    q, k, v = qkv(sum(LENGTHS))
    offsets = offsets_of(LENGTHS)
    config = dict(block_sizes=[8, 8], pallas_loop_type=loop_type, pallas_worklist_grouping=grouping)
    call = plan_of(jagged_attention, (q, k, v, offsets), **config)
    worklist = call.worklist
    assert [axis.semantics.value for axis in call.grid] == ["parallel"]
    assert [w.symbol.name for w in worklist.write_backs] == ["out"]
    assert worklist.write_backs[0].rows == 8 * grouping
    assert worklist.store_isolation.startswith("parallel") and "by DMA" in worklist.store_isolation
    (out_operand,) = call.outputs
    assert out_operand.memory.value == "hbm"
    out = run_on_two_cores(jagged_attention, (q, k, v, offsets), monkeypatch, **config)
    torch.testing.assert_close(out, reference(q, k, v, offsets), atol=1e-4, rtol=1e-4)


def test_rows_outside_every_segment_keep_their_contents(monkeypatch):
    """Offsets that start after row 0 and end before the last row: no item writes those rows."""
    q, k, v = qkv(40)
    offsets = torch.tensor([3, 16, 16, 35], dtype=torch.int32)
    out = run_on_two_cores(jagged_attention, (q, k, v, offsets), monkeypatch, block_sizes=[8, 8])
    expected = torch.zeros_like(q)
    expected[3:35] = reference(q[3:35], k[3:35], v[3:35], offsets - 3)[:32]
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


def test_decreasing_offsets_are_an_error_when_items_run_in_parallel():
    q, k, v = qkv(15)
    offsets = torch.tensor([0, 10, 5, 15], dtype=torch.int32)  # rows 5..10 in two segments
    with pytest.raises(pallasite.exc.ShapeMismatch, match="end before they begin"):
        code_and_output(jagged_attention, (q, k, v, offsets), block_sizes=[8, 8])
    _, out = code_and_output(jagged_attention, (q, k, v, offsets), block_sizes=[8, 8], pallas_flatten_worklist=False)
    expected = torch.zeros_like(q)
    expected[0:10] = reference(q[:10], k[:10], v[:10], torch.tensor([0, 10], dtype=torch.int32))
    expected[5:15] = reference(q[5:], k[5:], v[5:], torch.tensor([0, 10], dtype=torch.int32))
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


@pallasite.kernel
def jagged_accumulate(x, offsets, out):
    """`out[tile] += ...`: the output is read in the loop, so items stay ordered."""
    for seq in hl.grid(offsets.size(0) - 1):
        for tile in hl.tile(offsets[seq], offsets[seq + 1]):
            out[tile, :] += x[tile, :] * 2.0
    return out


def test_an_output_read_in_the_loop_keeps_the_ordered_scheme_and_says_why(monkeypatch):
    x = torch.randn(sum(LENGTHS), 128)
    offsets = offsets_of(LENGTHS)
    base = torch.randn_like(x)
    call = plan_of(jagged_accumulate, (x, offsets, base.clone()), block_sizes=[8])
    worklist = call.worklist
    assert worklist.write_backs == () and call.grid[0].semantics.value == "arbitrary"
    assert worklist.isolation.reason == "'out' is read in the loop (items would see each other's rows)"
    assert worklist.store_isolation.endswith(worklist.isolation.reason)
    out = run_on_two_cores(jagged_accumulate, (x, offsets, base.clone()), monkeypatch, block_sizes=[8])
    torch.testing.assert_close(out, base + 2 * x)


@pallasite.kernel
def jagged_positive(x, offsets):
    """A bool output of the item loop: Mosaic copies no bool ref by DMA."""
    out = torch.zeros(x.size(), dtype=torch.bool, device=x.device)
    for seq in hl.grid(offsets.size(0) - 1):
        for tile in hl.tile(offsets[seq], offsets[seq + 1]):
            out[tile, :] = x[tile, :] > 0
    return out


def test_a_bool_output_keeps_the_ordered_scheme_and_lowers(monkeypatch):
    x = torch.randn(sum(LENGTHS), 128)
    offsets = offsets_of(LENGTHS)
    call = plan_of(jagged_positive, (x, offsets), block_sizes=[8])
    assert call.worklist.write_backs == ()
    assert call.worklist.isolation.reason == "'out' is bool, which Mosaic copies by no DMA"
    out = run_on_two_cores(jagged_positive, (x, offsets), monkeypatch, block_sizes=[8])
    assert torch.equal(out, x > 0)
    check_tpu_lowering(jagged_positive, (x, offsets), block_sizes=[8])


def test_schedule_report_counts_the_items_write_backs():
    lengths = (5, 20, 3, 0, 17)
    q, k, v = qkv(sum(lengths))
    offsets = offsets_of(lengths)
    config = dict(block_sizes=[8, 8], pallas_loop_type="unroll")
    flat = schedule_report(jagged_attention, (q, k, v, offsets), **config)
    ordered = schedule_report(jagged_attention, (q, k, v, offsets), **config, pallas_flatten_worklist=False)
    call = plan_of(jagged_attention, (q, k, v, offsets), **config)
    tables = 3 * 4 * call.worklist.max_items
    out_bytes = q.numel() * 4
    # ordered: `out` is copied in and written back whole; parallel: each item's rows once
    assert flat["hbm_bytes"] - tables == ordered["hbm_bytes"] - 2 * out_bytes + sum(lengths) * 64 * 4
    items = sum(-(-n // 8) for n in lengths)
    assert flat["grid_programs"] == items
