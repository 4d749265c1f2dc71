"""Reductions over several dims at once (`x.sum([1, 2])`, `dim=(0, 1)`, `keepdim=True`) on tiles.

Each reduced axis may be the padded tail of a partial tile, alone or with others:
every padded axis is masked with the reduction's identity first, and a mean divides
by the product of the valid extents. Results match torch and reference mode, in
float32 and bfloat16 (accumulated in float32, as torch does).
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref

DTYPES = [torch.float32, torch.bfloat16]


def _tolerance(dtype):
    return {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 5e-2, "rtol": 2e-2}


def _input(shape, dtype, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# ------------------------------------------- several dims of one 3-D tile --

BATCH_REDUCTIONS = {
    "sum_list": lambda v: v.sum([1, 2]),
    "sum_negative_dims": lambda v: torch.sum(v, dim=[-1, -2]),
    "mean_tuple": lambda v: v.mean(dim=(1, 2)),
    "amax_tuple": lambda v: torch.amax(v, (1, 2)),
    "amin_tuple": lambda v: v.amin(dim=(2, 1)),
    "sum_keepdim": lambda v: v.sum(dim=[1, 2], keepdim=True)[:, 0, 0],
    "mean_keepdim": lambda v: torch.mean(v, (1, 2), keepdim=True).reshape(v.shape[0]),
    "amax_keepdim": lambda v: v.amax(dim=(1, 2), keepdim=True)[:, :, 0].reshape(v.shape[0]),
}


def batch_reduction_kernel(reduce):
    """`out[tile_b] = reduce(x[tile_b, tile_m, :])`: the batch tile is partial (6 of 4 + 2),
    the row tile too (20 rows in tiles of 8), the 200 columns are whole."""

    @pallasite.kernel
    def batch_reduction(x: torch.Tensor) -> torch.Tensor:
        b, m, n = x.size()
        out = torch.zeros([b], dtype=torch.float32)
        for tile_b in hl.tile(b, block_size=4):
            acc = hl.zeros([tile_b], dtype=torch.float32)
            for tile_m in hl.tile(m, block_size=8):
                acc = acc + reduce(x[tile_b, tile_m, :]).float()
            out[tile_b] = acc
        return out

    return batch_reduction


# Each (reduction, dtype) pair runs under one loop type, in turn: every loop type sees
# several reductions in both dtypes, at a third of the cost of all combinations.
BATCH_CASES = [pytest.param(name, dtype, LOOP_TYPES[i % len(LOOP_TYPES)],
                            id=f"{name}-{str(dtype)[6:]}-{LOOP_TYPES[i % len(LOOP_TYPES)]}")
               for i, (name, dtype) in enumerate((n, d) for n in BATCH_REDUCTIONS for d in DTYPES)]


def test_every_loop_type_runs_both_dtypes():
    assert {(case.values[1], case.values[2]) for case in BATCH_CASES} == {(d, t) for d in DTYPES for t in LOOP_TYPES}


@pytest.mark.parametrize("name, dtype, loop_type", BATCH_CASES)
def test_reduction_over_two_dims_of_a_partial_3d_tile(name, dtype, loop_type):
    reduce = BATCH_REDUCTIONS[name]
    x = _input((6, 20, 200), dtype)
    kernel = batch_reduction_kernel(reduce)
    expected = sum(reduce(x[:, i:i + 8, :].float()) for i in range(0, 20, 8))
    _, out = code_and_output(kernel, (x,), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected, **_tolerance(dtype))
    torch.testing.assert_close(out, run_ref(kernel, (x,)), **_tolerance(dtype))


# ------------------------------------- both dims of a 2-D tile, both partial --


def tile_reduction_kernel(reduce):
    @pallasite.kernel
    def tile_reduction(x: torch.Tensor) -> torch.Tensor:
        m, n = x.size()
        out = torch.zeros([(m + 7) // 8, (n + 127) // 128], dtype=torch.float32)
        for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
            out[tile_m.id, tile_n.id] = reduce(x[tile_m, tile_n]).float()
        return out

    return tile_reduction


TILE_REDUCTIONS = {
    "sum": lambda v: v.sum([0, 1]),
    "mean": lambda v: torch.mean(v, dim=(0, 1)),
    "amax": lambda v: v.amax((0, 1)),
    "amin": lambda v: torch.amin(v, dim=[1, 0]),
    "sum_keepdim": lambda v: v.sum((0, 1), keepdim=True)[0, 0],
    "mean_of_all": lambda v: v.mean(),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(TILE_REDUCTIONS))
def test_reduction_over_both_partial_dims_of_a_tile(name, dtype):
    """20 x 300 in tiles of 8 x 128: the last row tile holds 4 rows, the last column tile
    44 columns; a mean divides by those counts' product."""
    reduce = TILE_REDUCTIONS[name]
    x = _input((20, 300), dtype, seed=1) + 2  # all-positive: a padded amin would show
    kernel = tile_reduction_kernel(reduce)
    expected = torch.stack([
        torch.stack([reduce(x[i:i + 8, j:j + 128].float()) for j in range(0, 300, 128)])
        for i in range(0, 20, 8)])
    out = kernel(x)
    torch.testing.assert_close(out, expected, **_tolerance(dtype))
    torch.testing.assert_close(out, run_ref(kernel, (x,)), **_tolerance(dtype))


def test_non_adjacent_dims_of_a_3d_tile():
    @pallasite.kernel
    def outer_and_lane_max(x: torch.Tensor) -> torch.Tensor:
        b, m, n = x.size()
        out = torch.empty([m], dtype=torch.float32)
        for tile_m in hl.tile(m, block_size=8):
            out[tile_m] = torch.amax(x[:, tile_m, :], dim=(0, 2))
        return out

    x = _input((3, 20, 200), torch.float32, seed=2) - 5  # all-negative: padding as 0 would show
    torch.testing.assert_close(outer_and_lane_max(x), x.amax((0, 2)))
    torch.testing.assert_close(run_ref(outer_and_lane_max, (x,)), x.amax((0, 2)))
