"""A tensor a fori_loop reads and writes at one window form (`out[start + tile_m.index, tn] += v`,
an accumulating grouped GEMM) streams instead of staying resident: each step's window is copied
in ahead (as an input's is), updated in its buffer and written back before the buffer takes a
later window (plan/loops/streams.py, `Direction.IN_OUT`). Trial MM: at T = 65536 rows the
resident output overflowed VMEM on every chip."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel
def grouped_accumulate(A: torch.Tensor, offsets: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for g in hl.grid(offsets.size(0) - 1):
        start = offsets[g]
        for tile_m, tk in hl.tile([offsets[g + 1] - start, A.size(1)]):
            out[start + tile_m.index, tk] += A[start + tile_m.index, tk] * (g + 1)
    return out


def _grouped_expected(A, offsets, out):
    expected = out.clone()
    for g, (a, b) in enumerate(zip(offsets.tolist()[:-1], offsets.tolist()[1:])):
        expected[a:b] += A[a:b] * (g + 1)
    return expected


@pytest.mark.parametrize("buffers", [2, 3])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("last", [90, 100])  # the last group ends inside the tensor, or at its end
def test_an_accumulated_output_at_moved_windows_streams_in_and_out(buffers, dtype, last):
    gen = torch.Generator().manual_seed(0)
    A, out = torch.randn(100, 256, generator=gen), torch.randn(100, 256, generator=gen)
    offsets = torch.tensor([0, 20, 20, 57, last], dtype=dtype)
    config = dict(block_sizes=[16, 128], pallas_loop_type="fori_loop", pallas_load_buffer_count=buffers)
    code, result = code_and_output(grouped_accumulate, (A, offsets, out.clone()), **config)
    expected = _grouped_expected(A, offsets, out)
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(grouped_accumulate, (A, offsets, out.clone()), **config), expected)
    assert "streaming out (in and out), A (in)" in code
    assert "out_copy(" in code and "out_piece(" in code and "out_ref" not in code


def test_an_accumulating_grouped_kernel_at_moe_sizes_lowers():
    big = torch.empty(65536, 512, dtype=torch.float32, device="meta")
    offsets = torch.tensor([0, 30000, 65536], dtype=torch.int32)
    check_tpu_lowering(grouped_accumulate, (big, offsets, big), block_sizes=[256, 256], pallas_loop_type="fori_loop")


@pallasite.kernel
def rows_updated_twice(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    for tile_c in hl.tile(x.size(1)):
        for tile_r in hl.tile(x.size(0)):
            x[tile_r, tile_c] = x[tile_r, tile_c] * scale[tile_c][None, :]
            x[tile_r, tile_c] = x[tile_r, tile_c] + 1  # a read after a write: the window just written
    return x


@pytest.mark.parametrize("rows", [96, 100])  # whole windows; a partial last window (the host pads)
def test_an_in_place_update_streams_whole_windows_and_reads_its_own_writes(rows):
    x, scale = torch.randn(rows, 256), torch.randn(256)
    config = dict(block_sizes=[128, 16], pallas_loop_type="fori_loop")
    code, result = code_and_output(rows_updated_twice, (x.clone(), scale), **config)
    expected = x * scale + 1
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(rows_updated_twice, (x.clone(), scale), **config), expected)
    assert "streaming x (in and out)" in code and "x_write(" in code
    assert "before the slot takes a later window in" in code


@pytest.mark.parametrize("loop_type", ["unroll", "emit_pipeline"])
def test_other_loop_types_keep_a_read_and_written_tensor_resident(loop_type):
    x, scale = torch.randn(96, 256), torch.randn(256)
    code, result = code_and_output(rows_updated_twice, (x.clone(), scale), block_sizes=[128, 16],
                                   pallas_loop_type=loop_type)
    torch.testing.assert_close(result, x * scale + 1)
    assert "(in and out)" not in code


def test_the_cost_model_counts_each_window_in_and_back_and_each_write_waited():
    """A read-and-written stream moves its windows twice, and each store's write-back is waited
    for at once (an exposed wait per step), against one copy for an input stream."""
    from pallasite.testing import schedule_report
    x, scale = torch.randn(256, 256), torch.randn(256)
    config = dict(block_sizes=[128, 16], pallas_loop_type="fori_loop")
    report = schedule_report(rows_updated_twice, (x, scale), **config)
    steps = 2 * (256 // 16)  # two column tiles, 16 row steps each
    window = 16 * 128 * 4
    assert report["inner_tiles"] == steps
    assert report["hbm_bytes"] >= 2 * steps * window  # in and back
    assert report["exposed_dma_waits"] >= steps
