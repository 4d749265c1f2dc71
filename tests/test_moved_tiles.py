"""`x[start + tile.index]` with `start` read from data (Helion's grouped GEMM): when every access
of the tile is moved by the same scalar defined before its loop, the tile is rebased to
[start, start + extent) and its accesses are tile windows at a runtime offset (streamed, no
one-hot gather over the whole tensor); any other use of the tile keeps the gathers. Either way
the result is torch's and reference mode's (frontend/moved_tiles.py)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel
def grouped_gemm(A: torch.Tensor, B: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    T, K = A.shape
    G, _, N = B.shape
    out = torch.zeros([T, N], dtype=A.dtype, device=A.device)
    for g in hl.grid(G):
        start = offsets[g]
        end = offsets[g + 1]
        M_g = end - start
        if M_g != 0:
            for tile_m, tile_n in hl.tile([M_g, N]):
                acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
                for tile_k in hl.tile(K):
                    a_blk = A[start + tile_m.index, tile_k]
                    acc = torch.addmm(acc, a_blk, B[g, tile_k, tile_n])
                out[start + tile_m.index, tile_n] = acc.to(out.dtype)
    return out


def _grouped_expected(A, B, offsets):
    out = torch.zeros(A.size(0), B.size(2), dtype=A.dtype)
    bounds = offsets.tolist()
    for g, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        out[a:b] = (A[a:b].float() @ B[g].float()).to(A.dtype)
    return out


def _grouped_inputs(last: int = 180):
    gen = torch.Generator().manual_seed(0)
    A = torch.randn(200, 256, generator=gen).to(torch.bfloat16)
    B = (torch.randn(5, 256, 256, generator=gen) / 16).to(torch.bfloat16)
    return A, B, torch.tensor([0, 37, 37, 120, 190, last])


@pytest.mark.parametrize("loop_type", ["unroll", "fori_loop", "emit_pipeline"])
@pytest.mark.parametrize("last", [180, 200])  # the last group ends inside the tensor, or at its end
def test_helions_grouped_gemm_reads_and_writes_tile_windows_at_each_groups_start(loop_type, last):
    A, B, offsets = _grouped_inputs(last)
    config = dict(block_sizes=[64, 128, 128], pallas_loop_type=loop_type)
    code, result = code_and_output(grouped_gemm, (A, B, offsets), **config)
    torch.testing.assert_close(result, _grouped_expected(A, B, offsets), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(run_ref(grouped_gemm, (A, B, offsets), **config), result, atol=2e-2, rtol=2e-2)
    assert "index_hot" not in code and "scatter into" not in code  # no one-hot gather or scatter
    assert "tile_m_begin = start + tile_m_step * 64" in code


def test_the_fori_loop_streams_a_window_of_each_group_and_writes_back_only_its_rows():
    A, B, offsets = _grouped_inputs()
    code, _ = code_and_output(grouped_gemm, (A, B, offsets), block_sizes=[64, 128, 128], pallas_loop_type="fori_loop")
    assert "A_hbm.at[pl.ds(tile_m_begin, 64), pl.ds(step * 128, 128)]" in code
    assert "write back only the tile's rows inside its range" in code


def test_helions_grouped_gemm_at_mixtral_sizes_lowers_with_its_default_config():
    bf = torch.bfloat16
    A, B = torch.empty(4096, 4096, dtype=bf, device="meta"), torch.empty(8, 4096, 14336, dtype=bf, device="meta")
    offsets = torch.tensor([0, 500, 1000, 1500, 2000, 2500, 3000, 3500, 4096])
    codes = check_tpu_lowering(grouped_gemm, (A, B, offsets))
    assert all("index_hot" not in code for code in codes.values())


def test_offsets_past_the_tensor_name_the_moved_tile_as_written():
    A, B, _ = _grouped_inputs()
    offsets = torch.tensor([0, 37, 37, 120, 190, 210])
    with pytest.raises(exc.ShapeMismatch, match=r"A\[start \+ tile_m.index, tile_k\]: start \+ tile_m.index "
                                                 r"covers \[190, 210\) but A.size\(0\) is 200"):
        code_and_output(grouped_gemm, (A, B, offsets), block_sizes=[64, 128, 128], pallas_loop_type="fori_loop")


@pallasite.kernel
def moved_rows(x: torch.Tensor, offsets: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for g in hl.grid(offsets.size(0) - 1):
        start = offsets[g]
        for tile in hl.tile(2, offsets[g + 1] - start):
            out[start + tile.index, :] = x[start + tile.index, :] * 2 + tile.id
    return out


def test_a_tile_with_a_static_begin_moves_its_begin_too_and_keeps_its_id():
    x = torch.randn(100, 128)
    offsets = torch.tensor([0, 30, 31, 64, 100])
    bias = torch.zeros(16, 128)
    expected = torch.zeros_like(x)
    bounds = offsets.tolist()
    for a, b in zip(bounds[:-1], bounds[1:]):
        rows = torch.arange(a + 2, max(b, a + 2))
        expected[rows] = x[rows] * 2 + ((rows - a - 2) // 8)[:, None]
    for loop_type in ("unroll", "fori_loop"):
        config = dict(block_sizes=[8], pallas_loop_type=loop_type)
        code, result = code_and_output(moved_rows, (x, offsets, bias), **config)
        torch.testing.assert_close(result, expected)
        torch.testing.assert_close(run_ref(moved_rows, (x, offsets, bias), **config), expected)
        assert "tile_start = start + 2" in code and "index_hot" not in code


@pallasite.kernel
def moved_and_unmoved(x: torch.Tensor, offsets: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for g in hl.grid(offsets.size(0) - 1):
        start = offsets[g]
        for tile in hl.tile(offsets[g + 1] - start):
            out[start + tile.index, :] = x[start + tile.index, :] + bias[tile, :]
    return out


@pallasite.kernel
def two_shifts(x: torch.Tensor, offsets: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for g in hl.grid(offsets.size(0) - 1):
        start = offsets[g]
        for tile in hl.tile(offsets[g + 1] - start):
            out[start + tile.index, :] = x[(start + 1) + tile.index, :] + bias[0, :]
    return out


def _expected(kernel, x, offsets, bias):
    out = torch.zeros_like(x)
    bounds = offsets.tolist()
    for a, b in zip(bounds[:-1], bounds[1:]):
        local = torch.arange(b - a)
        if kernel is moved_and_unmoved:
            out[a:b] = x[a:b] + bias[local]
        else:
            out[a:b] = x[a + 1:b + 1] + bias[0]
    return out


@pytest.mark.parametrize("kernel", [moved_and_unmoved, two_shifts])
def test_a_tile_with_other_uses_keeps_its_gathers_and_torchs_result(kernel):
    x = torch.randn(101, 128)
    offsets = torch.tensor([0, 13, 13, 40, 100])
    bias = torch.randn(64, 128)
    config = dict(block_sizes=[8], pallas_loop_type="fori_loop")
    code, result = code_and_output(kernel, (x, offsets, bias), **config)
    expected = _expected(kernel, x, offsets, bias)
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(kernel, (x, offsets, bias), **config), expected)
    assert "index_hot" in code or "hit = " in code  # gathered or scattered through the index vector


@pallasite.kernel
def narrowed_positions(x: torch.Tensor, starts: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for g in hl.grid(starts.size(0)):
        start = starts[g]
        blk = table[:, :]
        for tile in hl.tile(16):
            out[start + tile.index, :] = x[start + tile.index, :] + blk[tile]
    return out


def test_a_narrowing_read_at_the_tiles_positions_keeps_them_unmoved():
    """`blk[tile]` reads the block at the tile's own positions (its begin, unmoved): the tile is not rebased."""
    x = torch.randn(100, 128)
    starts = torch.tensor([0, 20, 43, 84])
    table = torch.randn(16, 128)
    expected = torch.zeros_like(x)
    for a in starts.tolist():
        expected[a:a + 16] = x[a:a + 16] + table
    for loop_type in ("unroll", "fori_loop"):
        config = dict(block_sizes=[8], pallas_loop_type=loop_type)
        code, result = code_and_output(narrowed_positions, (x, starts, table), **config)
        torch.testing.assert_close(result, expected)
        torch.testing.assert_close(run_ref(narrowed_positions, (x, starts, table), **config), expected)


@pallasite.kernel
def grouped_accumulate(A: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    T, K = A.shape
    out = torch.ones([T, K], dtype=torch.float32, device=A.device)
    for g in hl.grid(offsets.size(0) - 1):
        start = offsets[g]
        for tile_m, tn in hl.tile([offsets[g + 1] - start, K]):
            old = hl.atomic_add(out, [start + tile_m.index, tn], A[start + tile_m.index, tn])
            out[start + tile_m.index, tn] = out[start + tile_m.index, tn] + old
    return out


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_an_atomic_at_a_moved_tile_is_a_window_read_modify_write(dtype):
    """Trial MM: with int64 offsets the atomic's duplicate-lane comparison was refused as int64 data
    in both modes; its lanes name distinct rows, so it is a plain read-modify-write, a window."""
    A = torch.randn(100, 128)
    offsets = torch.tensor([0, 20, 20, 57, 100], dtype=dtype)
    expected = (1 + A) + 1  # the atomic leaves 1 + A and returns the old 1, added after
    config = dict(block_sizes=[16, 128], pallas_loop_type="fori_loop")
    code, result = code_and_output(grouped_accumulate, (A, offsets), **config)
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(grouped_accumulate, (A, offsets), **config), expected)
    assert "index_hot" not in code and "hit = " not in code


@pallasite.kernel
def grouped_masked(A: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    T, K = A.shape
    out = torch.zeros([T, K], dtype=A.dtype, device=A.device)
    for g in hl.grid(offsets.size(0) - 1):
        start = offsets[g]
        M_g = offsets[g + 1] - start
        for tile_m, tk in hl.tile([M_g, K]):
            v = A[start + tile_m.index, tk]
            keep = (tile_m.index < M_g - 3)[:, None]
            out[start + tile_m.index, tk] = torch.where(keep, v, -v)
    return out


@pallasite.kernel
def positions_used(x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for g in hl.grid(offsets.size(0) - 1):
        start = offsets[g]
        for tile in hl.tile(offsets[g + 1] - start):
            row = x[start + tile.index, :] + tile.index[:, None].float() + tile.begin
            out[start + tile.index, :] = row * (tile.end - tile.begin) + tile.id
    return out


def _positions_expected(kernel, x, offsets):
    out = torch.zeros_like(x)
    for a, b in zip(offsets.tolist()[:-1], offsets.tolist()[1:]):
        local = torch.arange(b - a)
        if kernel is grouped_masked:
            out[a:b] = torch.where((local < b - a - 3)[:, None], x[a:b], -x[a:b])
        else:
            begin, tile_id = local // 8 * 8, local // 8
            rows = (torch.minimum(begin + 8, torch.tensor(b - a)) - begin)[:, None]
            out[a:b] = (x[a:b] + local[:, None].float() + begin[:, None]) * rows + tile_id[:, None]
    return out


@pytest.mark.parametrize("loop_type", ["unroll", "fori_loop", "emit_pipeline"])
@pytest.mark.parametrize("kernel", [grouped_masked, positions_used])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_the_tiles_positions_begin_and_end_in_arithmetic_read_what_they_were(loop_type, kernel, dtype):
    """Trial MM: a mask `tile_m.index < M_g - 3` (or `tile.begin`, `tile.end` arithmetic) beside
    `A[start + tile_m.index, tk]` kept the accesses one-hot gathers over the whole tensor; the tile
    is now rebased and those uses read the moved value minus start: what they were."""
    x, offsets = torch.randn(100, 128), torch.tensor([0, 20, 20, 57, 100], dtype=dtype)
    config = dict(block_sizes=[8] if kernel is positions_used else [8, 128], pallas_loop_type=loop_type)
    code, result = code_and_output(kernel, (x, offsets), **config)
    expected = _positions_expected(kernel, x, offsets)
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(kernel, (x, offsets), **config), expected)
    assert "index_hot" not in code and "hit = " not in code
    assert "tile_m_index = tile_m_moved_index - start" in code if kernel is grouped_masked else \
        "tile_begin = tile_moved_begin - start" in code


def test_a_masked_grouped_kernel_at_moe_sizes_lowers():
    big = torch.empty(65536, 512, dtype=torch.float32, device="meta")
    codes = check_tpu_lowering(grouped_masked, (big, torch.tensor([0, 30000, 65536])), chips=("v5e",),
                               block_sizes=[256, 256], pallas_loop_type="fori_loop")
    assert all("index_hot" not in code for code in codes.values())


@pallasite.kernel
def grouped_with_local_bias(A: torch.Tensor, offsets: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    T, K = A.shape
    out = torch.zeros([T, K], dtype=A.dtype, device=A.device)
    for g in hl.grid(offsets.size(0) - 1):
        start = offsets[g]
        for tile_m, tk in hl.tile([offsets[g + 1] - start, K]):
            local = bias[tile_m, tk]
            out[start + tile_m.index, tk] = A[start + tile_m.index, tk] + local
    return out


def test_a_gather_overflow_names_the_use_that_kept_a_moved_tile_from_its_window():
    """Trial MM: a use of the tile that keeps the accesses gathers (here an access at the tile itself,
    which reads the group's own rows of bias) is correct; at MoE sizes the overflow blamed a scatter
    the user never wrote, without saying what cost the window."""
    A, offsets, bias = torch.randn(100, 128), torch.tensor([0, 20, 20, 57, 100]), torch.randn(64, 128)
    expected = torch.zeros_like(A)
    for a, b in zip(offsets.tolist()[:-1], offsets.tolist()[1:]):
        expected[a:b] = A[a:b] + bias[:b - a]
    config = dict(block_sizes=[16, 128], pallas_loop_type="fori_loop")
    _, result = code_and_output(grouped_with_local_bias, (A, offsets, bias), **config)
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(grouped_with_local_bias, (A, offsets, bias), **config), expected)
    big = torch.empty(65536, 512, dtype=torch.float32, device="meta")
    big_bias = torch.empty(40000, 512, dtype=torch.float32, device="meta")
    with pytest.raises(exc.VmemOverflow, match=r"here an access at tile_m itself \(line \d+: \"local = "):
        check_tpu_lowering(grouped_with_local_bias, (big, torch.tensor([0, 30000, 65536]), big_bias),
                           chips=("v5e",), **config)
