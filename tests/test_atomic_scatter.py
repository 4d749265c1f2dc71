"""`hl.atomic_add/max/min` through an index tensor (issue 22: Helion's segment_reduction
adds rows into their segment ids): every lane reaches its row, duplicates within a tile
included, and programs never race (the scattered window is resident and the grid axes
that do not choose it run in order). The atomic returns the rows before the tile's update.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.plan.plans import Semantics
from pallasite.testing import code_and_output, run_ref

from plan_helpers import only_call


def _segments(n, count, seed=1):
    return torch.randint(0, count, (n,), generator=torch.Generator().manual_seed(seed), dtype=torch.int32)


@pallasite.kernel(config=pallasite.Config(block_sizes=[16]))
def segment_sum(out, x, segment):
    for tile in hl.tile(x.size(0)):
        hl.atomic_add(out, [segment[tile], slice(None)], x[tile, :])
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_rows_add_into_their_segments_with_duplicates_in_every_tile(dtype):
    x = torch.randint(-100, 100, (40, 128), generator=torch.Generator().manual_seed(0)).to(dtype)
    segment = _segments(40, 6)  # 40 rows into 6 segments, a partial last tile
    expected = torch.zeros(6, 128, dtype=dtype).index_add_(0, segment.long(), x)
    _, result = code_and_output(segment_sum, (torch.zeros(6, 128, dtype=dtype), x, segment))
    torch.testing.assert_close(result, expected)
    reference = torch.zeros(6, 128, dtype=dtype)
    run_ref(segment_sum, (reference, x, segment))
    torch.testing.assert_close(reference, expected)
    call = only_call(segment_sum, (torch.zeros(6, 128, dtype=dtype), x, segment))
    assert [axis.semantics for axis in call.grid] == [Semantics.ARBITRARY]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_lanes_are_summed_in_float32_and_rounded_once_into_their_row(dtype):
    """Trial NN: the lanes' float32 sum was rounded to the 16-bit dtype before the add into the
    row, a second rounding (12-16% of elements one ulp off on random data, in both modes); each
    row is now its old value plus its lanes' exact sum, rounded once (per tile, tiles in order)."""
    gen = torch.Generator().manual_seed(3)
    x, initial = torch.randn(40, 128, generator=gen).to(dtype), torch.randn(6, 128, generator=gen).to(dtype)
    segment = _segments(40, 6)
    expected = initial.clone()
    for first in range(0, 40, 16):  # block_sizes=[16]: a tile's lanes add up exactly in float32
        sums = torch.zeros(6, 128).index_add_(0, segment[first:first + 16].long(), x[first:first + 16].float())
        expected = (expected.float() + sums).to(dtype)
    _, result = code_and_output(segment_sum, (initial.clone(), x, segment))
    assert torch.equal(result, expected)
    reference = initial.clone()
    run_ref(segment_sum, (reference, x, segment))
    assert torch.equal(reference, expected)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 16]))
def segment_max_in_an_inner_loop(out, x, segment):
    for tile_c in hl.tile(x.size(1)):
        for tile in hl.tile(x.size(0)):
            hl.atomic_max(out, [segment[tile], tile_c], x[tile, tile_c])
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_atomic_max_into_segments_under_every_loop_type(loop_type):
    x = torch.randn(40, 16, generator=torch.Generator().manual_seed(2))
    segment = _segments(40, 5)
    start = torch.full((5, 16), -1.0)
    expected = start.clone().scatter_reduce_(0, segment.long()[:, None].expand(40, 16), x, reduce="amax")
    _, result = code_and_output(segment_max_in_an_inner_loop, (start.clone(), x, segment),
                                pallas_loop_type=loop_type)
    torch.testing.assert_close(result, expected)
    reference = start.clone()
    run_ref(segment_max_in_an_inner_loop, (reference, x, segment), pallas_loop_type=loop_type)
    torch.testing.assert_close(reference, expected)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8]))
def count_and_return_old(counts, before, segment):
    for tile in hl.tile(segment.size(0)):
        before[tile] = hl.atomic_add(counts, [segment[tile]], 1)
    return counts, before


def test_a_scalar_increment_counts_duplicates_and_returns_each_lanes_old_row():
    """Each lane gets the row as the lanes before it left it (the adds in lane order, one
    linearization of a GPU's atomics), so `slot = hl.atomic_add(counter, [bucket[t]], 1)` hands
    out distinct slots; every lane got the tile's old row, the same slot for all (trial II)."""
    segment = torch.tensor([0, 2, 2, 2, 1, 0, 2, 1, 1, 1], dtype=torch.int32)  # tiles of 8 and 2
    counts, before = code_and_output(count_and_return_old, (torch.zeros(3, dtype=torch.int32),
                                                            torch.zeros(10, dtype=torch.int32), segment))[1]
    assert counts.tolist() == [2, 4, 4]
    assert before.tolist() == [0, 0, 1, 2, 0, 1, 3, 1, 2, 3]
    reference = (torch.zeros(3, dtype=torch.int32), torch.zeros(10, dtype=torch.int32))
    run_ref(count_and_return_old, (*reference, segment))
    assert reference[0].tolist() == [2, 4, 4] and reference[1].tolist() == before.tolist()


@pallasite.kernel(config=pallasite.Config(block_sizes=[16, 128]))
def weighted_run_ends(ids, x, segments: int):
    """Sorted int64 segment ids, as torch makes them: the last row of each run counts twice.
    The next row's id is read through a masked load whose last lane would be past the end."""
    n, f = x.shape
    out = torch.zeros((segments, f), dtype=x.dtype, device=x.device)
    for tile_e, tile_f in hl.tile([n, f]):
        here = ids[tile_e]
        after = hl.load(ids, [tile_e.index + 1], extra_mask=tile_e.index < n - 1)
        weight = torch.where((here != after) | (tile_e.index == n - 1), 2.0, 1.0)
        hl.atomic_add(out, [here, tile_f], x[tile_e, tile_f] * weight[:, None])
    return out


def test_sorted_int64_segments_on_a_2d_grid():
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 12, (70,), generator=generator).sort()[0]  # int64
    x = torch.randn(70, 256, generator=generator)
    last = torch.ones(70)
    last[:-1] = torch.where(ids[:-1] != ids[1:], 2.0, 1.0)
    last[-1] = 2.0
    expected = torch.zeros(12, 256).index_add_(0, ids, x * last[:, None])
    _, result = code_and_output(weighted_run_ends, (ids, x, 12))
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(run_ref(weighted_run_ends, (ids, x, 12)), expected, atol=1e-5, rtol=1e-5)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 16]))
def segment_bits_in_an_inner_loop(ands, ors, xors, x, segment):
    for tile_c in hl.tile(x.size(1)):
        for tile in hl.tile(x.size(0)):
            v = x[tile, tile_c]
            hl.atomic_and(ands, [segment[tile], tile_c], v)
            hl.atomic_or(ors, [segment[tile], tile_c], v)
            hl.atomic_xor(xors, [segment[tile], tile_c], v)
    return ands, ors, xors


def _bitwise_segments(start, x, segment, combine):
    out = start.clone()
    for row, s in enumerate(segment.tolist()):
        out[s] = combine(out[s], x[row])
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_atomic_and_or_xor_combine_every_duplicate_under_every_loop_type(loop_type):
    """They commute like atomic_add: each lane's bits reach its row, duplicates within a tile
    included (they were refused through an index tensor). Scatters write 32-bit integers."""
    generator = torch.Generator().manual_seed(4)
    x = torch.randint(-2**31, 2**31 - 1, (37, 16), generator=generator, dtype=torch.int32)  # a partial last tile
    segment = _segments(37, 5, seed=5)
    starts = [torch.randint(-2**31, 2**31 - 1, (5, 16), generator=generator, dtype=torch.int32) for _ in range(3)]
    expected = [_bitwise_segments(start, x, segment, combine) for start, combine in
                zip(starts, (torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor))]
    _, compiled = code_and_output(segment_bits_in_an_inner_loop, (*(s.clone() for s in starts), x, segment),
                                  pallas_loop_type=loop_type)
    reference = [s.clone() for s in starts]
    run_ref(segment_bits_in_an_inner_loop, (*reference, x, segment), pallas_loop_type=loop_type)
    for want, got, ref in zip(expected, compiled, reference):
        assert torch.equal(got, want)
        assert torch.equal(ref, want)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def segment_sums_returning_old(x, segment, segments: int):
    out = torch.zeros((segments, x.size(1)), dtype=x.dtype, device=x.device)
    old = torch.empty_like(x)
    for tile_e, tile_f in hl.tile(list(x.shape)):
        old[tile_e, tile_f] = hl.atomic_add(out, [segment[tile_e], tile_f], x[tile_e, tile_f])
    return out, old


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_inf_or_nan_added_through_an_index_stays_in_its_own_row(dtype):
    """Trial II: lanes were summed by a one-hot matmul, where a lane that does not hit a row
    still multiplies its value by 0: an inf or NaN in one segment made every other segment
    of the tile NaN, in both modes (and on a TPU the matmul rounded float32 to bfloat16: the
    sums are products at HIGHEST precision now, whatever the kernel's dot_precision)."""
    x = torch.full((12, 130), 1.0, dtype=dtype)
    x[0, :] = float("inf")
    x[1, 0] = float("nan")
    x[2, 1] = -float("inf")
    x[5, :] = 0.1234567
    segment = torch.tensor([0, 0, 0, 1, 2, 3, 1, 2, 3, 1, 2, 3], dtype=torch.int32)
    expected = torch.zeros(4, 130, dtype=dtype).index_add_(0, segment, x)
    before, sums = torch.zeros(4, 130, dtype=dtype), []
    for i, row in enumerate(segment.tolist()):  # each lane's old row, the adds in lane order
        sums.append(before[row].clone())
        before[row] += x[i]
    code, (out, old) = code_and_output(segment_sums_returning_old, (x, segment, 4))
    assert "precision=lax.Precision.HIGHEST" in code  # the sums are exact on a TPU too
    for result, want in ((out, expected), (old, torch.stack(sums))):
        torch.testing.assert_close(result, want, equal_nan=True)
    ref_out, ref_old = run_ref(segment_sums_returning_old, (x, segment, 4))
    torch.testing.assert_close(ref_out, out, equal_nan=True, atol=0, rtol=0)
    torch.testing.assert_close(ref_old, old, equal_nan=True, atol=0, rtol=0)


@pallasite.kernel
def set_flags(idx: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    for t in hl.tile(idx.size(0)):
        hl.atomic_or(flags, [idx[t]], True)
    return flags


@pytest.mark.parametrize("dtype", [torch.bool, torch.int8, torch.int16])
def test_an_atomic_through_an_index_into_a_narrow_tensor_says_to_keep_it_in_int32(dtype):
    """Trial II: the refusal spoke of gathering (the prior rows' read), not of the atomic."""
    idx = torch.tensor([1, 3, 3, 5])
    for run in (lambda f: code_and_output(set_flags, (idx, f), block_sizes=[4]),
                lambda f: run_ref(set_flags, (idx, f), block_sizes=[4])):
        with pytest.raises(pallasite.exc.UnsupportedOperation,
                           match=r"hl.atomic_or through an index tensor into a tensor of "
                                 r"(bool|int8|int16)(.|\n)*Keep the target in int32(.|\n)*hl.atomic_or\(flags"):
            run(torch.zeros(16, dtype=dtype))
    _, out = code_and_output(set_flags, (idx, torch.zeros(16, dtype=torch.int32)), block_sizes=[4])
    assert out.tolist() == [0, 1, 0, 1, 0, 1] + [0] * 10
