"""Gathers from float16, int8, int16 and uint8 tables (issue 22 §2): Helion programs read
half-precision embeddings and quantized tables through index vectors.

A float16 table is gathered by the exact one-hot matmul in float32 (every float16 is a
float32); an 8- or 16-bit integer table by select-and-sum widened to int32 (Mosaic reduces
32-bit integers only), the result narrowed back. Resident and per-row DMA alike, every
value bit for bit, non-finite float16 entries included.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.plan.plans import GatherMethod
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref

from plan_helpers import only_call

NARROW = (torch.float16, torch.int8, torch.int16, torch.uint8)
MODES = ("resident", "dma")


def _table(rows, *row, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        table = (torch.randn((rows, *row), generator=generator) * 300).to(dtype)
        table.view(-1)[:3] = torch.tensor([float("inf"), float("-inf"), float("nan")], dtype=dtype)
        return table
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max + 1, (rows, *row), generator=generator, dtype=dtype)


def _bits(tensor):
    """The tensor's bit patterns: NaN equals NaN, as a gather must copy it."""
    return tensor.view(torch.uint8 if tensor.dtype.itemsize == 1 else torch.int16)


def _indices(n, rows, seed=1):
    return torch.randint(0, rows, (n,), generator=torch.Generator().manual_seed(seed), dtype=torch.int32)


@pallasite.kernel(config=pallasite.Config(block_sizes=[128]))
def gather_rows(table, indices):
    n = indices.size(0)
    out = torch.empty([n, *table.shape[1:]], dtype=table.dtype, device=table.device)
    for tile in hl.tile(n):
        out[tile] = table[indices[tile]]
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", NARROW)
def test_rows_of_a_narrow_table(dtype, mode):
    table = _table(64, 256, dtype=dtype)
    indices = _indices(200, 64)  # a partial last tile
    args, config = (table, indices), {"pallas_indirect_access_mode": mode}
    _, out = code_and_output(gather_rows, args, **config)
    assert out.dtype == dtype and torch.equal(_bits(out), _bits(table[indices.long()]))
    assert torch.equal(_bits(run_ref(gather_rows, args, **config)), _bits(out))
    call = only_call(gather_rows, args, **config)
    (gather,) = [a.gather for a in call.accesses.values() if a.gather is not None]
    if mode == "dma":
        assert gather.method is GatherMethod.ROW_DMA
    else:
        floating = dtype.is_floating_point
        assert gather.method is (GatherMethod.ONE_HOT_MATMUL if floating else GatherMethod.SELECT_SUM)
    check_tpu_lowering(gather_rows, args, **config)


@pallasite.kernel(config=pallasite.Config(block_sizes=[16, 8]))
def embedding_sum(table, indices):
    """A bag of rows per output row, summed in float32 inside an inner loop."""
    m, k = indices.shape
    out = torch.empty([m, table.size(1)], dtype=torch.float32, device=table.device)
    for tile_m in hl.tile(m):
        acc = hl.zeros([tile_m, table.size(1)], dtype=torch.float32)
        for tile_k in hl.tile(k):
            idx = indices[tile_m, tile_k]
            acc = acc + table[idx, :].to(torch.float32).sum(1)
        out[tile_m, :] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("dtype", (torch.float16, torch.int8))
def test_narrow_table_gathered_in_an_inner_loop(dtype, loop_type):
    table = _table(40, 128, dtype=dtype, seed=3)
    if dtype.is_floating_point:
        table = torch.randn(40, 128, generator=torch.Generator().manual_seed(3)).to(dtype)
    indices = torch.randint(0, 40, (20, 16), generator=torch.Generator().manual_seed(4), dtype=torch.int32)
    args, config = (table, indices), {"pallas_loop_type": loop_type}
    _, out = code_and_output(embedding_sum, args, **config)
    expected = table[indices.long()].to(torch.float32).sum(1)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(run_ref(embedding_sum, args, **config), out, rtol=1e-5, atol=1e-3)


@pallasite.kernel
def gather_by_index_tensor(table, idx):
    out = torch.empty([idx.size(0), table.size(1)], dtype=table.dtype, device=table.device)
    for t in hl.tile(idx.size(0)):
        out[t, :] = table[idx[t], :]
    return out


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16])
def test_a_narrow_integer_index_tensor_is_refused_as_torch_refuses_it(dtype):
    """(trial D) The compiled kernel gathered with a uint8 or int16 index, where torch (and
    reference mode) reads a uint8 index as a boolean mask and refuses int8/int16 indices."""
    table, idx = torch.randn(50, 128), torch.randint(0, 50, (37,)).to(dtype)
    with pytest.raises(exc.IndexingError, match="cast it with .int()"):
        gather_by_index_tensor(table, idx)
    with pytest.raises(exc.IndexingError):
        run_ref(gather_by_index_tensor, (table, idx))
    torch.testing.assert_close(gather_by_index_tensor(table, idx.int()), table[idx.long()])
