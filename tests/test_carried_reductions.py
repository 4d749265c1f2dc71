"""Loop-carried accumulators reduced after their loop, and masked means (issue #13 §1, §2).

A block-sized accumulator (`acc = hl.zeros([tile_m, block_n])`) gathers one
partial result per lane across the inner loop. The last inner tile may be
partial; its lanes past the tensor's end must not disturb the accumulator,
and the reduction after the loop must then see every lane of it (not be
masked with the last tile's bound, which is out of scope there).
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output



@pallasite.kernel
def row_abs_sum(x):
    m, n = x.size()
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    block_n = hl.register_block_size(n)
    for tm in hl.tile(m):
        acc = hl.zeros([tm, block_n], dtype=torch.float32)
        for tn in hl.tile(n, block_size=block_n):
            acc += torch.abs(x[tm, tn])
        out[tm] = torch.sum(acc, dim=1)
    return out


@pallasite.kernel
def row_max(x):
    m, n = x.size()
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    block_n = hl.register_block_size(n)
    for tm in hl.tile(m):
        acc = hl.full([tm, block_n], float("-inf"), dtype=torch.float32)
        for tn in hl.tile(n, block_size=block_n):
            acc = torch.maximum(acc, x[tm, tn])
        out[tm] = torch.amax(acc, dim=1)
    return out


@pallasite.kernel
def row_min(x):
    m, n = x.size()
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    block_n = hl.register_block_size(n)
    for tm in hl.tile(m):
        acc = hl.full([tm, block_n], float("inf"), dtype=torch.float32)
        for tn in hl.tile(n, block_size=block_n):
            acc = torch.minimum(acc, x[tm, tn])
        out[tm] = acc.min(dim=1).values
    return out


@pallasite.kernel
def row_lane_mean(x):
    m, n = x.size()
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    block_n = hl.register_block_size(n)
    for tm in hl.tile(m):
        acc = hl.zeros([tm, block_n], dtype=torch.float32)
        for tn in hl.tile(n, block_size=block_n):
            acc = acc + x[tm, tn]
        out[tm] = acc.mean(dim=1)
    return out


@pallasite.kernel
def row_lane_argmax(x):
    m, n = x.size()
    out = torch.empty([m], dtype=torch.int32, device=x.device)
    block_n = hl.register_block_size(n)
    for tm in hl.tile(m):
        acc = hl.full([tm, block_n], float("-inf"), dtype=torch.float32)
        for tn in hl.tile(n, block_size=block_n):
            acc = torch.maximum(acc, x[tm, tn])
        out[tm] = torch.argmax(acc, dim=1).to(torch.int32)
    return out


def _lanes(x: torch.Tensor, block_n: int, fill: float) -> torch.Tensor:
    """x as [m, tiles, block_n]: each lane's values across the inner tiles, padded with `fill`."""
    m, n = x.shape
    tiles = -(-n // block_n)
    padded = torch.full((m, tiles * block_n), fill)
    padded[:, :n] = x
    return padded.reshape(m, tiles, block_n)


REFERENCES = {
    "sum": (row_abs_sum, lambda x, bn: x.abs().sum(1)),
    "max": (row_max, lambda x, bn: x.amax(1)),
    "min": (row_min, lambda x, bn: x.amin(1)),
    "mean": (row_lane_mean, lambda x, bn: _lanes(x, bn, 0.0).sum(1).mean(1)),
    "argmax": (row_lane_argmax, lambda x, bn: _lanes(x, bn, float("-inf")).amax(1).argmax(1).to(torch.int32)),
}
# (m, n, block_sizes=[block_n, block_m]): n divisible by block_n or not, a partial
# row tile or not, and a block wider than the whole row (clamped to it).
SHAPES = [((100, 640), [256, 128]), ((64, 512), [128, 64]), ((64, 128), [256, 256]), ((40, 300), [128, 128])]


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("shape,block_sizes", SHAPES, ids=lambda v: "x".join(map(str, v)))
@pytest.mark.parametrize("form", list(REFERENCES))
def test_block_sized_accumulator_reduced_after_the_loop(form, shape, block_sizes, loop_type):
    kernel, reference = REFERENCES[form]
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    _, result = code_and_output(kernel, (x,), block_sizes=block_sizes, pallas_loop_type=loop_type)
    # a block wider than the whole row is clamped to it (ConfigSpec.normalize): block_n lanes are the row's
    block_n = kernel.bind((x,)).resolve_config({"block_sizes": block_sizes}).block_sizes[0]
    assert block_n == min(block_sizes[0], shape[1])
    expected = reference(x, block_n)
    if form == "argmax":
        assert torch.equal(result, expected)
    else:
        torch.testing.assert_close(result, expected, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_block_sized_accumulator_plan_keeps_old_lanes_past_the_tile(loop_type):
    """The partial last tile's padding stops at the carried value (kept lanes), so the
    reduction after the loop needs no mask of the inner tile."""
    x = torch.randn(100, 640)
    plan = row_abs_sum.bind((x,)).plan(pallasite.Config(block_sizes=[256, 128], pallas_loop_type=loop_type))
    call = plan.calls[0]
    (loop,) = [item for item in call.call.loop.body if hasattr(item, "carried")]
    masked_dims = {m.dim.name for masks in call.masks.values() for m in masks}
    assert "tn" not in masked_dims  # no mask names the inner tile outside its loop
    (carried_mask,) = call.carried_masks[loop.id]
    assert carried_mask.dim.name == "tn" and carried_mask.axis == 1


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_block_sized_accumulator_lowers_to_mosaic(loop_type):
    x = torch.randn(100, 640)
    check_tpu_lowering(row_abs_sum, (x,), block_sizes=[256, 128], pallas_loop_type=loop_type)


# ------------------------------------------------------------ masked mean --


@pallasite.kernel
def segment_tile_means(x, offsets):
    segments = offsets.size(0) - 1
    d = x.size(1)
    out = torch.empty([segments, d], dtype=torch.float32, device=x.device)
    for g in hl.grid(segments):
        acc = hl.zeros([d], dtype=torch.float32)
        for t in hl.tile(offsets[g], offsets[g + 1], block_size=16):
            acc = acc + x[t, :].mean(0)
        out[g, :] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_masked_mean_divides_by_the_tiles_valid_rows(loop_type):
    """Each segment fits in one tile, so its tile mean is the segment mean; the divisor
    counts only rows inside [begin, end), never the rows below an unaligned begin."""
    x = torch.randn(48, 128, generator=torch.Generator().manual_seed(2))
    offsets = torch.tensor([0, 5, 12, 16, 19, 30, 32, 45], dtype=torch.int32)
    _, result = code_and_output(segment_tile_means, (x, offsets), pallas_loop_type=loop_type)
    bounds = offsets.tolist()
    expected = torch.stack([x[b:e].mean(0) for b, e in zip(bounds[:-1], bounds[1:])])
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_masked_mean_lowers_to_mosaic(loop_type):
    x = torch.randn(48, 128)
    offsets = torch.tensor([0, 5, 12, 16, 19, 30, 32, 45], dtype=torch.int32)
    check_tpu_lowering(segment_tile_means, (x, offsets), pallas_loop_type=loop_type)


# ------------------------------------------------- flat argmax of a partial tile --


@pallasite.kernel
def tile_flat_argmax(x):
    m, n = x.size()
    out = torch.empty([(m + 15) // 16, (n + 127) // 128], dtype=torch.int32, device=x.device)
    for tm, tn in hl.tile([m, n], block_size=[16, 128]):
        out[tm.id, tn.id] = torch.argmax(x[tm, tn])
    return out


@pallasite.kernel
def tile_flat_argmin(x):
    m, n = x.size()
    out = torch.empty([(m + 15) // 16, (n + 127) // 128], dtype=torch.int32, device=x.device)
    for tm, tn in hl.tile([m, n], block_size=[16, 128]):
        out[tm.id, tn.id] = x[tm, tn].argmin()
    return out


@pytest.mark.parametrize("kernel,reduce", [(tile_flat_argmax, torch.argmax), (tile_flat_argmin, torch.argmin)],
                         ids=["argmax", "argmin"])
def test_argmax_without_dim_indexes_the_tiles_real_elements(kernel, reduce):
    """torch flattens the tile's actual slice: a partial tile's flat index counts only its
    valid columns, not the padded block's (#7 §5)."""
    x = torch.randn(20, 200, generator=torch.Generator().manual_seed(3))
    result = kernel(x)
    for i, rows in enumerate(range(0, 20, 16)):
        for j, cols in enumerate(range(0, 200, 128)):
            expected = reduce(x[rows:rows + 16, cols:cols + 128])
            assert result[i, j] == expected, (i, j)


def test_flat_argmax_of_a_partial_tile_lowers_to_mosaic():
    check_tpu_lowering(tile_flat_argmax, (torch.randn(20, 200),))
