"""int4 packing and unpacking as Helion's int4 GEMM writes it: packed int8 weights, nibbles
by shifts with torch's int8 semantics (`b << 4` wraps in int8, `>>` is arithmetic on signed
ints), and an activation window of computed start (`A[tile_m, 2 * tk.begin : ... + 2 * block]`)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


def _packed(k: int, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random int4 values [k, n] and their int8 packing [k // 2, n] (row 2i low, 2i+1 high)."""
    values = torch.randint(-8, 8, (k, n), dtype=torch.int8, generator=torch.Generator().manual_seed(seed))
    pairs = values.reshape(k // 2, 2, n)
    return values, ((pairs[:, 0] & 0xF) | (pairs[:, 1] << 4)).to(torch.int8)


@pallasite.kernel
def nibbles(b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each nibble three ways: shifts on int8 (wrapping left shift, arithmetic right shift),
    and a mask with explicit sign extension."""
    kp, n = b.shape
    low = torch.empty([kp, n], dtype=torch.int8)
    high = torch.empty([kp, n], dtype=torch.int32)
    masked = torch.empty([kp, n], dtype=torch.int32)
    for tk, tn in hl.tile([kp, n]):
        packed = b[tk, tn]
        low[tk, tn] = (packed << 4) >> 4
        high[tk, tn] = (packed >> 4).to(torch.int32)
        raw = (packed & 0xF).to(torch.int32)
        masked[tk, tn] = torch.where(raw >= 8, raw - 16, raw)
    return low, high, masked


def test_nibbles_follow_torch_int8_shifts():
    values, packed = _packed(64, 256)
    low, high, masked = code_and_output(nibbles, (packed,), block_sizes=[16, 128])[1]
    torch.testing.assert_close(low, values[0::2])
    torch.testing.assert_close(high, values[1::2].to(torch.int32))
    torch.testing.assert_close(masked, values[0::2].to(torch.int32))
    # and as torch computes them on the whole tensor, which reference mode runs
    ref_low, ref_high, _ = run_ref(nibbles, (packed,), block_sizes=[16, 128])
    torch.testing.assert_close(ref_low, (packed << 4) >> 4)
    torch.testing.assert_close(ref_high, (packed >> 4).to(torch.int32))


@pallasite.kernel
def int4_matmul_split(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A @ unpack(B) with A's even and odd columns read through one window of computed
    start: A[tm, 2 * tk.begin : 2 * tk.begin + 2 * block] (the interleave is written as
    two products, the part that does not need torch.stack)."""
    m, k = a.shape
    n = b.size(1)
    out = torch.empty([m, n], dtype=torch.float32)
    block_k = hl.register_block_size(k // 2)
    for tm, tn in hl.tile([m, n]):
        acc = hl.zeros([tm, tn], dtype=torch.float32)
        for tk in hl.tile(k // 2, block_size=block_k):
            start = tk.begin * 2
            window = a[tm, start:start + block_k * 2]
            pairs = window.reshape(tm.block_size, tk.block_size, 2)
            packed = b[tk, tn]
            low = ((packed << 4) >> 4).to(torch.float32)
            high = (packed >> 4).to(torch.float32)
            acc = acc + pairs[:, :, 0] @ low + pairs[:, :, 1] @ high
        out[tm, tn] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_window_of_computed_start_feeds_the_unpacked_product(loop_type):
    values, packed = _packed(256, 128, seed=1)
    a = torch.randn(16, 256, generator=torch.Generator().manual_seed(2))
    config = dict(block_sizes=[64, 8, 128], pallas_loop_type=loop_type)
    expected = a @ values.to(torch.float32)
    _, result = code_and_output(int4_matmul_split, (a, packed), **config)
    torch.testing.assert_close(result, expected, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(run_ref(int4_matmul_split, (a, packed), **config), expected, atol=1e-3, rtol=1e-3)


@pallasite.kernel
def doubled_windows(a: torch.Tensor) -> torch.Tensor:
    """Reads and writes through windows of computed start (a scatter through the window's
    index vector)."""
    m, k = a.shape
    out = torch.zeros_like(a)
    block_k = hl.register_block_size(k // 2)
    for tm in hl.tile(m):
        for tk in hl.tile(k // 2, block_size=block_k):
            start = tk.begin * 2
            out[tm, start:start + block_k * 2] = a[tm, start:start + block_k * 2] * 2.0
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_store_through_a_window_of_computed_start(loop_type):
    a = torch.randn(16, 256, generator=torch.Generator().manual_seed(3))
    config = dict(block_sizes=[64, 8], pallas_loop_type=loop_type)
    _, result = code_and_output(doubled_windows, (a,), **config)
    torch.testing.assert_close(result, a * 2.0)
    torch.testing.assert_close(run_ref(doubled_windows, (a,), **config), a * 2.0)


@pallasite.kernel
def windowed_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Both factors read through windows of the tile scaled by 2; the contracted axis is
    padded past twice the tile's valid rows when the last tile is partial."""
    m, k = a.shape
    n = b.size(1)
    out = torch.empty([m, n], dtype=torch.float32)
    block_k = hl.register_block_size(k // 2)
    for tm, tn in hl.tile([m, n]):
        acc = hl.zeros([tm, tn], dtype=torch.float32)
        for tk in hl.tile(k // 2, block_size=block_k):
            start = tk.begin * 2
            acc = acc + a[tm, start:start + block_k * 2] @ b[start:start + block_k * 2, tn]
        out[tm, tn] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_windows_of_a_partial_tile_are_padded_like_it(loop_type):
    gen = torch.Generator().manual_seed(4)
    a, b = torch.randn(16, 200, generator=gen), torch.randn(200, 128, generator=gen)  # 100 = 64 + 36
    values, packed = _packed(200, 128, seed=5)
    config = dict(block_sizes=[64, 8, 128], pallas_loop_type=loop_type)
    for kernel, args, expected in ((windowed_matmul, (a, b), a @ b),
                                   (int4_matmul_split, (a, packed), a @ values.to(torch.float32))):
        _, result = code_and_output(kernel, args, **config)
        torch.testing.assert_close(result, expected, atol=1e-3, rtol=1e-3)
        torch.testing.assert_close(run_ref(kernel, args, **config), expected, atol=1e-3, rtol=1e-3)
