"""Helion language calls its example programs make (issue #22): the creation functions'
`device=` argument, `hl.barrier()` between top-level device loops (their order already),
and the rest of this file's forms."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel
def matmul_plus_row_index(x, y):
    m, k = x.size()
    n = y.size(1)
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32, device=x.device)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        ones = hl.full([tile_m, tile_n], 1.0, dtype=torch.float32, device=x.device)
        rows = hl.arange(tile_m.block_size, dtype=torch.int32, device=x.device) + tile_m.begin
        out[tile_m, tile_n] = acc + ones * rows[:, None].to(torch.float32)
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_creation_functions_take_helions_device_argument(loop_type):
    x, y = torch.randn(16, 256), torch.randn(256, 128)
    config = {"block_sizes": [8, 128, 128], "pallas_loop_type": loop_type}
    expected = x @ y + torch.arange(16, dtype=torch.float32)[:, None]
    _, out = code_and_output(matmul_plus_row_index, (x, y), **config)
    torch.testing.assert_close(out, expected, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(run_ref(matmul_plus_row_index, (x, y), **config), expected, atol=1e-3, rtol=1e-3)
    check_tpu_lowering(matmul_plus_row_index, (x, y), **config)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 8]))
def split_sum_with_barrier(x):
    m, n = x.size()
    parts = torch.empty([m, 2], dtype=torch.float32, device=x.device)
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tile_m, half in hl.tile([m, 2], block_size=[None, 1]):
        parts[tile_m, half] = x[tile_m, half.begin * 128 + hl.arange(128)].sum(-1, keepdim=True)
    hl.barrier()  # every partial is written before the second loop reads it
    for tile_m in hl.tile(m):
        out[tile_m] = parts[tile_m, :].sum(-1)
    return out


def test_a_barrier_between_top_level_loops_is_their_order():
    x = torch.randn(16, 256)
    _, out = code_and_output(split_sum_with_barrier, (x,))
    torch.testing.assert_close(out, x.sum(-1), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(run_ref(split_sum_with_barrier, (x,)), out, atol=1e-4, rtol=1e-4)
    assert len(split_sum_with_barrier.bind((x,)).plan().calls) == 2  # two pallas_calls, in order
    check_tpu_lowering(split_sum_with_barrier, (x,))
