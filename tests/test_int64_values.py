"""Integers torch computes in int64 (plan/int64_values.py, reference/int64.py).

Device integers are int32. An integer sum, prod, cumsum or cumprod, `.long()`, and the
integer arithmetic taking such a value on are int64 in torch: the kernel's int32 value is
torch's number while it fits int32, and interpret mode (like reference mode) checks that it
does where an op could leave int32, raising `exc.ShapeMismatch` at the line instead of
answering with a wrapped number. `x op= v` of an int32 x wraps as torch's does; a cast the
user writes to int32 ends the int64 value; sums of bools or bytes are proven, unchecked.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref

_BIG = 2**30


@pallasite.kernel
def row_sums(x):
    m, n = x.size()
    out = torch.zeros(m, dtype=torch.int64)
    for t in hl.tile(m):
        out[t] = x[t, :].sum(1)
    return out


@pallasite.kernel
def scaled_sums(x):
    m, n = x.size()
    out = torch.zeros(m, dtype=torch.float32)
    for t in hl.tile(m):
        s = x[t, :].sum(1)
        out[t] = (s * 1000).float()
    return out


def _both_modes(kernel, args, **config):
    _, compiled = code_and_output(kernel, args, **config)
    return compiled, run_ref(kernel, args, **config)


def _refused_in_both_modes(kernel, args, line: str, **config) -> None:
    with pytest.raises(exc.ShapeMismatch, match="torch computes it in int64") as compiled:
        code_and_output(kernel, args, **config)
    assert line in str(compiled.value)
    with pytest.raises(exc.ShapeMismatch, match="torch computes it in int64") as reference:
        run_ref(kernel, args, **config)
    assert line in str(reference.value)


def test_a_sum_stored_into_an_int64_tensor_is_torchs_number_or_an_error():
    """An int32 sum wrapped silently where torch's int64 sum holds 2**32 (both modes gave 0)."""
    small = torch.randint(-1000, 1000, (13, 7), dtype=torch.int32)
    for result in _both_modes(row_sums, (small,)):
        torch.testing.assert_close(result, small.sum(1))
    _refused_in_both_modes(row_sums, (torch.full((13, 4), _BIG, dtype=torch.int32),), "x[t, :].sum(1)")


def test_arithmetic_on_an_int64_value_is_checked_where_it_could_leave_int32():
    """The sum fits; its product with 1000 does not, in torch's int64 it is exact."""
    fits = torch.full((8, 4), 5, dtype=torch.int32)
    for result in _both_modes(scaled_sums, (fits,)):
        torch.testing.assert_close(result, (fits.sum(1) * 1000).float())
    _refused_in_both_modes(scaled_sums, (torch.full((8, 4), 2**20, dtype=torch.int32),), "(s * 1000)")


@pallasite.kernel
def counted_in_place(x):
    m, n = x.size()
    out = torch.zeros(m, dtype=torch.int32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.int32)
        for tn in hl.tile(n):
            acc += x[tm, tn].sum(1)
        out[tm] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_an_int32_accumulator_updated_in_place_wraps_as_torchs(loop_type):
    """`acc += s` keeps acc's int32 in torch: past int32 it wraps there too, no error."""
    x = torch.full((8, 256), 2**23, dtype=torch.int32)  # 128 * 2**23 = 2**30 per tile: each sum fits,
    # the total (2**31) wraps
    expected = torch.zeros(8, dtype=torch.int32)
    for block in x.split(128, dim=1):
        expected += block.sum(1)
    for result in _both_modes(counted_in_place, (x,), block_sizes=[8, 128], pallas_loop_type=loop_type):
        torch.testing.assert_close(result, expected)


@pallasite.kernel
def carried_total(x):
    m, n = x.size()
    out = torch.zeros(m, dtype=torch.int64)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.int32)
        for tn in hl.tile(n):
            acc = acc + x[tm, tn].sum(1)  # torch: acc becomes int64
        out[tm] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_an_accumulator_torch_widens_is_checked_through_the_loop(loop_type):
    small = torch.randint(-50, 50, (8, 300), dtype=torch.int32)
    for result in _both_modes(carried_total, (small,), block_sizes=[8, 128], pallas_loop_type=loop_type):
        torch.testing.assert_close(result, small.sum(1))
    big = torch.full((8, 300), 2**23, dtype=torch.int32)  # each tile fits, the total does not
    _refused_in_both_modes(carried_total, (big,), "acc = acc + x[tm, tn].sum(1)", block_sizes=[8, 128],
                           pallas_loop_type=loop_type)


@pallasite.kernel
def scans_and_casts(x):
    m, n = x.size()
    prefix = torch.zeros([m, n], dtype=torch.int64)
    wrapped = torch.zeros([m], dtype=torch.int32)
    for t in hl.tile(m):
        v = x[t, :]
        prefix[t, :] = torch.cumsum(v, 1)
        wrapped[t] = v.sum(1, dtype=torch.int32)
    return prefix, wrapped


def test_a_cumsum_is_checked_and_a_sum_in_int32_wraps_as_torch():
    x = torch.randint(-100, 100, (9, 33), dtype=torch.int32)
    for prefix, wrapped in _both_modes(scans_and_casts, (x,)):
        torch.testing.assert_close(prefix, torch.cumsum(x, 1))
        torch.testing.assert_close(wrapped, x.sum(1, dtype=torch.int32))
    big = torch.full((9, 33), 2**27, dtype=torch.int32)  # 16 lanes reach 2**31
    _refused_in_both_modes(scans_and_casts, (big,), "torch.cumsum(v, 1)")


@pallasite.kernel
def wrapped_sum(x):
    m, n = x.size()
    out = torch.zeros([m], dtype=torch.int32)
    for t in hl.tile(m):
        out[t] = x[t, :].sum(1, dtype=torch.int32)
    return out


def test_a_sum_asked_for_in_int32_wraps_without_error():
    x = torch.full((8, 4), _BIG, dtype=torch.int32)
    for result in _both_modes(wrapped_sum, (x,)):
        torch.testing.assert_close(result, x.sum(1, dtype=torch.int32))


@pallasite.kernel
def long_products(x, y):
    out = torch.zeros(x.size(0), dtype=torch.int64)
    for t in hl.tile(x.size(0)):
        out[t] = x[t].long() * y[t].long() // 7
    return out


def test_long_values_multiply_as_int64_or_raise():
    x, y = torch.randint(-3000, 3000, (300,), dtype=torch.int32), torch.randint(-3000, 3000, (300,), dtype=torch.int32)
    for result in _both_modes(long_products, (x, y)):
        torch.testing.assert_close(result, x.long() * y.long() // 7)
    big = torch.full((300,), 2**20, dtype=torch.int32)
    _refused_in_both_modes(long_products, (big, big), "x[t].long() * y[t].long()")


@pallasite.kernel
def mask_counts(x):
    m, n = x.size()
    counts = torch.zeros([m], dtype=torch.int64)
    means = torch.zeros([m], dtype=torch.float32)
    for t in hl.tile(m):
        v = x[t, :]
        positive = (v > 0).sum(1)
        counts[t] = positive + (v < 0).int().sum(1)
        means[t] = v.sum(1).float() / n
    return counts, means


def test_sums_of_bools_are_proven_and_not_checked():
    """Counting a mask cannot leave int32: no check is generated for it (only for v.sum)."""
    x = torch.randint(-9, 9, (20, 50), dtype=torch.int32)
    code, (counts, means) = code_and_output(mask_counts, (x,))
    torch.testing.assert_close(counts, (x != 0).sum(1))
    torch.testing.assert_close(means, x.sum(1).float() / 50)
    assert code.count("CHECKS.fits_int32(") == 1
    ref_counts, ref_means = run_ref(mask_counts, (x,))
    torch.testing.assert_close(ref_counts, counts)
    torch.testing.assert_close(ref_means, means)


@pallasite.kernel
def partial_tile_sums(x):
    m, n = x.size()
    out = torch.zeros([m], dtype=torch.int64)
    for t in hl.tile(m, block_size=8):
        out[t] = x[t, :].prod(1) - x[t, :].sum(1)
    return out


def test_a_partial_tiles_padding_never_decides_the_check():
    """13 rows in tiles of 8: the last tile's padding rows hold no data (a product's fill is 1)."""
    x = torch.randint(1, 4, (13, 6), dtype=torch.int32)
    for result in _both_modes(partial_tile_sums, (x,)):
        torch.testing.assert_close(result, x.prod(1) - x.sum(1))


@pallasite.kernel
def int64_matmul(x, y):
    out = torch.zeros([x.size(0), y.size(1)], dtype=torch.int32)
    for tm, tn in hl.tile([x.size(0), y.size(1)]):
        out[tm, tn] = (torch.matmul(x[tm, :].long(), y[:, tn].long())).to(torch.int32)
    return out


def test_a_contraction_of_int64_values_is_refused_in_both_modes():
    x, y = torch.ones(8, 16, dtype=torch.int32), torch.ones(16, 128, dtype=torch.int32)
    with pytest.raises(exc.UnsupportedDtype, match="no exact check"):
        code_and_output(int64_matmul, (x, y))
    with pytest.raises(exc.UnsupportedDtype, match="no exact check"):
        run_ref(int64_matmul, (x, y))


@pallasite.kernel
def doubled_row_sums(x):
    m, n = x.size()
    out = torch.zeros([m], dtype=torch.int64)
    for t in hl.tile(m):
        v = x[t, :] * 2
        out[t] = v.sum(1)
    return out


def test_a_checked_sum_does_not_run_as_a_loop_over_chunks():
    """reduction_loops computed the sum chunk by chunk without its check (8.4e9 wrapped silently)."""
    x = torch.full((16, 1000), 2**22, dtype=torch.int32)
    with pytest.raises(exc.BackendUnsupported, match="torch holds in int64"):
        code_and_output(doubled_row_sums, (x,), block_sizes=[8], reduction_loops=[256])
    small = torch.randint(-100, 100, (16, 1000), dtype=torch.int32)
    _, out = code_and_output(doubled_row_sums, (small,), block_sizes=[8], reduction_loops=[None])
    torch.testing.assert_close(out, (small * 2).sum(1))


@pallasite.kernel
def views_of_sums(x):
    m, n = x.size()
    out = torch.zeros([m, n], dtype=torch.int64)
    for t in hl.tile(m):
        s = x[t, :].sum(1)
        out[t, :] = s[:, None] * 4 + x[t, :].sum(1, dtype=torch.int64)[:, None]
    return out


def test_a_view_of_an_int64_value_is_checked_in_both_modes():
    """Reference mode lost the int64 mark through `s[:, None]` and wrapped silently (trial W)."""
    small = torch.randint(-50, 50, (8, 7), dtype=torch.int32)
    for result in _both_modes(views_of_sums, (small,)):
        torch.testing.assert_close(result, (small.sum(1) * 5)[:, None].expand(8, 7))
    _refused_in_both_modes(views_of_sums, (torch.full((8, 7), 2**28, dtype=torch.int32),), "s[:, None] * 4")


@pallasite.kernel
def hl_scans(x):
    m, n = x.size()
    out = torch.zeros([m, n], dtype=torch.int64)
    for t in hl.tile(m):
        out[t, :] = hl.cumsum(x[t, :], 1) + hl.cumsum(x[t, :], 1, reverse=True)
    return out


def test_hl_cumsum_holds_torchs_int64_as_torch_cumsum():
    """hl.cumsum is torch.cumsum of a tile: it wrapped silently in both modes (trial W)."""
    small = torch.randint(-50, 50, (4, 9), dtype=torch.int32)
    for result in _both_modes(hl_scans, (small,)):
        torch.testing.assert_close(result, small.cumsum(1) + small.flip(1).cumsum(1).flip(1))
    _refused_in_both_modes(hl_scans, (torch.full((4, 9), 2**28, dtype=torch.int32),), "hl.cumsum(x[t, :], 1)")


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def int64_accumulator(x):
    m, n = x.size()
    out = torch.zeros([m], dtype=torch.int64)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.int64)
        for tn in hl.tile(n):
            acc += x[tm, tn].sum(1)
        out[tm] = acc
    return out


def test_an_int64_accumulator_holds_torchs_numbers_or_raises():
    """hl.zeros(..., dtype=torch.int64) was refused compiled and wrapped in reference mode (trial W)."""
    small = torch.randint(-1000, 1000, (8, 300), dtype=torch.int32)
    for result in _both_modes(int64_accumulator, (small,)):
        torch.testing.assert_close(result, small.sum(1))
    _refused_in_both_modes(int64_accumulator, (torch.full((8, 300), 2**23, dtype=torch.int32),), "acc += x[tm, tn]")


@pallasite.kernel
def int8_sums_in_wider_dtypes(x):
    m, n = x.size()
    out = torch.zeros([m], dtype=torch.int64)
    for t in hl.tile(m):
        out[t] = x[t, :].sum(1, dtype=torch.int32) + x[t, :].sum(1, dtype=torch.int64)
    return out


def test_sum_with_a_dtype_of_another_width():
    """`.sum(1, dtype=torch.int64)` recursed without end (the cast's int32 never matched int64)."""
    x = torch.randint(-100, 100, (8, 50), dtype=torch.int8)
    for result in _both_modes(int8_sums_in_wider_dtypes, (x,)):
        torch.testing.assert_close(result, x.sum(1, dtype=torch.int64) * 2)


@pallasite.kernel
def hashes(x, table):
    m, n = x.size()
    folded = torch.zeros([m], dtype=torch.int32)
    stored = torch.zeros([m], dtype=torch.int32)
    looked_up = torch.zeros([m], dtype=torch.float32)
    for t in hl.tile(m):
        h = (x[t, :].long() * 65599).sum(1)
        folded[t] = (h * 31 + 7).to(torch.int32)
        stored[t] = h ^ (h << 3)
        looked_up[t] = table[h & 1023] + table[h % 512]
    return folded, stored, looked_up


def _hashes_in_torch(x, table):
    h = (x.long() * 65599).sum(1)
    return (h * 31 + 7).to(torch.int32), (h ^ (h << 3)).to(torch.int32), table[h & 1023] + table[h % 512]


def test_a_hash_narrowed_to_int32_is_torchs_even_past_int32():
    """A value torch holds in int64 that only `+`, `*`, sums, bitwise ops take on to a cast to
    int32, an int32 store or a mask by a literal is torch's answer wrapped: these raised
    "past int32" in both modes (trial X's hashes and checksums)."""
    x = torch.randint(0, 2**30, (16, 40), dtype=torch.int32)
    table = torch.randn(1024)
    expected = _hashes_in_torch(x, table)
    assert (x.long() * 65599).sum(1).abs().max() > 2**40  # far past int32 in torch
    for result in _both_modes(hashes, (x, table)):
        for got, want in zip(result, expected):
            torch.testing.assert_close(got, want)


@pallasite.kernel
def hash_then_compare(x):
    m, n = x.size()
    stored = torch.zeros([m], dtype=torch.int32)
    positive = torch.zeros([m], dtype=torch.bool)
    for t in hl.tile(m):
        h = x[t, :].sum(1) * 65599
        stored[t] = h
        positive[t] = h > 0
    return stored, positive


@pallasite.kernel
def hash_bucket(x, table):
    m, n = x.size()
    out = torch.zeros([m], dtype=torch.float32)
    for t in hl.tile(m):
        h = x[t, :].sum(1) * 65599
        out[t] = table[h % 1000]
    return out


def test_a_use_needing_torchs_number_still_raises_at_the_ops_line():
    """A comparison or an index by a remainder that is not a power of two needs torch's int64
    number: past int32 both modes raise at the line making it, not at the use."""
    small = torch.randint(-100, 100, (8, 16), dtype=torch.int32)
    for stored, positive in _both_modes(hash_then_compare, (small,)):
        torch.testing.assert_close(stored, (small.sum(1) * 65599).to(torch.int32))
        torch.testing.assert_close(positive, small.sum(1) * 65599 > 0)
    big = torch.full((8, 16), 2**24, dtype=torch.int32)
    _refused_in_both_modes(hash_then_compare, (big,), "h = x[t, :].sum(1) * 65599")
    _refused_in_both_modes(hash_bucket, (big, torch.randn(1000)), "h = x[t, :].sum(1) * 65599")


@pallasite.kernel
def carried_checksum(x):
    m, n = x.size()
    out = torch.zeros(m, dtype=torch.int32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.int32)
        for tn in hl.tile(n):
            acc = acc * 31 + x[tm, tn].sum(1)  # torch: acc becomes int64 at the first step
        out[tm] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_checksum_carried_through_a_loop_wraps_as_torch_at_the_int32_store(loop_type):
    x = torch.randint(0, 2**30, (8, 512), dtype=torch.int32)
    expected = torch.zeros(8, dtype=torch.int64)
    for block in x.split(128, dim=1):
        expected = expected * 31 + block.sum(1)
    for result in _both_modes(carried_checksum, (x,), block_sizes=[8, 128], pallas_loop_type=loop_type):
        torch.testing.assert_close(result, expected.to(torch.int32))


@pallasite.kernel
def floats_to_long(xf):
    n = xf.size(0)
    out = torch.zeros(n, dtype=torch.int64)
    bucket = torch.zeros(n, dtype=torch.int32)
    for t in hl.tile(n):
        v = xf[t].long()
        out[t] = v
        bucket[t] = v & 1023
    return out, bucket


def test_a_float_cast_to_int64_past_int32_raises_rather_than_saturate():
    """`.long()` of 3e9 saturated to 2**31 - 1 in both modes (trial Y), where torch's int64 is
    exact: the kernel's cast saturates, which is not torch's number wrapped, so every use needs it."""
    fits = torch.tensor([3.7, -3.7, 2.0**30, 5.0, 1e9, 0.0, 7.0, -1.0])
    for out, bucket in _both_modes(floats_to_long, (fits,)):
        torch.testing.assert_close(out, fits.long())
        torch.testing.assert_close(bucket, (fits.long() & 1023).to(torch.int32))
    for past in (3e9, float("nan"), float("-inf")):
        _refused_in_both_modes(floats_to_long, (torch.tensor([1.0, past]),), "v = xf[t].long()")


@pallasite.kernel
def masks_and_identities(x, table):
    m, n = x.size()
    looked_up = torch.zeros([m], dtype=torch.float32)
    pairs = torch.zeros([m, 2], dtype=torch.int32)
    for t in hl.tile(m):
        h = (x[t, :].long() * 40503).sum(1)
        looked_up[t] = table[1023 & h] + table[torch.bitwise_and(h, other=511)] + table[torch.remainder(h, other=256)]
        pairs[t, :] = torch.stack([h.floor(), torch.nan_to_num(h) * 3], 1)
    return looked_up, pairs


def test_masks_either_side_keywords_stacks_and_integer_identities_wrap_as_torch():
    """`1023 & h` raised compiled, `torch.bitwise_and(h, other=511)` raised in reference mode,
    `torch.stack([h, h * 3], 1)` and `h.floor()` into int32 raised compiled (trial Y)."""
    x = torch.randint(-2**31, 2**31 - 1, (16, 64), dtype=torch.int32)
    table = torch.randn(1024)
    h = (x.long() * 40503).sum(1)
    expected = (table[1023 & h] + table[h & 511] + table[h % 256], torch.stack([h, h * 3], 1).to(torch.int32))
    for result in _both_modes(masks_and_identities, (x, table)):
        for got, want in zip(result, expected):
            torch.testing.assert_close(got, want)


def test_the_error_names_the_use_that_needs_torchs_number():
    big = torch.full((8, 16), 2**24, dtype=torch.int32)
    for run in (lambda: code_and_output(hash_then_compare, (big,)), lambda: run_ref(hash_then_compare, (big,))):
        with pytest.raises(exc.ShapeMismatch, match="a comparison at line") as info:
            run()
        assert "positive[t] = h > 0" in str(info.value)


@pallasite.kernel
def knuth_hashes(x):
    m, n = x.size()
    folded = torch.zeros([m], dtype=torch.int32)
    mixed = torch.zeros([m, n], dtype=torch.int32)
    for t in hl.tile(m):
        folded[t] = (x[t, :].long() * 2654435761).sum(1)
        mixed[t, :] = (x[t, :] * 2654435761) & 0xFFFFFFFF ^ 3000000000
    return folded, mixed


@pallasite.kernel
def scaled_counts(x):
    m, n = x.size()
    out = torch.zeros([m], dtype=torch.int64)
    for t in hl.tile(m):
        out[t] = (x[t, :] & 3).sum(1) * 3000000000
    return out


def test_numbers_past_int32_in_ring_ops_are_torchs_wrapped_or_checked():
    """Knuth's `h * 2654435761` and `& 0xFFFFFFFF` were refused ("does not fit int32", trial Y):
    in +, -, *, &, |, ^ a number is used wrapped to 32 bits, torch's answer where it wraps, and
    the int64 check recomputes with the number itself where a use needs torch's number."""
    x = torch.randint(-2**31, 2**31 - 1, (16, 64), dtype=torch.int32)
    expected = ((x.long() * 2654435761).sum(1).to(torch.int32), (x * 2654435761) & 0xFFFFFFFF ^ 3000000000)
    for result in _both_modes(knuth_hashes, (x,)):
        for got, want in zip(result, expected):
            torch.testing.assert_close(got, want)
    fours = torch.full((16, 64), 4, dtype=torch.int32)  # & 3 is 0: the int64 product 0 fits
    for result in _both_modes(scaled_counts, (fours,)):
        torch.testing.assert_close(result, torch.zeros(16, dtype=torch.int64))
    _refused_in_both_modes(scaled_counts, (x,), "out[t] = (x[t, :] & 3).sum(1) * 3000000000")


@pallasite.kernel
def hashed_by(x, s: int):
    out = torch.zeros_like(x)
    for t in hl.tile(x.size(0)):
        out[t, :] = (x[t, :] * s) & 0xFFFF ^ (x[t, :] - s)
    return out


def test_an_int_argument_past_int32_is_a_constant_of_the_variant():
    """`h * s` with s = 2654435761 passed as an argument was a KernelArgumentError compiled
    ("past int32: a scalar argument is an int32") where torch and reference mode wrap (trial
    Y): no int32 scalar holds it, so it is a constant of the variant (as hl.specialize makes
    it), which ring ops use wrapped as they do a literal; past int64 torch refuses it too."""
    x = torch.randint(-2**31, 2**31 - 1, (16, 64), dtype=torch.int32)
    for s in (2654435761, -3000000000, 12345):
        expected = (x * s) & 0xFFFF ^ (x - s)
        for result in _both_modes(hashed_by, (x, s)):
            torch.testing.assert_close(result, expected)
    with pytest.raises(exc.KernelArgumentError, match="past int64"):
        hashed_by(x, 2**64)


def _add(a, b):
    return a + b


@pallasite.kernel
def scanned_and_bounded(x, out):
    flags = torch.zeros(x.shape, dtype=torch.bool)
    for g in hl.grid(x.size(0)):
        flags[g, :] = hl.associative_scan(_add, x[g, :].long(), 0) > 0
        total = x[g, :].sum()
        for u in hl.grid(total):
            out[g, u] = total.reshape(1).size(0) * 1.0  # a shape query needs no number
    return flags, out


def test_reference_mode_checks_scans_and_loop_bounds_of_int64_values_as_compiled():
    """hl.associative_scan of .long() values wrapped silently in reference mode, and a loop
    bound torch holds in int64 ran range(wrapped) there; compiled raised (trial AA). A shape
    query of such a value needs no number (`v.size(0)` raised "size ... needs the number")."""
    small = torch.randint(0, 2, (4, 8), dtype=torch.int32)
    expected = (torch.arange(8)[None, :] < small.sum(1)[:, None]).float()
    for flags, out in _both_modes(scanned_and_bounded, (small, torch.zeros(4, 8))):
        torch.testing.assert_close(flags, small.long().cumsum(1) > 0)
        torch.testing.assert_close(out, expected)
    big = torch.full((4, 8), 2**30, dtype=torch.int32)
    for run in (lambda: code_and_output(scanned_and_bounded, (big, torch.zeros(4, 8))),
                lambda: run_ref(scanned_and_bounded, (big, torch.zeros(4, 8)))):
        with pytest.raises(exc.ShapeMismatch, match="torch computes it in int64"):
            run()


@pallasite.kernel
def masked_hashes(x, mask: int, buckets: int):
    out = torch.empty([2, x.size(0)], dtype=torch.int32)
    for t in hl.tile(x.size(0)):
        h = (x[t, :].long() * 1000003).sum(1)
        out[0, t] = ((h & mask) > 512).to(torch.int32)
        out[1, t] = (h % buckets == 3).to(torch.int32)
    return out


def test_a_mask_or_power_of_two_modulus_from_an_int_argument_takes_the_low_bits():
    """Trial Y: `h & mask` with mask an int argument was refused compiled (the mask's sign was
    unknown, so the comparison needed h's number past int32) where reference mode answered:
    beside a value torch holds in int64 the argument is a constant of the variant."""
    x = torch.randint(0, 1 << 20, (16, 64), dtype=torch.int32)
    h = (x.long() * 1000003).sum(1)
    for mask, buckets in ((1023, 256), (0x7FFF, 4096)):
        expected = torch.stack([((h & mask) > 512).int(), (h % buckets == 3).int()])
        for result in _both_modes(masked_hashes, (x, mask, buckets)):
            torch.testing.assert_close(result, expected)
