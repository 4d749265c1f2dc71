"""`pallasite.testing.schedule_report`: a plan's schedule counted on the host for concrete
arguments, without running the kernel (issue #8 §4), and `python -m pallasite report`."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.ir import cdiv
from pallasite.plan.loops import LOOP_TYPES
from pallasite.plan.metrics import schedule_metrics
from pallasite.testing import schedule_report

from schedule_kernels import (
    causal_masked, causal_pruned, jagged_window_attention, window_attention, window_tiles,
)

ROOT = Path(__file__).resolve().parent.parent


def _meta(*shape, dtype=torch.float32):
    return tuple(torch.empty(*shape, dtype=dtype, device="meta") for _ in range(3))


def _attention_flops(tiles: int, block_q: int, block_k: int, d: int) -> int:
    """Two products per key tile: q @ k^T and p @ v."""
    return tiles * 2 * (2 * block_q * block_k * d)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_causal_prunes_to_the_lower_triangle(loop_type):
    q, k, v = _meta(1, 512, 128)  # meta tensors: no value is read, nothing runs
    pruned = schedule_report(causal_pruned, (q, k, v), block_sizes=[64, 64], pallas_loop_type=loop_type)
    masked = schedule_report(causal_masked, (q, k, v), block_sizes=[64, 64], pallas_loop_type=loop_type)
    assert pruned["inner_tiles"] == sum(range(1, 9)) == 36
    assert masked["inner_tiles"] == 8 * 8
    assert pruned["grid_programs"] == masked["grid_programs"] == 8
    assert pruned["max_program_tiles"] == masked["max_program_tiles"] == 8
    assert pruned["flops"] == _attention_flops(36, 64, 64, 128)
    assert masked["flops"] == _attention_flops(64, 64, 64, 128)
    assert pruned["config"]["pallas_loop_type"] == loop_type


def test_streamed_bytes_follow_the_visited_tiles():
    q, k, v = _meta(2, 512, 128)
    report = schedule_report(causal_pruned, (q, k, v), block_sizes=[64, 64], pallas_loop_type="emit_pipeline")
    tensor = 2 * 512 * 128 * 4
    window = 64 * 128 * 4
    # q read once and out written once by the grid's BlockSpecs; k and v one window per key tile.
    assert report["inner_tiles"] == 2 * 36
    assert report["hbm_bytes"] == 2 * tensor + 2 * report["inner_tiles"] * window
    assert report["min_hbm_bytes"] == 4 * tensor
    assert report["host_pad_bytes"] == 0


def test_the_chip_is_chosen_per_report():
    """`chip=` plans and models another TPU generation: the counts are the schedule's, the
    modelled time the chip's (v6e's 256-wide MXU drains take twice v5e's cycles, and its
    peaks are higher). The memory term is the bytes at the chip's bandwidth plus each step's
    copy latency in the chip's cycles, so only its bytes part halves."""
    q, k, v = _meta(2, 512, 128)
    v5e, v6e = (schedule_report(causal_pruned, (q, k, v), chip=chip, block_sizes=[64, 64]) for chip in ("v5e", "v6e"))
    assert (v5e["chip"], v6e["chip"]) == ("v5e", "v6e")
    assert v5e["inner_tiles"] == v6e["inner_tiles"] and v5e["flops"] == v6e["flops"]
    from pallasite.runtime.chips import chip_figures

    latency = {chip: report["modelled_breakdown"]["memory"] - report["hbm_bytes"] / chip_figures(chip).hbm_bytes_per_second
               for chip, report in (("v5e", v5e), ("v6e", v6e))}
    assert latency["v5e"] > latency["v6e"] > 0  # the same steps, v5e's slower clock
    bytes_part = {chip: report["modelled_breakdown"]["memory"] - latency[chip] for chip, report in (("v5e", v5e), ("v6e", v6e))}
    assert bytes_part["v5e"] == pytest.approx(2 * bytes_part["v6e"])  # 819 vs 1638 GB/s
    assert v5e["modelled_seconds"] != v6e["modelled_seconds"]


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_static_schedules_agree_with_the_plan_metrics(loop_type):
    q, k, v = _meta(2, 256, 128)
    config = pallasite.Config(block_sizes=[64, 32], pallas_loop_type=loop_type)
    report = schedule_report(causal_masked, (q, k, v), **config)
    metrics = schedule_metrics(causal_masked.bind((q, k, v)).plan(config))
    assert metrics.hbm_bytes is not None
    assert report["hbm_bytes"] == metrics.hbm_bytes
    assert report["min_hbm_bytes"] == metrics.min_hbm_bytes
    assert report["host_pad_bytes"] == metrics.host_padding_bytes
    assert report["exposed_dma_waits"] == metrics.exposed_dma_waits
    assert report["vmem_bytes"] == causal_masked.bind((q, k, v)).plan(config).calls[0].vmem_bytes


@pytest.mark.parametrize("w", [0, 5, 64, 100, 1000])
def test_sliding_window_counts(w):
    q, k, v = _meta(1, 512, 128)
    report = schedule_report(window_attention, (q, k, v, w), block_sizes=[64, 64])
    assert report["inner_tiles"] == window_tiles(512, w, 64, 64)
    assert report["max_program_tiles"] == max(
        len(range(max(0, b - w), min(512, b + 64), 64)) for b in range(0, 512, 64))


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_jagged_offsets_are_read_from_the_arguments(loop_type):
    q, k, v = (torch.zeros(73, 128) for _ in range(3))
    offsets = torch.tensor([0, 20, 20, 33, 73], dtype=torch.int32)  # lengths 20, 0, 13, 40
    lengths = [20, 0, 13, 40]
    # one program per segment (not flattened: pallas_flatten_worklist=False)
    report = schedule_report(jagged_window_attention, (q, k, v, offsets, 11), block_sizes=[8, 8],
                             pallas_loop_type=loop_type, pallas_flatten_worklist=False)
    per_segment = [window_tiles(n, 11, 8, 8) for n in lengths]
    assert report["grid_steps"] == 4
    assert report["grid_programs"] == 3  # the empty segment's program runs no tile, stores nothing
    assert report["inner_tiles"] == sum(per_segment)
    assert report["max_program_tiles"] == max(per_segment)
    assert report["flops"] == _attention_flops(sum(per_segment), 8, 8, 128)
    # flattened (the default): one program per (segment, q tile) item, the same key steps
    flat = schedule_report(jagged_window_attention, (q, k, v, offsets, 11), block_sizes=[8, 8],
                           pallas_loop_type=loop_type)
    assert flat["grid_programs"] == sum(cdiv(n, 8) for n in lengths)
    # the minimum is the user's tensors read and written once, whatever the schedule (not the
    # worklist's item tables, which the host builds for the kernel)
    assert flat["min_hbm_bytes"] == report["min_hbm_bytes"]
    assert flat["inner_tiles"] == report["inner_tiles"]
    assert flat["max_program_tiles"] == max(len(range(max(0, b - 11), min(n, b + 8), 8))
                                            for n in lengths for b in range(0, n, 8))
    # Other offsets, same compiled signature: other counts.
    offsets = torch.tensor([0, 73, 73, 73, 73], dtype=torch.int32)
    report = schedule_report(jagged_window_attention, (q, k, v, offsets, 11), block_sizes=[8, 8],
                             pallas_loop_type=loop_type, pallas_flatten_worklist=False)
    assert report["inner_tiles"] == report["max_program_tiles"] == window_tiles(73, 11, 8, 8)


def test_jagged_sum_example():
    from examples.jagged_sum import example_inputs, jagged_sum
    x, offsets = example_inputs()
    report = schedule_report(jagged_sum, (x, offsets))
    block = report["config"]["block_sizes"][0]
    lengths = (offsets[1:] - offsets[:-1]).tolist()
    assert report["inner_tiles"] == sum(cdiv(n, block) for n in lengths)
    assert report["grid_programs"] == len(lengths)
    assert report["hbm_bytes"] is not None and report["hbm_bytes"] >= report["min_hbm_bytes"]


@pallasite.kernel
def jagged_tile_sums(values, offsets):
    nb = offsets.size(0) - 1
    out = torch.zeros([nb], dtype=torch.float32, device=values.device)
    for tile_b in hl.tile(nb):
        starts = offsets[tile_b]
        lengths = offsets[tile_b.index + 1] - starts
        acc = hl.zeros([tile_b], dtype=torch.float32)
        for tile_k in hl.jagged_tile(lengths):
            acc = acc + hl.load(values, [starts[:, None] + tile_k.index[None, :]]).sum(-1)
        out[tile_b] = acc
    return out


def test_a_jagged_tile_loop_bound_is_its_tiles_longest_length():
    """hl.jagged_tile's loop runs to the longest length of the outer tile (`amax` of a vector
    read at the tile's positions): the report could not evaluate it, so autotuning rejected every
    candidate of every hl.jagged_tile kernel (trial V)."""
    offsets = torch.tensor([0, 3, 3, 40, 41, 100, 100, 230], dtype=torch.int32)
    lengths = (offsets[1:] - offsets[:-1]).tolist()
    for block_b, block_k in ((2, 16), (4, 32), (8, 128)):
        report = schedule_report(jagged_tile_sums, (torch.randn(230), offsets), block_sizes=[block_b, block_k])
        longest = [max(lengths[i:i + block_b]) for i in range(0, len(lengths), block_b)]
        assert report["inner_tiles"] == sum(cdiv(n, block_k) for n in longest)


@pallasite.kernel
def pick_rows(x, idx):
    out = torch.empty([idx.size(0), x.size(1), x.size(2)], dtype=x.dtype, device=x.device)
    for g in hl.grid(idx.size(0)):
        out[g, :, :] = x[idx[g], :, :] * 2.0
    return out


def test_block_indices_read_from_tables_use_their_values():
    x = torch.randn(16, 8, 128)
    idx = torch.tensor([3, 3, 1, 3], dtype=torch.int32)
    plan_metrics = schedule_metrics(pick_rows.bind((x, idx)).plan())
    assert plan_metrics.hbm_bytes is None  # the table's values decide which rows are copied
    report = schedule_report(pick_rows, (x, idx))
    row = 8 * 128 * 4
    # Rows 3, 1, 3 of x are copied (the repeated 3 stays resident), 4 rows written, idx read.
    assert report["hbm_bytes"] == 3 * row + 4 * row + idx.numel() * 4


def test_a_bound_read_from_a_meta_tensor_is_a_clear_error():
    q, k, v = _meta(73, 128)
    offsets = torch.empty(4, dtype=torch.int32, device="meta")
    with pytest.raises(exc.UnsupportedOperation, match="offsets"):
        schedule_report(jagged_window_attention, (q, k, v, offsets, 3), block_sizes=[8, 8])


def test_command_line_report_on_an_example():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "pallasite", "report", "examples.attention:attention"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    from examples.attention import attention, example_inputs
    expected = schedule_report(attention, example_inputs())
    lines = {line.split()[0]: line.split()[1] for line in result.stdout.splitlines()[2:] if line.strip()}
    for key in ("grid_programs", "inner_tiles", "flops", "min_hbm_bytes", "vmem_bytes"):
        assert int(lines[key]) == expected[key], key
    assert "schedule of examples.attention:attention" in result.stdout


def test_command_line_rejects_a_target_without_kernel():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "pallasite", "report", "examples.attention"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert "MODULE:KERNEL" in result.stderr


@pallasite.kernel
def host_offsets_sum(x, offsets):
    shifted = offsets + 0  # computed by host code: the report cannot know its values
    out = torch.zeros([offsets.size(0) - 1, x.size(1)], dtype=x.dtype, device=x.device)
    for g in hl.grid(offsets.size(0) - 1):
        acc = hl.zeros([x.size(1)], dtype=torch.float32)
        for t in hl.tile(shifted[g], shifted[g + 1], block_size=8):
            acc = acc + x[t, :].sum(0)
        out[g, :] = acc
    return out


def test_a_bound_host_code_computes_is_a_clear_error():
    x = torch.zeros(16, 128)
    offsets = torch.tensor([0, 5, 16], dtype=torch.int32)
    with pytest.raises(exc.UnsupportedOperation, match="host code computes"):
        schedule_report(host_offsets_sum, (x, offsets))


@pallasite.kernel(static_shapes=False)
def _dynamic_scale_add(x, y, alpha: float):
    out = torch.empty_like(x)
    for tm, tn in hl.tile(x.size()):
        out[tm, tn] = x[tm, tn] * alpha + y[tm, tn]
    return out


def test_a_dynamic_shape_kernel_is_reported_at_each_calls_sizes():
    """static_shapes=False: one bound kernel serves a bucket of sizes; the report plans at
    the arguments' sizes (a trial user got the first call's grid for every later size, and
    byte counts as size formulas)."""
    seen = []
    for m, n in [(513, 7), (4096, 4096), (100, 300)]:
        x = torch.empty(m, n, device="meta")
        report = schedule_report(_dynamic_scale_add, (x, x, 0.5))
        block_m, block_n = report["config"]["block_sizes"]
        assert report["grid_programs"] == cdiv(m, block_m) * cdiv(n, block_n)
        assert type(report["hbm_bytes"]) is int and report["hbm_bytes"] == 3 * 4 * m * n
        assert type(report["min_hbm_bytes"]) is int and report["min_hbm_bytes"] == 3 * 4 * m * n
        seen.append(report["modelled_seconds"])
    assert seen[1] > seen[0] and seen[1] > seen[2]
