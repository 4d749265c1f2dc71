"""Host code around the device loops: broadcasts, gathers, assignments, early returns, views.

Host code runs once per call on whole tensors (JAX arrays in the generated
host function); each kernel here is checked against eager PyTorch.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import check_tpu_lowering, run_ref
from plan_helpers import names, only_call, randn


def rows(n: int, *picks: int) -> torch.Tensor:
    return torch.tensor(picks, dtype=torch.int32) % n


# ------------------------------------------------------ broadcast_tensors --


@pallasite.kernel
def add_broadcast(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a, b = torch.broadcast_tensors(x, y)
    m, n = a.size()
    out = torch.empty_like(a)
    for t in hl.tile(m, block_size=8):
        out[t, :] = a[t, :] * 2 + b[t, :]
    return out


def test_broadcast_tensors_in_host_code():
    x, y = randn(16, 1, seed=1), randn(1, 256, seed=2)
    torch.testing.assert_close(add_broadcast(x, y), x * 2 + y)
    check_tpu_lowering(add_broadcast, (x, y))


def test_broadcast_tensors_of_incompatible_shapes():
    with pytest.raises(exc.ShapeMismatch, match="broadcast_tensors"):
        add_broadcast(randn(16, 3), randn(1, 256))


# --------------------------------------------------------- host gathers --


@pallasite.kernel
def gather_rows_then_scale(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    picked = x[idx]
    out = torch.empty_like(picked)
    for t in hl.tile(picked.size(0), block_size=8):
        out[t, :] = picked[t, :] * 3
    return out


def test_indexing_with_an_index_tensor_before_the_loop():
    x, idx = randn(16, 256, seed=3), rows(16, 3, 3, 0, 15, -1, 7, 2, 9)
    torch.testing.assert_close(gather_rows_then_scale(x, idx), x[idx] * 3)
    check_tpu_lowering(gather_rows_then_scale, (x, idx))


def test_an_out_of_range_host_index_is_an_error_not_a_clamp():
    x, idx = randn(16, 256), torch.tensor([0, 1, 16, 2, 3, 4, 5, 6], dtype=torch.int32)
    with pytest.raises(exc.ShapeMismatch, match="16") as info:
        gather_rows_then_scale(x, idx)
    assert "picked = x[idx]" in str(info.value)


@pallasite.kernel
def columns_after_the_loop(x: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0), block_size=8):
        out[t, :] = torch.exp(x[t, :])
    return out[:, cols]


def test_indexing_with_an_index_tensor_after_the_loop():
    x, cols = randn(8, 256, seed=4), rows(256, 5, 0, 255, 17)
    torch.testing.assert_close(columns_after_the_loop(x, cols), torch.exp(x)[:, cols])


@pallasite.kernel
def gather_by_computed_order(x: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    n = x.size(0)
    shifted = (order + 1) % n  # index values computed in host code
    picked = x[shifted]
    out = torch.empty_like(x)
    for g in hl.grid(n):
        out[g, :] = picked[g, :] + x[shifted[g], :]  # and read by device code
    return out


def test_host_computed_tensors_as_gather_indices():
    x, order = randn(8, 128, seed=5), rows(8, 7, 6, 5, 4, 3, 2, 1, 0)
    shifted = (order + 1) % 8
    torch.testing.assert_close(gather_by_computed_order(x, order), x[shifted] * 2)
    check_tpu_lowering(gather_by_computed_order, (x, order))


@pallasite.kernel
def select_with_mask(x: torch.Tensor) -> torch.Tensor:
    y = x[x > 0]
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t]
    return out


def test_a_boolean_mask_in_host_code_says_what_to_write():
    with pytest.raises(exc.IndexingError, match="torch.where") as info:
        select_with_mask(randn(128))
    assert "y = x[x > 0]" in str(info.value)


# ----------------------------------------------------- host assignments --


@pallasite.kernel
def patch_after_the_loop(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0), block_size=8):
        out[t, :] = x[t, :] * 2
    out[0] = 0
    out[1:3] = 1.0
    out[:, -1] = x[:, 0]
    return out


def test_assigning_into_a_host_tensor_after_the_loop():
    x = randn(16, 256, seed=6)
    expected = x * 2
    expected[0] = 0
    expected[1:3] = 1.0
    expected[:, -1] = x[:, 0]
    torch.testing.assert_close(patch_after_the_loop(x), expected)
    check_tpu_lowering(patch_after_the_loop, (x,))


@pallasite.kernel
def seed_then_fill(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m + 8, n], dtype=x.dtype)
    out[m:] = -1.0  # written in host code: the loop below keeps it
    for t in hl.tile(m, block_size=8):
        out[t, :] = x[t, :]
    return out


def test_assigning_into_a_host_tensor_before_the_loop():
    x = randn(16, 256, seed=7)
    torch.testing.assert_close(seed_then_fill(x), torch.cat([x, torch.full((8, 256), -1.0)]))
    call = only_call(seed_then_fill, (x,))
    assert names(call.outputs) == ["out"] and call.aliases  # updated in place, not a pure output


@pallasite.kernel
def zero_rows_in_place(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    x[idx] = 0.0
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0), block_size=8):
        out[t, :] = x[t, :] + 1
    return out


def test_assigning_into_an_argument_updates_the_callers_tensor():
    x, idx = randn(16, 256, seed=8), rows(16, 2, 5, -1)
    expected = x.clone()
    expected[idx] = 0.0
    torch.testing.assert_close(zero_rows_in_place(x, idx), expected + 1)
    torch.testing.assert_close(x, expected)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128, 8, 128]))
def augmented_in_host_code(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    x += 1.0  # the caller's x changes, as in torch
    alias = y
    alias *= 2.0  # y itself
    flat = x.view(-1)
    flat -= 0.25  # x, through a view
    out = torch.empty_like(x)
    for tm, tn in hl.tile([m, n]):
        out[tm, tn] = x[tm, tn] + y[tm, tn]
    same = out
    same += 3.0  # after the last loop: the returned tensor
    for tm, tn in hl.tile([m, n]):
        y[tm, tn] = y[tm, tn] + out[tm, tn]
    return out


def test_augmented_assignment_in_host_code_updates_the_tensor_in_place():
    """`x op= v` on a host tensor is torch's in-place update: the caller's argument, every
    other name and every view of it see it (trial M: `x += 1` reached later loops through
    the name x only; the caller's x, `v = x.view(-1); v += 1` and `z = x; z += 1` did not)."""
    x, y = randn(16, 256, seed=21), randn(16, 256, seed=22)
    xc, yc, xr, yr = x.clone(), y.clone(), x.clone(), y.clone()
    out = augmented_in_host_code(xc, yc)
    ref = run_ref(augmented_in_host_code, [xr, yr])
    expected_x = x + 0.75
    expected_out = expected_x + 2 * y + 3.0
    for got in (out, ref):
        torch.testing.assert_close(got, expected_out)
    for got_x, got_y in ((xc, yc), (xr, yr)):
        torch.testing.assert_close(got_x, expected_x)
        torch.testing.assert_close(got_y, 2 * y + expected_out)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128, 8, 128]))
def in_place_methods(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    tmp = torch.empty_like(x)
    for tm, tn in hl.tile([m, n]):
        tmp[tm, tn] = x[tm, tn] + 5.0
    tmp.data.add_(y, alpha=2.0)
    tmp.sub_(1.0).mul_(3.0)
    tmp.div_(2.0, rounding_mode="floor")
    y.real.copy_(tmp[0])  # every row of y: tmp's first row, broadcast
    x.zero_()
    out = torch.empty_like(x)
    out.fill_(0.5)
    for tm, tn in hl.tile([m, n]):
        out[tm, tn] = out[tm, tn] + tmp[tm, tn] + x[tm, tn]
    return out


def test_in_place_methods_in_host_code():
    """zero_, fill_, copy_, add_ (alpha), sub_, mul_, div_ (rounding_mode) and .data/.real in
    host code, as torch runs them (trial M: refused, or a raw TypeError for x.data)."""
    x, y = randn(16, 256, seed=23), randn(16, 256, seed=24)
    expected_tmp = torch.div(((x + 5.0 + 2.0 * y) - 1.0) * 3.0, 2.0, rounding_mode="floor")
    xc, yc, xr, yr = x.clone(), y.clone(), x.clone(), y.clone()
    for got, got_x, got_y in ((in_place_methods(xc, yc), xc, yc), (run_ref(in_place_methods, [xr, yr]), xr, yr)):
        torch.testing.assert_close(got, expected_tmp + 0.5)
        torch.testing.assert_close(got_x, torch.zeros_like(x))
        torch.testing.assert_close(got_y, expected_tmp[0].expand_as(y))


def test_augmented_assignment_torch_refuses_is_refused():
    @pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
    def int_plus_float(x: torch.Tensor) -> torch.Tensor:
        x += 1.5
        out = torch.empty_like(x)
        for tm, tn in hl.tile(list(x.shape)):
            out[tm, tn] = x[tm, tn]
        return out

    with pytest.raises(exc.ShapeMismatch, match="does not cast to x's torch.int32"):
        int_plus_float(torch.zeros(8, 128, dtype=torch.int32))


@pallasite.kernel
def scatter_rows(x: torch.Tensor, idx: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for t in hl.tile(x.size(0), block_size=8):
        out[t, :] = x[t, :]
    out[idx, :] = values
    return out


def test_scattering_rows_with_an_index_tensor():
    x, idx, values = randn(16, 128, seed=9), rows(16, 1, 4, 9), randn(3, 128, seed=10)
    expected = x.clone()
    expected[idx, :] = values
    torch.testing.assert_close(scatter_rows(x, idx, values), expected)


@pallasite.kernel
def runtime_row_and_lists(x: torch.Tensor, i: int, alpha: float, idx: torch.Tensor) -> torch.Tensor:
    row = x[i]
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0), block_size=8):
        out[t, :] = x[t, :] + row[None, :]
    out[i] = alpha
    out[idx] += 1
    out[[0, 2], 1] = 7
    return out


@pytest.mark.parametrize("i", [3, -2])
def test_host_indices_by_runtime_scalars_lists_and_augmented_assignment(i):
    x, idx = randn(16, 128, seed=19), rows(16, 1, 3, 5)
    expected = x + x[i][None, :]
    expected[i] = 2.5
    expected[idx] += 1
    expected[[0, 2], 1] = 7
    torch.testing.assert_close(runtime_row_and_lists(x, i, 2.5, idx), expected)


def test_an_out_of_range_runtime_scalar_index_in_host_code():
    with pytest.raises(exc.ShapeMismatch, match="scalar 'i' holds 16"):
        runtime_row_and_lists(randn(16, 128), 16, 2.5, rows(16, 1))


@pallasite.kernel
def write_through_reshape(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros([4, 64], dtype=x.dtype)
    flat = out.view(256)
    flat[0:2] = 5.0
    for t in hl.tile(4, block_size=4):
        out[t, :] = out[t, :] + x[t, :]
    return out


def test_assigning_into_a_reshape_view_writes_its_base():
    x = randn(4, 64, seed=11)
    expected = x.clone()
    expected[0, 0:2] += 5.0
    torch.testing.assert_close(write_through_reshape(x), expected)


@pallasite.kernel
def clone_is_a_copy(x: torch.Tensor) -> torch.Tensor:
    before = x.clone()
    for t in hl.tile(x.size(0), block_size=128):
        x[t] = x[t] * 2
    return before


def test_a_clone_keeps_the_values_it_copied():
    x = randn(256, seed=12)
    original = x.clone()
    torch.testing.assert_close(clone_is_a_copy(x), original)
    torch.testing.assert_close(x, original * 2)


@pallasite.kernel
def write_through_transpose(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    out.t()[0] = 1.0
    return out


@pallasite.kernel
def store_wrong_shape(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    out[0:2] = x[0:3]
    return out


@pytest.mark.parametrize("kernel, error, words, line", [
    (write_through_transpose, exc.UnsupportedOperation, "Write the base tensor", "out.t()[0] = 1.0"),
    (store_wrong_shape, exc.ShapeMismatch, "out", "out[0:2] = x[0:3]"),
])
def test_host_assignments_that_cannot_work(kernel, error, words, line):
    with pytest.raises(error, match=words) as info:
        kernel(randn(8, 128))
    assert line in str(info.value)


# --------------------------------------------------------- early returns --


@pallasite.kernel
def plus_one_unless_empty(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    for t in hl.tile(x.size(0), block_size=128):
        out[t] = x[t] + 1
    return out


@pytest.mark.parametrize("n", [0, 300])
def test_an_early_return_in_host_code(n):
    x = randn(n, seed=13)
    torch.testing.assert_close(plus_one_unless_empty(x), x + 1)
    torch.testing.assert_close(run_ref(plus_one_unless_empty, (x,)), x + 1)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def triple_unless_empty(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    if m == 0:
        return x.clone()
    out = torch.empty_like(x)
    for tm, tn in hl.tile([m, n]):
        out[tm, tn] = x[tm, tn] * 3
    return out


@pytest.mark.parametrize("shape", [(6, 20), (0, 20)])
def test_an_early_return_skips_the_decorators_block_sizes(shape):
    # An empty input returned before any hl.tile loop: the config's two block sizes
    # apply to no loop. This raised "block_sizes has 2 entries but the kernel has 0".
    x = torch.randn(*shape)
    torch.testing.assert_close(triple_unless_empty(x), x * 3)
    torch.testing.assert_close(run_ref(triple_unless_empty, (x,)), x * 3)


@pallasite.kernel
def first_nonempty_pass(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for factor in (0, 2, 3):
        if factor > 0:
            for t in hl.tile(x.size(0), block_size=128):
                out[t] = x[t] * factor
            return out
    return x


def test_a_return_inside_a_host_for_loop():
    x = randn(256, seed=14)
    torch.testing.assert_close(first_nonempty_pass(x), x * 2)


@pallasite.kernel
def return_on_data(x: torch.Tensor) -> torch.Tensor:
    if x.sum() > 0:
        return x
    return -x


@pallasite.kernel
def return_in_while(x: torch.Tensor) -> torch.Tensor:
    n = x.size(0)
    while n > 1:
        if n < 64:
            return x
        n //= 2
    return x


@pytest.mark.parametrize("kernel, words, line", [
    (return_on_data, "torch.where", "if x.sum() > 0:"),
    (return_in_while, "return inside a While", "while n > 1:"),
])
def test_early_returns_that_cannot_work(kernel, words, line):
    with pytest.raises(exc.UnsupportedSyntax, match=words) as info:
        kernel(randn(128))
    assert line in str(info.value)


# ------------------------------------------------ views with computed sizes --


@pallasite.kernel
def rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on interleaved pairs: sizes of the views are computed host ints."""
    b, s, h, d = x.shape
    half = d // 2
    pairs = x.view(b, s, h, half, 2)
    out = torch.empty_like(pairs)
    for tb, ts in hl.tile([b, s], block_size=[1, 8]):
        even = pairs[tb, ts, :, :, 0]
        odd = pairs[tb, ts, :, :, 1]
        c = cos[ts, :][None, :, None, :]
        sn = sin[ts, :][None, :, None, :]
        out[tb, ts, :, :, 0] = even * c - odd * sn
        out[tb, ts, :, :, 1] = odd * c + even * sn
    return out.view(b, s, h, d)


def rotate_pairs_reference(x, cos, sin):
    pairs = x.view(*x.shape[:-1], -1, 2)
    c, sn = cos[None, :, None, :], sin[None, :, None, :]
    even, odd = pairs[..., 0], pairs[..., 1]
    return torch.stack([even * c - odd * sn, odd * c + even * sn], dim=-1).view(x.shape)


def test_rope_with_views_sized_by_host_arithmetic():
    x, cos, sin = randn(2, 16, 4, 256, seed=15), randn(16, 128, seed=16), randn(16, 128, seed=17)
    torch.testing.assert_close(rotate_pairs(x, cos, sin), rotate_pairs_reference(x, cos, sin))


@pallasite.kernel
def split_heads(x: torch.Tensor, heads: hl.constexpr) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty([m, heads], dtype=x.dtype)
    for t in hl.tile(m, block_size=8):
        per_head = x[t, :].view(t, heads, n // heads)  # a tile stands for its block size
        out[t, :] = per_head.sum(-1)
    return out


def test_a_device_view_sized_by_a_tile_and_host_ints():
    x = randn(16, 512, seed=18)
    torch.testing.assert_close(split_heads(x, 4), x.view(16, 4, 128).sum(-1))
    torch.testing.assert_close(run_ref(split_heads, (x, 4)), x.view(16, 4, 128).sum(-1))
    check_tpu_lowering(split_heads, (x, 4))


@pallasite.kernel
def view_sized_by_runtime_scalar(x: torch.Tensor, half: int) -> torch.Tensor:
    pairs = x.view(x.size(0), half, 2)
    out = torch.empty_like(pairs)
    for t in hl.tile(x.size(0), block_size=8):
        out[t, :, :] = pairs[t, :, :]
    return out


@pallasite.kernel
def view_sized_by_computed_scalar(x: torch.Tensor, half: int) -> torch.Tensor:
    pairs = x.view(x.size(0), half * 2 // 2, 2)
    out = torch.empty_like(pairs)
    for t in hl.tile(x.size(0), block_size=8):
        out[t, :, :] = pairs[t, :, :]
    return out


def test_a_view_sized_by_a_scalar_argument_runs_and_a_computed_one_says_to_specialize():
    x = randn(8, 256)
    torch.testing.assert_close(view_sized_by_runtime_scalar(x, 128), x.view(8, 128, 2))
    with pytest.raises(exc.UnsupportedSyntax, match="hl.specialize") as info:
        view_sized_by_computed_scalar(x, 128)
    assert "pairs = x.view(x.size(0), half * 2 // 2, 2)" in str(info.value)


# ------------------------------------------------------- reference mode --


@pytest.mark.parametrize("kernel, args", [
    (add_broadcast, lambda: (randn(16, 1, seed=1), randn(1, 256, seed=2))),
    (gather_rows_then_scale, lambda: (randn(16, 256, seed=3), rows(16, 3, 0, 15, -1, 7, 2, 9, 9))),
    (patch_after_the_loop, lambda: (randn(16, 256, seed=6),)),
    (scatter_rows, lambda: (randn(16, 128, seed=9), rows(16, 1, 4, 9), randn(3, 128, seed=10))),
    (rotate_pairs, lambda: (randn(2, 16, 4, 256, seed=15), randn(16, 128, seed=16), randn(16, 128, seed=17))),
])
def test_reference_mode_runs_the_same_host_code(kernel, args):
    torch.testing.assert_close(run_ref(kernel, args()), kernel(*args()))


@pallasite.kernel
def differences_at_a_lag(x: torch.Tensor, lag: int) -> torch.Tensor:
    n = x.size(0)
    out = torch.zeros([n - lag], dtype=x.dtype, device=x.device)
    for t in hl.tile(n - lag):
        out[t] = x[t + lag] - x[t]
    return out


def test_a_loop_bound_computed_from_an_int_argument_is_a_constant_of_the_variant():
    """`hl.tile(n - lag)` (+, -, * of sizes and int arguments) asked for hl.specialize where
    `hl.tile(lag)` and the shift `x[t + lag]` did not; each value of lag is its own variant."""
    x = randn(100)
    for lag in (3, 17):
        torch.testing.assert_close(differences_at_a_lag(x, lag), x[lag:] - x[:-lag])
        torch.testing.assert_close(run_ref(differences_at_a_lag, (x, lag)), x[lag:] - x[:-lag])


@pallasite.kernel
def rows_in_blocks_of(x: torch.Tensor, c: int) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0), block_size=c * 8):
        out[t, :] = x[t, :] + t.block_size
    return out


def test_a_block_size_computed_from_an_int_argument_is_a_constant_of_the_variant():
    """`hl.tile(n, block_size=c * 8)` was an IllegalBlockSize compiled ("got HostScalar(_t2)")
    while reference mode ran it; each value of c is its own variant, with its own blocks."""
    x = randn(40, 128)
    for c in (1, 2):
        expected = x + 8 * c
        assert f"t, tile of {8 * c} over [0, 40)" in rows_in_blocks_of.bind((x, c)).to_code()
        torch.testing.assert_close(rows_in_blocks_of(x, c), expected)
        torch.testing.assert_close(run_ref(rows_in_blocks_of, (x, c)), expected)


@pallasite.kernel
def row_sums_in_chunks_of(x: torch.Tensor, c: int) -> torch.Tensor:
    out = torch.empty([x.size(0)], dtype=x.dtype)
    for t in hl.tile(x.size(0)):
        acc = hl.zeros([t], dtype=torch.float32)
        for chunk in hl.tile(x.size(1), block_size=c * 128):
            acc = acc + x[t, chunk].sum(1)
        out[t] = acc
    return out


def test_an_inner_block_size_computed_from_an_int_argument_is_a_constant_of_the_variant():
    """Trial DD: an inner loop's `block_size=c * 128` (a device scalar there) raised
    "Tensor.constant_of_variant is not supported" with no line."""
    x = randn(16, 512)
    for c in (1, 2):
        torch.testing.assert_close(row_sums_in_chunks_of(x, c), x.sum(1), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(run_ref(row_sums_in_chunks_of, (x, c)), x.sum(1), rtol=1e-5, atol=1e-5)


def test_numpy_scalar_arguments_are_the_python_numbers_they_hold():
    """`k(x, np.int64(3))` failed ("Loop end must be an int, got np.int64(7)", trial AA)."""
    import numpy as np

    x = randn(100)
    for lag in (np.int64(3), np.int32(17)):
        expected = x[int(lag):] - x[:-int(lag)]
        torch.testing.assert_close(differences_at_a_lag(x, lag), expected)
        torch.testing.assert_close(run_ref(differences_at_a_lag, (x, lag)), expected)
