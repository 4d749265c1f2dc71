"""Flattened worklists (issue #8 §2): a grid over jagged segments runs as a grid of
(segment, q-tile) work items. Each kernel is checked per segment against torch, under
every loop type, flattened (grouping 1 and 2) and not; flattening is a schedule change,
so its results are bitwise the per-segment grid's."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref, schedule_report

from examples.jagged_attention import jagged_attention, reference as causal_reference



def offsets_of(lengths) -> torch.Tensor:
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)


def qkv(total: int, d: int, dtype=torch.float32, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(total, d, generator=generator).to(dtype) for _ in range(3))


def plan_of(kernel, args, **config):
    bound = kernel.bind(tuple(args))
    return bound.plan(bound.resolve_config(pallasite.Config(**config))).calls[0]


# Unaligned lengths (tiles straddle segments), an empty segment, a one-row segment.
LENGTHS = (13, 0, 3, 29, 1)


# ------------------------------------------------ causal jagged flash (online softmax) --


# Each loop type once per dtype; groupings 1 and 2 spread over them (the suite stays quick).
@pytest.mark.parametrize("loop_type, grouping", zip(LOOP_TYPES, itertools.cycle((1, 2))))
def test_causal_jagged_flash_f32(loop_type, grouping):
    q, k, v = qkv(sum(LENGTHS), 64)
    offsets = offsets_of(LENGTHS)
    config = dict(block_sizes=[8, 8], pallas_loop_type=loop_type, pallas_worklist_grouping=grouping)
    _, flat = code_and_output(jagged_attention, (q, k, v, offsets), **config)
    torch.testing.assert_close(flat, causal_reference(q, k, v, offsets), atol=1e-4, rtol=1e-4)
    _, per_segment = code_and_output(jagged_attention, (q, k, v, offsets), **config, pallas_flatten_worklist=False)
    assert torch.equal(flat, per_segment)


@pytest.mark.parametrize("loop_type", [t for t in LOOP_TYPES if t != "fori_loop"])  # fori_loop: the bf16 baddbmm test
def test_causal_jagged_flash_bf16_d128(loop_type):
    q, k, v = qkv(sum(LENGTHS), 128, torch.bfloat16)
    offsets = offsets_of(LENGTHS)
    _, out = code_and_output(jagged_attention, (q, k, v, offsets), block_sizes=[16, 16],
                             pallas_loop_type=loop_type, pallas_worklist_grouping=2)
    torch.testing.assert_close(out, causal_reference(q, k, v, offsets), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("lengths", [(0, 0, 0), (61,), (1, 60)], ids=["all-empty", "one-long", "tiny-then-long"])
def test_causal_jagged_flash_edge_lengths(lengths):
    q, k, v = qkv(sum(lengths), 64)
    offsets = offsets_of(lengths)
    _, out = code_and_output(jagged_attention, (q, k, v, offsets), block_sizes=[8, 8])
    assert out.shape == q.shape
    torch.testing.assert_close(out, causal_reference(q, k, v, offsets), atol=1e-4, rtol=1e-4)


def test_reference_mode_agrees_with_the_flattened_kernel():
    q, k, v = qkv(sum(LENGTHS), 64)
    offsets = offsets_of(LENGTHS)
    _, compiled = code_and_output(jagged_attention, (q, k, v, offsets), block_sizes=[8, 8],
                                  pallas_worklist_grouping=2)
    eager = run_ref(jagged_attention, (q, k, v, offsets), config={"block_sizes": [8, 8]})
    torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_flattened_kernels_lower_to_mosaic(loop_type):
    q, k, v = qkv(sum(LENGTHS), 128, torch.bfloat16)
    offsets = offsets_of(LENGTHS)
    for grouping in (1, 2):
        check_tpu_lowering(jagged_attention, (q, k, v, offsets), block_sizes=[16, 16],
                           pallas_loop_type=loop_type, pallas_worklist_grouping=grouping)
    q, k, v, offsets = dense_inputs()
    check_tpu_lowering(dense_kv_attention, (q, k, v, offsets), block_sizes=[8, 8], pallas_loop_type=loop_type)


# --------------------------------------------------------- the plan and the schedule --


def test_plan_records_the_worklist_and_how_stores_stay_apart():
    q, k, v = qkv(sum(LENGTHS), 64)
    offsets = offsets_of(LENGTHS)
    call = plan_of(jagged_attention, (q, k, v, offsets), block_sizes=[8, 8], pallas_worklist_grouping=2)
    worklist = call.worklist
    assert worklist is not None and worklist.grouping == 2 and worklist.rows_per_item == 16
    assert worklist.max_items == math.ceil(46 / 16) + len(LENGTHS)
    assert call.grid[0].num_blocks == worklist.max_items
    # the item tables live in SMEM (scalar-prefetched when an index map reads them)
    smem = {op.symbol for op in (*call.scalar_prefetch, *call.inputs) if op.memory.value == "smem"}
    assert smem >= set(worklist.tables)
    # each item writes only its own rows, by DMA from a scratch: the items run in parallel
    # (tests/test_worklist_parallel.py); a head axis keeps the ordered, masked scheme
    assert call.grid[0].semantics.value == "parallel"
    assert "only its rows [start, start + extent)" in worklist.store_isolation
    off = plan_of(jagged_attention, (q, k, v, offsets), block_sizes=[8, 8], pallas_flatten_worklist=False)
    assert off.worklist is None and off.worklist_reason == "pallas_flatten_worklist=False"
    assert off.grid[0].num_blocks == len(LENGTHS)


def test_a_carried_per_segment_sum_is_not_flattened():
    from examples.jagged_sum import example_inputs, jagged_sum
    call = plan_of(jagged_sum, example_inputs())
    assert call.worklist is None and "carries values" in call.worklist_reason


def test_schedule_report_counts_items_and_balances_load():
    lengths = (5, 100, 3, 0, 17)
    q, k, v = qkv(sum(lengths), 64)
    offsets = offsets_of(lengths)
    block = 8
    per_tile = {}  # (segment, q tile) -> causal key tiles
    for s, n in enumerate(lengths):
        for t, begin in enumerate(range(0, n, block)):
            per_tile[s, t] = len(range(0, min(n, begin + block), block))
    for grouping in (1, 2):
        report = schedule_report(jagged_attention, (q, k, v, offsets), block_sizes=[block, block],
                                 pallas_worklist_grouping=grouping)
        items = sum(math.ceil(n / (grouping * block)) for n in lengths)
        assert report["grid_programs"] == items
        # the grid is the static bound on items: the ones past the real count launch and do nothing
        bound = plan_of(jagged_attention, (q, k, v, offsets), block_sizes=[block, block],
                        pallas_worklist_grouping=grouping).worklist.max_items
        assert report["grid_steps"] == bound > items
        assert report["inner_tiles"] == sum(per_tile.values())
        busiest = max(sum(per_tile.get((s, g * grouping + j), 0) for j in range(grouping))
                      for s, n in enumerate(lengths) for g in range(math.ceil(n / (grouping * block))))
        assert report["max_program_tiles"] == busiest
    off = schedule_report(jagged_attention, (q, k, v, offsets), block_sizes=[block, block],
                          pallas_flatten_worklist=False)
    # programs that do work: the empty segment's program runs no tile and stores nothing
    assert off["grid_programs"] == sum(1 for n in lengths if n) == len(lengths) - 1
    assert off["grid_steps"] == len(lengths)  # but it is launched
    assert off["max_program_tiles"] == sum(v for (s, _), v in per_tile.items() if s == 1)


# ------------------------------------------------------------ dense K/V per segment --


@pallasite.kernel
def dense_kv_attention(q, k, v, offsets):
    """Jagged queries, each segment attending its own dense keys `k[seq]` ([n, S, D])."""
    total, d = q.size()
    keys = k.size(1)
    out = torch.zeros_like(q)
    scale = 1.0 / math.sqrt(d)
    for seq in hl.grid(offsets.size(0) - 1):
        for tile_q in hl.tile(offsets[seq], offsets[seq + 1]):
            q_blk = q[tile_q, :]
            m_i = hl.full([tile_q], float("-inf"), dtype=torch.float32)
            l_i = hl.zeros([tile_q], dtype=torch.float32)
            acc = hl.zeros([tile_q, d], dtype=torch.float32)
            for tile_k in hl.tile(keys):
                qk = hl.dot(q_blk, k[seq, tile_k, :].T) * scale
                m_new = torch.maximum(m_i, torch.amax(qk, -1))
                p = torch.exp(qk - m_new[:, None])
                alpha = torch.exp(m_i - m_new)
                l_i = l_i * alpha + torch.sum(p, -1)
                acc = hl.dot(p, v[seq, tile_k, :], acc=acc * alpha[:, None])
                m_i = m_new
            out[tile_q, :] = acc / l_i[:, None]
    return out


def dense_inputs(lengths=(11, 0, 26, 4), keys=24, d=128):
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(sum(lengths), d, generator=generator)
    k, v = (torch.randn(len(lengths), keys, d, generator=generator) for _ in range(2))
    return q, k, v, offsets_of(lengths)


def dense_reference(q, k, v, offsets):
    out = torch.zeros_like(q)
    bounds = offsets.tolist()
    for s, (begin, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        scores = q[begin:end] @ k[s].T / math.sqrt(q.size(1))
        out[begin:end] = torch.softmax(scores, -1) @ v[s]
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_dense_kv_per_segment(loop_type):
    q, k, v, offsets = dense_inputs()
    _, out = code_and_output(dense_kv_attention, (q, k, v, offsets), block_sizes=[8, 8], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, dense_reference(q, k, v, offsets), atol=1e-4, rtol=1e-4)


def test_successive_items_of_a_segment_reuse_its_kv_block():
    """k[seq] is chosen by owner[item]: the block index changes only when the segment
    does, so flattening moves no more K/V bytes than one program per segment."""
    q, k, v, offsets = dense_inputs(lengths=(40, 3, 33))
    config = dict(block_sizes=[8, 8], pallas_loop_type="unroll")
    call = plan_of(dense_kv_attention, (q, k, v, offsets), **config)
    (k_operand,) = [op for op in call.inputs if op.symbol.name == "k"]
    assert call.worklist.owner in k_operand.axes[0].prefetch
    flat = schedule_report(dense_kv_attention, (q, k, v, offsets), **config)
    per_segment = schedule_report(dense_kv_attention, (q, k, v, offsets), **config, pallas_flatten_worklist=False)
    assert flat["grid_programs"] == 5 + 1 + 5 and per_segment["grid_programs"] == 3
    tables = 3 * 4 * call.worklist.max_items  # the item tables, prefetched once
    # `out`: copied in and written back whole per segment; each item's own rows when flattened
    out_bytes, row_bytes = q.numel() * 4, q.size(1) * 4
    assert flat["hbm_bytes"] - tables == per_segment["hbm_bytes"] - 2 * out_bytes + q.size(0) * row_bytes


# ------------------------------------------------ fully jagged q and k/v, causal baddbmm --


@pallasite.kernel
def fully_jagged_attention(q, k, v, q_offsets, k_offsets):
    """Segment s: queries [q_offsets[s], q_offsets[s+1]) attend keys [k_offsets[s], k_offsets[s+1]);
    a segment without keys gives zeros."""
    total, d = q.size()
    out = torch.zeros_like(q)
    scale = 1.0 / math.sqrt(d)
    for seq in hl.grid(q_offsets.size(0) - 1):
        k_start = k_offsets[seq]
        k_end = k_offsets[seq + 1]
        for tile_q in hl.tile(q_offsets[seq], q_offsets[seq + 1]):
            q_blk = q[tile_q, :]
            m_i = hl.full([tile_q], float("-inf"), dtype=torch.float32)
            l_i = hl.zeros([tile_q], dtype=torch.float32)
            acc = hl.zeros([tile_q, d], dtype=torch.float32)
            for tile_k in hl.tile(k_start, k_end):
                qk = hl.dot(q_blk, k[tile_k, :].T) * scale
                m_new = torch.maximum(m_i, torch.amax(qk, -1))
                p = torch.exp(qk - m_new[:, None])
                alpha = torch.exp(m_i - m_new)
                l_i = l_i * alpha + torch.sum(p, -1)
                acc = hl.dot(p, v[tile_k, :], acc=acc * alpha[:, None])
                m_i = m_new
            out[tile_q, :] = acc / torch.clamp_min(l_i, 1e-30)[:, None]
    return out


def fully_jagged_reference(q, k, v, q_offsets, k_offsets):
    out = torch.zeros_like(q)
    qb, kb = q_offsets.tolist(), k_offsets.tolist()
    for s in range(len(qb) - 1):
        if kb[s + 1] > kb[s] and qb[s + 1] > qb[s]:
            scores = q[qb[s]:qb[s + 1]] @ k[kb[s]:kb[s + 1]].T / math.sqrt(q.size(1))
            out[qb[s]:qb[s + 1]] = torch.softmax(scores, -1) @ v[kb[s]:kb[s + 1]]
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_fully_jagged_q_and_kv(loop_type):
    q_lengths, k_lengths = (9, 7, 0, 20), (5, 0, 3, 31)  # segment 1: queries without keys
    generator = torch.Generator().manual_seed(2)
    q = torch.randn(sum(q_lengths), 64, generator=generator)
    k, v = (torch.randn(sum(k_lengths), 64, generator=generator) for _ in range(2))
    args = (q, k, v, offsets_of(q_lengths), offsets_of(k_lengths))
    _, out = code_and_output(fully_jagged_attention, args, block_sizes=[8, 8], pallas_loop_type=loop_type,
                             pallas_worklist_grouping=2)
    assert plan_of(fully_jagged_attention, args, block_sizes=[8, 8]).worklist is not None
    torch.testing.assert_close(out, fully_jagged_reference(*args), atol=1e-4, rtol=1e-4)


@pallasite.kernel
def causal_jagged_silu(q, k, v, offsets):
    """HSTU-style causal jagged attention: silu(q k^T) over the visible keys, summed with
    torch.baddbmm (no softmax), keys ending at min(end, tile_q.end)."""
    total, d = q.size()
    out = torch.zeros_like(q)
    for seq in hl.grid(offsets.size(0) - 1):
        k_start = offsets[seq]
        k_end = offsets[seq + 1]
        for tile_q in hl.tile(k_start, k_end):
            q_blk = q[tile_q, :]
            acc = hl.zeros([1, tile_q, d], dtype=torch.float32)
            for tile_k in hl.tile(k_start, min(k_end, tile_q.end)):
                qk = hl.dot(q_blk, k[tile_k, :].T)
                visible = tile_q.index[:, None] >= tile_k.index[None, :]
                p = torch.where(visible, torch.nn.functional.silu(qk), 0.0)
                acc = torch.baddbmm(acc, p.to(v.dtype)[None, :, :], v[tile_k, :][None, :, :])
            out[tile_q, :] = (acc[0] / d).to(out.dtype)
    return out


def causal_silu_reference(q, k, v, offsets):
    out = torch.zeros_like(q)
    bounds = offsets.tolist()
    for begin, end in zip(bounds[:-1], bounds[1:]):
        n = end - begin
        qk = q[begin:end].float() @ k[begin:end].float().T
        p = torch.where(torch.ones(n, n, dtype=torch.bool).tril(), torch.nn.functional.silu(qk), 0.0)
        out[begin:end] = (p.to(v.dtype).float() @ v[begin:end].float() / q.size(1)).to(q.dtype)
    return out


@pytest.mark.parametrize("loop_type, dtype", zip(LOOP_TYPES, itertools.cycle((torch.float32, torch.bfloat16))))
def test_causal_jagged_baddbmm(loop_type, dtype):
    block = 16 if dtype == torch.bfloat16 else 8
    q, k, v = qkv(sum(LENGTHS), 128, dtype, seed=3)
    offsets = offsets_of(LENGTHS)
    _, out = code_and_output(causal_jagged_silu, (q, k, v, offsets), block_sizes=[block, block],
                             pallas_loop_type=loop_type)
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-4
    torch.testing.assert_close(out, causal_silu_reference(q, k, v, offsets), atol=tolerance, rtol=tolerance)


# ------------------------------------------------------------- bounds on the item count --


@pallasite.kernel
def prefix_rows_doubled(x, lengths):
    """Segment s covers rows [0, lengths[s]) of its own slab x[s]: ranges of different
    segments are not disjoint rows of one table, so each may need a full slab of items."""
    out = torch.zeros_like(x)
    for seq in hl.grid(lengths.size(0)):
        for tile_r in hl.tile(0, lengths[seq]):
            out[seq, tile_r, :] = x[seq, tile_r, :] * 2.0
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_ranges_that_are_not_consecutive_offsets_get_a_bound_for_every_segment(loop_type):
    """Also: `out` is updated in place in blocks `owner[item]` chooses; consecutive items of
    a segment revisit its block, so only the owner's first item copies the old contents in."""
    x = torch.randn(3, 24, 128)
    lengths = torch.tensor([24, 5, 17], dtype=torch.int32)
    call = plan_of(prefix_rows_doubled, (x, lengths), block_sizes=[8], pallas_loop_type=loop_type)
    assert call.worklist is not None and not call.worklist.disjoint
    assert call.worklist.max_items == 3 * 3
    _, out = code_and_output(prefix_rows_doubled, (x, lengths), block_sizes=[8], pallas_loop_type=loop_type)
    check_tpu_lowering(prefix_rows_doubled, (x, lengths), chips=("v7x",), block_sizes=[8], pallas_loop_type=loop_type)
    expected = torch.zeros_like(x)
    for s, n in enumerate(lengths.tolist()):
        expected[s, :n] = x[s, :n] * 2
    torch.testing.assert_close(out, expected)


def test_decreasing_offsets_that_need_more_items_than_the_bound_are_an_error():
    q, k, v = qkv(73, 64)
    offsets = torch.tensor([0, 73, 0, 73], dtype=torch.int32)  # 10 + 0 + 10 items; the bound is 10 + 3
    with pytest.raises(pallasite.exc.ShapeMismatch, match="work items"):
        code_and_output(jagged_attention, (q, k, v, offsets), block_sizes=[8, 8])
    _, out = code_and_output(jagged_attention, (q, k, v, offsets), block_sizes=[8, 8], pallas_flatten_worklist=False)
    torch.testing.assert_close(out[:73], causal_reference(q, k, v, torch.tensor([0, 73], dtype=torch.int32)),
                               atol=1e-4, rtol=1e-4)


@pallasite.kernel
def doubled_segments(x, offsets):
    out = torch.zeros_like(x)
    for seq in hl.grid(offsets.size(0) - 1):
        for tile_q in hl.tile(offsets[seq], offsets[seq + 1]):
            out[tile_q, :] = x[tile_q, :] * 2.0
    return out


@pytest.mark.parametrize("flatten", [True, False], ids=["flattened", "per-segment"])
def test_offsets_past_the_tensors_end_are_named_as_such(flatten):
    """Offsets [0, 10, 60] over 30 rows: the flattened schedule names the segment end and the
    rows (before the item count those offsets inflate), as the per-segment one does."""
    x = torch.randn(30, 128)
    offsets = torch.tensor([0, 10, 60], dtype=torch.int32)
    match = (r"a q range of 'seq' ends at 60, past the 30 rows its 'tile_q' tiles index" if flatten
             else r"tile_q covers \[\d+, \d+\) but x.size\(0\) is 30")
    with pytest.raises(pallasite.exc.ShapeMismatch, match=match):
        code_and_output(doubled_segments, (x, offsets), block_sizes=[8], pallas_flatten_worklist=flatten)


@pallasite.kernel
def grouped_gemm(x, w, offsets):
    t, k = x.shape
    e, _, n = w.shape
    out = torch.empty([t, n], dtype=x.dtype, device=x.device)
    for g in hl.grid(e):
        for tile_t, tile_n in hl.tile([offsets[g], 0], [offsets[g + 1], n]):
            acc = hl.zeros([tile_t, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(k):
                acc = torch.addmm(acc, x[tile_t, tile_k], w[g, tile_k, tile_n])
            out[tile_t, tile_n] = acc.to(out.dtype)
    return out


@pallasite.kernel
def grouped_gemm_accumulating(x, w, offsets):
    """'out' read as well as written in its tile loop: under fori_loop each window is copied in,
    updated and written back."""
    out = torch.zeros([x.size(0), w.size(2)], dtype=torch.float32, device=x.device)
    for g in hl.grid(w.size(0)):
        for tile_t, tile_n in hl.tile([offsets[g], 0], [offsets[g + 1], w.size(2)]):
            out[tile_t, tile_n] += torch.mm(x[tile_t, :], w[g, :, tile_n]).float()
    return out


@pallasite.kernel
def grouped_gemm_two_passes(x, w, offsets):
    """'out' accumulated in one tile loop and doubled in another: it stays resident."""
    out = torch.zeros([x.size(0), w.size(2)], dtype=torch.float32, device=x.device)
    for g in hl.grid(w.size(0)):
        for tile_t, tile_n in hl.tile([offsets[g], 0], [offsets[g + 1], w.size(2)]):
            out[tile_t, tile_n] += torch.mm(x[tile_t, :], w[g, :, tile_n]).float()
        for tile_t, tile_n in hl.tile([offsets[g], 0], [offsets[g + 1], w.size(2)]):
            out[tile_t, tile_n] = out[tile_t, tile_n] * 2
    return out


def test_an_output_written_at_data_dependent_rows_streams_or_is_told_how_to_tile_it():
    """A trial's finding (a grouped GEMM at MoE sizes): under fori_loop x and w streamed but
    'out' stayed resident, and the error said "use smaller block sizes", which cannot help.
    Written directly in the tile loop, 'out' streams now (each step writes back the rows
    inside its range: tests/test_partial_write_back.py), and so does it read as well as written
    (`out[tile_t, tile_n] += ...`: each window copied in, updated, written back); read and written in
    two loops, it stays resident and the error says how to tile it."""
    bf16 = torch.bfloat16
    args = (torch.empty(4096, 256, dtype=bf16, device="meta"), torch.empty(2, 256, 8192, dtype=bf16, device="meta"),
            torch.tensor([0, 2000, 4096]))
    config = dict(chip="v7x", block_sizes=[64, 128, 256], pallas_loop_type="fori_loop")
    assert schedule_report(grouped_gemm, args, **config)["vmem_bytes"] < 2**20
    assert schedule_report(grouped_gemm_accumulating, args, **{**config, "block_sizes": [64, 128]})["vmem_bytes"] \
        < 2**23
    with pytest.raises(pallasite.exc.VmemOverflow) as info:
        schedule_report(grouped_gemm_two_passes, args, **{**config, "block_sizes": [64, 128, 64, 128]})
    message = str(info.value)
    assert "the largest: 'out' 2 x" in message and "use smaller block sizes" not in message
    assert "'out' is written at tiles starting at data-dependent rows" in message
    assert "one loop's body writes it, or reads and writes it, directly at one window form" in message
    assert "hl.tile([E, N], block_size=[1, None])" in message


def test_a_vmem_overflow_names_the_largest_blocks_and_the_loop_type_that_streams_them():
    """60k rows of jagged bf16 q/k/v: tiles that start at data-dependent rows keep the tensors
    they index resident under unroll, which overflows v7x's VMEM; the error lists the largest blocks
    and suggests fori_loop (smaller blocks would not help). fori_loop plans."""
    lengths = [200] * 300
    offsets = offsets_of(lengths)
    q, k, v = (torch.empty(sum(lengths), 128, dtype=torch.bfloat16, device="meta") for _ in range(3))
    with pytest.raises(pallasite.exc.VmemOverflow) as info:
        schedule_report(jagged_attention, (q, k, v, offsets), chip="v7x", block_sizes=[128, 128],
                        pallas_loop_type="unroll")
    message = str(info.value)
    assert "the largest: 'q' 2 x 14.7 MiB, 'k' 2 x 14.7 MiB, 'v' 2 x 14.7 MiB" in message and "resident" in message
    assert "pallas_loop_type='fori_loop'" in message and "use smaller block sizes" not in message
    report = schedule_report(jagged_attention, (q, k, v, offsets), chip="v7x", block_sizes=[128, 128],
                             pallas_loop_type="fori_loop")
    assert report["vmem_bytes"] < 16 * 2**20


def test_float_offsets_are_refused_naming_the_tensor():
    with pytest.raises(pallasite.exc.UnsupportedSyntax,
                       match=r"Loop begin must be an integer scalar, got a float32 scalar read from 'offsets'"):
        doubled_segments(torch.randn(30, 128), torch.tensor([0.0, 10.0, 30.0]))
