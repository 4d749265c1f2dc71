"""`hl.jagged_tile(lengths)` (Helion's ragged inner loop, also `hl.vtile`): `hl.tile(0,
lengths.amax())` whose accesses that the jagged tile and the rows' tile index are masked
where a lane is past its row's length (loads read 0, stores write nothing), by
hl.load/hl.store and plain subscripts alike (frontend/jagged.py); reference mode masks
the same accesses. The loop written with explicit masks runs too (Helion's
jagged_softmax as it would be rewritten). Every form against torch and reference mode,
under every loop type, lowered for v5e/v6e/v7x.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128, 8]))
def jagged_sum_implicit(x_data, x_offsets):
    m = x_data.size(1)
    out = torch.zeros([x_offsets.size(0) - 1, m], dtype=x_data.dtype)
    x_flat = x_data.view(-1)
    for tile_b in hl.tile(x_offsets.size(0) - 1):
        starts = x_offsets[tile_b]
        lengths = x_offsets[tile_b.index + 1] - starts
        for tile_m in hl.tile(m):
            acc = hl.zeros([tile_b, tile_m], dtype=x_data.dtype)
            for tile_k in hl.jagged_tile(lengths):
                flat = (starts[:, None] + tile_k.index[None, :])[:, :, None] * m + tile_m.index[None, None, :]
                acc = acc + hl.load(x_flat, [flat]).sum(dim=1)
            out[tile_b, tile_m] = acc
    return out


def _data():
    lengths = torch.tensor([3, 0, 11, 5, 1, 9, 2, 7, 4, 6])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]).to(torch.int32)
    return torch.randn(int(offsets[-1]), 128, generator=torch.Generator().manual_seed(0)), offsets


def _sums(x, offsets):
    return torch.stack([x[offsets[i]:offsets[i + 1]].sum(0) for i in range(len(offsets) - 1)])


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("block_sizes", [[8, 8, 8], [16, 8, 1], [8, 8, 16]])  # [.., 1]: Helion's default
def test_the_implicit_mask_sums_each_row_to_its_length(loop_type, block_sizes):
    x, offsets = _data()
    args = (x[:, :16].contiguous(), offsets)  # a narrow table: the flat gather's one-hot stays small
    config = {"block_sizes": block_sizes, "pallas_loop_type": loop_type}
    _, out = code_and_output(jagged_sum_implicit, args, **config)
    torch.testing.assert_close(out, _sums(*args), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(run_ref(jagged_sum_implicit, args, **config), _sums(*args), rtol=1e-5, atol=1e-5)
    check_tpu_lowering(jagged_sum_implicit, args, **config)


def test_the_decision_is_recorded_for_reference_mode():
    args = _data()
    (decision,) = jagged_sum_implicit.bind(args).jagged_sites().values()
    assert decision.rank == 3 and decision.parts == ((0, 0, 1),)  # tile_b on axis 0, tile_k on axis 1


@pallasite.kernel(config=pallasite.Config(block_sizes=[4, 8]))
def scaled_into_gaps(x_data, x_offsets, out_offsets, out):
    """Each segment's rows scaled into its own region of `out`, which leaves gaps: a store
    past a row's length would write into them."""
    out_flat, x_flat = out.view(-1), x_data.view(-1)
    m = x_data.size(1)
    for tile_b in hl.tile(x_offsets.size(0) - 1):
        starts = x_offsets[tile_b]
        lengths = x_offsets[tile_b.index + 1] - starts
        targets = out_offsets[tile_b]
        for tile_k in hl.jagged_tile(lengths):
            rows = tile_k.index[None, :]
            source = (starts[:, None] + rows)[:, :, None] * m + hl.arange(m)[None, None, :]
            target = (targets[:, None] + rows)[:, :, None] * m + hl.arange(m)[None, None, :]
            hl.store(out_flat, [target], hl.load(x_flat, [source]) * 2)
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_stores_past_a_rows_length_write_nothing(loop_type):
    x, offsets = _data()
    x = x[:, :8].contiguous()
    lengths = offsets[1:] - offsets[:-1]
    gaps = torch.arange(1, 11, dtype=torch.int32)  # each region one to ten rows longer than its segment
    out_offsets = torch.cat([torch.zeros(1, dtype=torch.int32), (lengths + gaps).cumsum(0).to(torch.int32)])
    out = torch.full((int(out_offsets[-1]), 8), -7.0)
    expected = out.clone()
    for i in range(10):
        expected[out_offsets[i]:out_offsets[i] + lengths[i]] = x[offsets[i]:offsets[i + 1]] * 2
    _, result = code_and_output(scaled_into_gaps, (x, offsets, out_offsets[:-1].contiguous(), out.clone()),
                                pallas_loop_type=loop_type)
    assert torch.equal(result, expected)
    assert torch.equal(run_ref(scaled_into_gaps, (x, offsets, out_offsets[:-1].contiguous(), out.clone()),
                               pallas_loop_type=loop_type), expected)
    check_tpu_lowering(scaled_into_gaps, (x, offsets, out_offsets[:-1].contiguous(), out.clone()),
                       pallas_loop_type=loop_type)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 16]))
def padded_rows_doubled(x, lengths, out):
    """Plain subscripts of a padded [rows, longest] layout: reads past a row's length give 0
    and writes there keep `out`'s contents."""
    for tile_b in hl.tile(x.size(0)):
        n = lengths[tile_b]
        for tile_k in hl.jagged_tile(n):
            out[tile_b, tile_k] = x[tile_b, tile_k] * 2 + 1
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_plain_subscripts_are_masked_too(loop_type):
    lengths = torch.tensor([5, 0, 40, 17, 33, 1, 8, 12, 2, 29, 40], dtype=torch.int32)
    x = torch.randn(11, 40)
    out = torch.full((11, 40), -7.0)
    live = torch.arange(40)[None, :] < lengths[:, None]
    expected = torch.where(live, x * 2 + 1, out)
    _, result = code_and_output(padded_rows_doubled, (x, lengths, out.clone()), pallas_loop_type=loop_type)
    assert torch.equal(result, expected)
    assert torch.equal(run_ref(padded_rows_doubled, (x, lengths, out.clone()), pallas_loop_type=loop_type), expected)
    check_tpu_lowering(padded_rows_doubled, (x, lengths, out.clone()), pallas_loop_type=loop_type)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 16]))
def row_blind_access(x, lengths, scale):
    out = torch.zeros_like(x)
    for tile_b in hl.tile(x.size(0)):
        for tile_k in hl.jagged_tile(lengths[tile_b]):
            out[tile_b, tile_k] = x[tile_b, tile_k] * scale[tile_k][None, :]
    return out


def test_an_access_the_jagged_tile_indexes_without_the_rows_is_an_error():
    with pytest.raises(exc.UnsupportedOperation, match="indexed by tile_k but not by the rows") as info:
        row_blind_access(torch.randn(11, 40), torch.full((11,), 3, dtype=torch.int32), torch.randn(40))
    assert "scale[tile_k][None, :]" in str(info.value)


@pallasite.kernel
def jagged_at_the_top(lengths, out):
    for tile_k in hl.jagged_tile(lengths):
        out[tile_k] = 1.0
    return out


@pallasite.kernel
def lengths_of_no_tile(x, out):
    for tile_b in hl.tile(x.size(0)):
        n = hl.full([4], 3, dtype=torch.int32)
        for tile_k in hl.jagged_tile(n):
            out[tile_b, tile_k] = x[tile_b, tile_k]
    return out


def test_a_jagged_loop_needs_lengths_over_an_enclosing_tile():
    with pytest.raises(exc.UnsupportedOperation, match="is an inner loop"):
        jagged_at_the_top(torch.ones(4, dtype=torch.int32), torch.zeros(8))
    with pytest.raises(exc.UnsupportedOperation, match="indexed by no tile"):
        lengths_of_no_tile(torch.randn(8, 16), torch.zeros(8, 16))


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 8, 8, 8]))
def jagged_softmax_explicit(x_data, x_offsets):
    """Softmax over each segment's rows, the jagged loops written with explicit masks."""
    m = x_data.size(1)
    out = torch.zeros_like(x_data)
    x_flat, out_flat = x_data.view(-1), out.view(-1)
    for tile_b in hl.tile(x_offsets.size(0) - 1):
        starts = x_offsets[tile_b]
        lengths = x_offsets[tile_b.index + 1] - starts
        for tile_m in hl.tile(m):
            top = hl.full([tile_b, tile_m], float("-inf"), dtype=torch.float32)
            total = hl.zeros([tile_b, tile_m], dtype=torch.float32)
            for tile_k in hl.tile(0, lengths.amax()):
                flat = (starts[:, None] + tile_k.index[None, :])[:, :, None] * m + tile_m.index[None, None, :]
                live = (tile_k.index[None, :] < lengths[:, None])[:, :, None]
                x = hl.load(x_flat, [flat], extra_mask=live)
                new_top = torch.maximum(top, torch.where(live, x, float("-inf")).amax(dim=1))
                total = total * torch.exp(top - new_top) + torch.where(
                    live, torch.exp(x - new_top[:, None, :]), 0.0).sum(dim=1)
                top = new_top
            for tile_k in hl.tile(0, lengths.amax()):
                flat = (starts[:, None] + tile_k.index[None, :])[:, :, None] * m + tile_m.index[None, None, :]
                live = (tile_k.index[None, :] < lengths[:, None])[:, :, None]
                x = hl.load(x_flat, [flat], extra_mask=live)
                hl.store(out_flat, [flat], torch.exp(x - top[:, None, :]) / total[:, None, :], extra_mask=live)
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_the_explicit_jagged_loop_runs_under_every_loop_type(loop_type):
    x, offsets = _data()
    x = x[:, :8].contiguous()  # a flat scatter keeps every row in VMEM: a narrow table
    expected = torch.cat([torch.softmax(x[offsets[i]:offsets[i + 1]], dim=0) for i in range(10)])
    _, result = code_and_output(jagged_softmax_explicit, (x, offsets), pallas_loop_type=loop_type)
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(run_ref(jagged_softmax_explicit, (x, offsets)), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", [1, 4, 8])
def test_the_jagged_loops_are_race_free_on_two_cores(seed, monkeypatch):
    from pallasite.runtime import interpret

    monkeypatch.setenv(interpret.RACES_ENV, "1")
    monkeypatch.setenv(interpret.CORES_ENV, "2")
    monkeypatch.setenv(interpret.SEED_ENV, str(seed))
    x, offsets = _data()
    args = (x[:, :16].contiguous(), offsets)
    jagged_sum_implicit.reset()
    try:
        compiled = jagged_sum_implicit.bind(args).compile_config(
            {"block_sizes": [4, 8, 8], "pallas_loop_type": "emit_pipeline"})
        assert compiled.module.INTERPRET.detect_races
        out = compiled(*args)
    finally:
        jagged_sum_implicit.reset()
    torch.testing.assert_close(out, _sums(*args), rtol=1e-5, atol=1e-5)
