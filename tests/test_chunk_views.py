"""`x[b, c * K + tile.index, h, :]` (Helion's Mamba2 kernels): when K divides the axis and the
tile's range lies in [0, K), the access is the tile of row c of the axis seen as [n // K, K],
through a host view made before the loop, not a gather keeping the whole axis in VMEM with a
one-hot over it (frontend/chunk_views.py). Mamba2's chunk scan at its own sizes lowers now."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel
def chunk_scale(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    batch, seqlen, heads, width = x.shape
    nchunks = scale.size(1)
    chunk = seqlen // nchunks
    block_m = hl.register_block_size(chunk)
    out = torch.empty_like(x)
    for tile_m, tile_h, tile_b, tile_c in hl.tile([chunk, heads, batch, nchunks], block_size=[block_m, 1, 1, 1]):
        rows = x[tile_b.begin, tile_c.begin * chunk + tile_m.index, tile_h.begin, :]
        out[tile_b.begin, tile_c.begin * chunk + tile_m.index, tile_h.begin, :] = rows * scale[tile_b.begin, tile_c.begin]
    return out


def test_a_chunk_of_an_axis_is_read_and_written_as_a_tile_of_its_view():
    x, scale = torch.randn(2, 96, 3, 128), torch.randn(2, 4)
    expected = (x.reshape(2, 4, 24, 3, 128) * scale[:, :, None, None, None]).reshape(x.shape)
    for block in (8, 24):
        code, result = code_and_output(chunk_scale, (x, scale), block_sizes=[block])
        torch.testing.assert_close(result, expected)
        torch.testing.assert_close(run_ref(chunk_scale, (x, scale), block_sizes=[block]), expected)
        assert "index_hot" not in code and "x_chunks" in code and "out_chunks" in code


@pallasite.kernel
def chunk_prefix(x: torch.Tensor, nchunks: hl.constexpr) -> torch.Tensor:
    """Row i of each chunk: the sum of the chunk's rows up to the end of i's tile (Mamba2's
    causal inner range `hl.tile((tile_m.id + 1) * block_m)`)."""
    seqlen, width = x.shape
    chunk = seqlen // nchunks
    block_m = hl.register_block_size(chunk)
    out = torch.empty_like(x)
    for tile_m, tile_c in hl.tile([chunk, nchunks], block_size=[block_m, 1]):
        acc = hl.zeros([tile_m, width], dtype=torch.float32)
        for tile_k in hl.tile((tile_m.id + 1) * block_m, block_size=8):
            acc = acc + x[tile_c.begin * chunk + tile_k.index, :].sum(0)[None, :]
        out[tile_c.begin * chunk + tile_m.index, :] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_an_inner_tile_bounded_by_the_chunk_reads_its_chunk_as_a_tile(loop_type):
    x = torch.randn(64, 128)
    config = dict(block_sizes=[8], pallas_loop_type=loop_type)
    code, result = code_and_output(chunk_prefix, (x, 4), **config)
    chunks = x.reshape(4, 16, 128)
    ends = (torch.arange(16) // 8 + 1) * 8
    expected = torch.stack([torch.stack([c[:e].sum(0) for e in ends]) for c in chunks]).reshape(64, 128)
    torch.testing.assert_close(result, expected, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(run_ref(chunk_prefix, (x, 4), **config), expected, atol=1e-4, rtol=1e-5)
    assert "index_hot" not in code


@pallasite.kernel
def past_the_chunk(x: torch.Tensor, nchunks: hl.constexpr) -> torch.Tensor:
    """The tile runs 8 rows into the next chunk: no chunk view, still torch's result."""
    seqlen, width = x.shape
    chunk = seqlen // nchunks
    out = torch.zeros([nchunks, width], dtype=x.dtype, device=x.device)
    for tile_c in hl.tile(nchunks - 1, block_size=1):
        acc = hl.zeros([width], dtype=torch.float32)
        for tile_k in hl.tile(chunk + 8, block_size=8):
            acc = acc + x[tile_c.begin * chunk + tile_k.index, :].sum(0)
        out[tile_c.begin, :] = acc
    return out


def test_a_tile_past_the_chunk_keeps_its_gather():
    x = torch.randn(64, 128)
    code, result = code_and_output(past_the_chunk, (x, 4), block_sizes=[], pallas_loop_type="fori_loop")
    expected = torch.zeros(4, 128)
    for c in range(3):
        expected[c] = x[c * 16:c * 16 + 24].sum(0)
    torch.testing.assert_close(result, expected, atol=1e-4, rtol=1e-5)
    assert "x_chunks" not in code


def test_mamba2_chunk_scan_shapes_lower():
    """The access forms of Helion's mamba2_chunk_scan at its own sizes (B=8, 80 heads, 4096 rows,
    chunks of 256): C and x were gathered (80 and 128 MiB one-hots), past every chip's VMEM."""
    x = torch.empty(8, 4096, 80, 64, dtype=torch.float16, device="meta")
    scale = torch.empty(8, 16, dtype=torch.float16, device="meta")
    codes = check_tpu_lowering(chunk_scale, (x, scale))
    assert all("index_hot" not in code for code in codes.values())
