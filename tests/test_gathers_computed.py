"""Gathers through index vectors computed on the device (issue #20 §1).

`hl.load(logits.view(-1), [t.index * v + labels[t]])` once built a one-hot of
every index over the whole flat table (256 x 8,192,000 at N=256, V=32000).
Now the auto lowering weighs the table *with* its one-hot: past the threshold
the table stays in HBM and each index's element or row is copied by DMA, the
computed vector staged through SMEM so the copies can read their offsets.
Helion's jagged mean gathers this way through a 3-D computed index.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.plan.plans import GatherMethod
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref

from plan_helpers import only_call



def _gathers(call):
    return [a.gather for a in call.accesses.values() if a.gather is not None]


@pallasite.kernel(config=pallasite.Config(block_sizes=[128]))
def target_logit_flat(logits, labels):
    n, v = logits.size()
    flat = logits.view(-1)
    out = torch.empty([n], dtype=logits.dtype, device=logits.device)
    for t in hl.tile(n):
        out[t] = hl.load(flat, [t.index * v + labels[t]])
    return out


def test_a_flat_gather_from_a_large_table_reads_only_its_elements():
    n, v = 256, 32000
    logits = torch.randn(n, v)
    labels = torch.randint(0, v, (n,), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
    call = only_call(target_logit_flat, (logits, labels))
    (gather,) = _gathers(call)
    assert gather.method is GatherMethod.ROW_DMA and gather.row_copy.staged is not None
    assert call.vmem_bytes < 2**20  # the 128 elements, not a (128, 8192000) one-hot
    _, out = code_and_output(target_logit_flat, (logits, labels))
    assert torch.equal(out, logits[torch.arange(n), labels.long()])
    check_tpu_lowering(target_logit_flat, (logits, labels))


@pallasite.kernel
def every_other(table):
    n = table.size(0) // 2
    out = torch.empty([n], dtype=table.dtype, device=table.device)
    for t in hl.tile(n):
        out[t] = hl.load(table, [t.index * 2 + 1])
    return out


def test_a_small_table_with_a_large_one_hot_is_copied_by_dma_too():
    # a 32 KiB table, but 4096 indices over 8192 rows make a 128 MiB f32 one-hot
    (gather,) = _gathers(only_call(every_other, (torch.randn(8192),), block_sizes=[4096]))
    assert gather.method is GatherMethod.ROW_DMA and "one-hot" in gather.reason
    # run at a smaller size, the threshold moved by vmem_limit_bytes (a quarter of 1 MiB):
    # 256 indices over 1024 rows make a 1 MiB one-hot for a 4 KiB table
    table = torch.randn(1024)
    config = dict(block_sizes=[256], vmem_limit_bytes=2**20)
    (gather,) = _gathers(only_call(every_other, (table,), **config))
    assert gather.method is GatherMethod.ROW_DMA
    _, out = code_and_output(every_other, (table,), **config)
    assert torch.equal(out, table[1::2])


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 8, 8]))
def jagged_mean(x_data, x_offsets, max_m: hl.constexpr):
    rows = x_offsets.size(0) - 1
    out = torch.zeros([rows, max_m], dtype=x_data.dtype, device=x_data.device)
    x_flat = x_data.view(-1)
    for tile_b in hl.tile(rows):
        starts = x_offsets[tile_b]
        nnz = x_offsets[tile_b.index + 1] - starts
        longest = nnz.amax()
        for tile_m in hl.tile(max_m):
            sums = hl.zeros([tile_b, tile_m], dtype=x_data.dtype)
            for tile_k in hl.tile(0, longest):
                rows_k = starts[:, None] + tile_k.index[None, :]
                flat = rows_k[:, :, None] * max_m + tile_m.index[None, None, :]
                live = (tile_k.index[None, :] < nnz[:, None])[:, :, None]
                picked = hl.load(x_flat, [torch.where(live, flat, 0)])
                sums = sums + torch.where(live, picked, 0.0).sum(dim=1)
            out[tile_b, tile_m] = torch.where(nnz[:, None] > 0, sums / nnz[:, None].to(x_data.dtype), 0.0)
    return out


def _jagged(rows=6, features=8, seed=0):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 12, (rows,), generator=generator)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]).to(torch.int32)
    x = torch.randn(int(offsets[-1]), features, generator=generator)
    expected = torch.stack([x[offsets[i]:offsets[i + 1]].mean(0) if lengths[i] else torch.zeros(features)
                            for i in range(rows)])
    return x, offsets, features, expected


# vmem_limit_bytes moves the threshold for resident tables (a quarter of the budget): here
# x_flat's one-hot of 512 lanes over its ~300 elements (and selected copies) is past 256 KiB,
# x_offsets' is not
SMALL_BUDGET = dict(vmem_limit_bytes=2**20)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_helions_jagged_mean_gathers_through_a_3d_computed_index(loop_type):
    """The index is masked by hand (`torch.where(live, flat, 0)`), so a masked lane reads
    element 0 as torch does: an element gather (frontend/flat_rows.py reads rows only where
    hl.load's own mask zeroes the masked lanes; tests/test_flat_rows.py has that form)."""
    x, offsets, features, expected = _jagged()
    call = only_call(jagged_mean, (x, offsets, features), pallas_loop_type=loop_type, **SMALL_BUDGET)
    by_table = {a.ref_name: a.gather for a in call.accesses.values() if a.gather is not None}
    assert by_table["x_flat_hbm"].method is GatherMethod.ROW_DMA and by_table["x_flat_hbm"].row_copy.staged
    assert "one-hot" in by_table["x_flat_hbm"].reason
    _, out = code_and_output(jagged_mean, (x, offsets, features), pallas_loop_type=loop_type, **SMALL_BUDGET)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(run_ref(jagged_mean, (x, offsets, features)), expected, rtol=1e-5, atol=1e-5)
    check_tpu_lowering(jagged_mean, (x, offsets, features), pallas_loop_type=loop_type, **SMALL_BUDGET)


def test_a_resident_jagged_mean_at_small_blocks_agrees():
    x, offsets, features, expected = _jagged(rows=5, seed=1)
    _, out = code_and_output(jagged_mean, (x, offsets, features), pallas_indirect_access_mode="resident")
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_a_unit_feature_axis_of_the_index_tile_splits_back():
    # (found by the fuzzer) the flat index of [8, 8, 1] lanes: the unit axis holds no lanes, so
    # the gathered values reshape back to the index tile's dims
    x, offsets, features, expected = _jagged(rows=5, features=1, seed=2)
    _, out = code_and_output(jagged_mean, (x, offsets, features), block_sizes=[8, 1, 8], pallas_loop_type="fori_loop", **SMALL_BUDGET)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
