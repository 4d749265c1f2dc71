"""Scans along a dim of a tile: torch.cumsum/cumprod, hl.cumsum/cumprod, hl.associative_scan
with a user combine function (tuples too), and hl.reduce with a user combine function.

On a TPU each is a log-step scan of lane/sublane rotates and iota selects (Mosaic has
no scan primitive). A partial tile's padding sits at the end of the axis: a forward
scan never reads it, a reverse scan and a reduce only combine lanes below the valid
count. Interpret mode fills padding with NaN, so a leak would show in the results.
Each result matches torch and reference mode, in float32, bfloat16 and int32.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


def _tolerance(dtype):
    if dtype == torch.int32:
        return {"atol": 0, "rtol": 0}
    return {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 5e-2, "rtol": 2e-2}


def _input(shape, dtype, seed=0, near_one=False):
    """Random values; bfloat16 ones small integers, whose sums are exact in any order (a
    bfloat16 combine rounds each step, and a log-step scan adds in another order than
    torch's loop), or near 1 for products."""
    generator = torch.Generator().manual_seed(seed)
    if near_one:
        return (1 + 0.01 * torch.randn(*shape, generator=generator)).to(dtype)
    if dtype != torch.float32:
        return torch.randint(-5, 6, shape, generator=generator, dtype=torch.int32).to(dtype)
    return torch.randn(*shape, generator=generator)


def tiled(fn, x, blocks=(8, 128)):
    """`fn` applied to each (8, 128) tile of x, as the kernel sees them."""
    rows = []
    for i in range(0, x.shape[0], blocks[0]):
        rows.append(torch.cat([fn(x[i:i + blocks[0], j:j + blocks[1]]) for j in range(0, x.shape[1], blocks[1])], 1))
    return torch.cat(rows, 0)


def tile_map_kernel(fn):
    """`out[tm, tn] = fn(x[tm, tn])` over tiles of 8 x 128 (20 x 300: both tails partial)."""

    @pallasite.kernel
    def tile_map(x: torch.Tensor) -> torch.Tensor:
        m, n = x.size()
        out = torch.empty_like(x)
        for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
            out[tile_m, tile_n] = fn(x[tile_m, tile_n])
        return out

    return tile_map


def _flip_scan(scan, dim):
    return lambda v: scan(v.flip(dim)).flip(dim)


def _add(a, b):
    return a + b


def _running_max(a, b):
    return torch.maximum(a, b)


def _affine(a, b):
    """The composition of two affine maps x -> m * x + c (associative, not commutative)."""
    return b[0] * a[0], b[0] * a[1] + b[1]


TILE_SCANS = {
    # name: (kernel function, torch reference, dtypes)
    "cumsum_lanes": (lambda v: torch.cumsum(v, dim=1), lambda v: torch.cumsum(v, 1)),
    "cumsum_rows": (lambda v: v.cumsum(0), lambda v: v.cumsum(0)),
    "cumsum_negative_dim": (lambda v: torch.cumsum(v, -1), lambda v: torch.cumsum(v, -1)),
    "cumprod_lanes": (lambda v: torch.cumprod(v, 1), lambda v: torch.cumprod(v, 1)),
    "cumprod_rows": (lambda v: v.cumprod(dim=0), lambda v: v.cumprod(dim=0)),
    "hl_cumsum": (lambda v: hl.cumsum(v, 1), lambda v: torch.cumsum(v, 1)),
    "hl_cumsum_reverse_lanes": (lambda v: hl.cumsum(v, 1, reverse=True), _flip_scan(lambda v: v.cumsum(1), 1)),
    "hl_cumsum_reverse_rows": (lambda v: hl.cumsum(v, dim=0, reverse=True), _flip_scan(lambda v: v.cumsum(0), 0)),
    "hl_cumprod_reverse": (lambda v: hl.cumprod(v, 1, True), _flip_scan(lambda v: torch.cumprod(v, 1), 1)),
    "scan_add": (lambda v: hl.associative_scan(_add, v, dim=1), lambda v: torch.cumsum(v, 1)),
    "scan_max": (lambda v: hl.associative_scan(_running_max, v, 1), lambda v: torch.cummax(v, 1).values),
    "scan_max_reverse": (lambda v: hl.associative_scan(_running_max, v, 1, reverse=True),
                         _flip_scan(lambda v: torch.cummax(v, 1).values, 1)),
    "scan_max_reverse_rows": (lambda v: hl.associative_scan(_running_max, v, 0, reverse=True),
                              _flip_scan(lambda v: torch.cummax(v, 0).values, 0)),
}


SCAN_CASES = [pytest.param(name, dtype, id=f"{name}-{str(dtype)[6:]}") for name in TILE_SCANS
              for dtype in (torch.float32, torch.bfloat16, torch.int32)]


@pytest.mark.parametrize("name, dtype", SCAN_CASES)
def test_scan_of_a_partial_tile_matches_torch(name, dtype):
    """torch accumulates a bfloat16 cumsum/cumprod in float32, rounding each output once:
    so does the kernel."""
    fn, reference = TILE_SCANS[name]
    x = _input((20, 300), dtype, seed=1, near_one="cumprod" in name and dtype != torch.int32)
    kernel = tile_map_kernel(fn)
    out = kernel(x)
    torch.testing.assert_close(out, tiled(reference, x).to(dtype), **_tolerance(dtype))  # int64: int32 on TPU
    torch.testing.assert_close(out, run_ref(kernel, (x,)), **_tolerance(dtype))
