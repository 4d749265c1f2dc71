"""Every access is checked against its tensor's bounds when the kernel is planned
(issue #11 item 1): shapes are static, so a tile that runs past a tensor is a
clear error at the user's line, never NaN or a JAX traceback."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from plan_helpers import matmul
from pallasite import exc
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def add_tiles(x, y):
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([m, n]):
        out[tile_m, tile_n] = x[tile_m, tile_n] + y[tile_m, tile_n]
    return out


def test_a_tile_past_a_narrower_tensor_is_a_shape_error():
    with pytest.raises(exc.ShapeMismatch) as info:
        add_tiles(torch.randn(300, 200), torch.randn(300, 100))
    message = str(info.value)
    assert "y[tile_m, tile_n]: tile_n covers [0, 200) but y.size(1) is 100" in message
    assert "out[tile_m, tile_n] = x[tile_m, tile_n] + y[tile_m, tile_n]" in message  # the user's line


def test_transposed_shapes_name_the_tile_and_the_size():
    with pytest.raises(exc.ShapeMismatch, match=r"tile_m covers \[0, 300\) but y.size\(0\) is 200"):
        add_tiles(torch.randn(300, 200), torch.randn(200, 300))


def test_matmul_inner_dims_that_disagree():
    with pytest.raises(exc.ShapeMismatch, match=r"y\[tile_k, tile_n\]: tile_k covers \[0, 200\) but y.size\(0\) is 150"):
        matmul(torch.randn(64, 200), torch.randn(150, 128))


@pallasite.kernel
def shifted_rows(x):
    m, n = x.size()
    out = torch.empty([m // 8, n], dtype=x.dtype)
    for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
        out[tile_m.id, tile_n] = x[tile_m.begin + 9, tile_n]
    return out


def test_a_scalar_index_past_the_end_on_the_last_tile():
    with pytest.raises(exc.ShapeMismatch, match=r"covers \[9, 17\] but x.size\(0\) is 16"):
        shifted_rows(torch.randn(16, 128))


def test_in_bounds_accesses_still_run():
    x, y = torch.randn(300, 200), torch.randn(300, 200)
    torch.testing.assert_close(add_tiles(x, y), x + y)


@pallasite.kernel
def hashed_row(x, out):
    n = x.size(0)
    for g in hl.grid(out.size(0)):
        out[g, :] = x[((g + 3000) * 1000003) % n, :]
    return out


@pallasite.kernel
def reduced_hashed_row(x, out):
    n = x.size(0)
    for g in hl.grid(out.size(0)):
        out[g, :] = x[((g + 3000) % n) * (1000003 % n) % n, :]
    return out


def test_grid_index_arithmetic_past_int32_is_refused():
    """(trial D) A device integer is 32-bit and wraps; torch computes a grid index's arithmetic
    with Python ints: `(g + 3000) * 1000003` gave other rows than torch and reference mode."""
    x = torch.arange(97.0)[:, None].repeat(1, 128)
    with pytest.raises(exc.UnsupportedOperation, match=r"\(g \+ 3000\) \* 1000003 covers \[3000009000, "):
        hashed_row(x, torch.zeros(8, 128))
    rows = ((torch.arange(8) + 3000) * 1000003) % 97
    _, result = code_and_output(reduced_hashed_row, (x, torch.zeros(8, 128)))
    torch.testing.assert_close(result, x[rows])


@pallasite.kernel
def argument_hashed_row(x, r: int):
    n = x.size(0)
    out = torch.empty_like(x)
    for g in hl.grid(n):
        out[g, :] = x[((r + g) * 1000003) % n, :]
    return out


def test_runtime_argument_arithmetic_past_int32_is_checked_per_call():
    """An int argument's value is unknown when planning, so `(r + g) * 1000003` wrapped on the
    device for r = 5000 (torch computes it exactly): each call checks the plan's arithmetic on
    int arguments against its values; a value that stays inside int32 runs."""
    x = torch.arange(7.0)[:, None].repeat(1, 128)

    def expected(r):
        return x[[((r + g) * 1000003) % 7 for g in range(7)]]

    torch.testing.assert_close(argument_hashed_row(x, 3), expected(3))
    torch.testing.assert_close(run_ref(argument_hashed_row, (x, 3)), expected(3))
    with pytest.raises(exc.KernelArgumentError, match=r"With r = 5000: \(r \+ g\) \* 1000003 covers \[5000015000, "):
        argument_hashed_row(x, 5000)
    torch.testing.assert_close(argument_hashed_row(x, 4), expected(4))  # the same variant still runs


@pallasite.kernel(config=pallasite.Config(block_sizes=[4]))
def argument_scaled_positions(x, r: int):
    n = x.size(0)
    out = torch.empty_like(x)
    for t in hl.tile(n):
        out[t, :] = x[(t.index * r) % n, :]
    return out


@pallasite.kernel
def argument_powers(x, r: int):
    n = x.size(0)
    out = torch.empty_like(x)
    for g in hl.grid(n):
        out[g, :] = x[(3 ** (g + r)) % n, :] + x[(g << r) % n, :]
    return out


def test_tile_positions_and_powers_on_arguments_are_checked_per_call():
    """(trial K) `t.index * r` (a tile's positions, their interval now known) and `3 ** (g + r)`,
    `g << r` (powers and shifts follow interval rules too) wrapped silently for large r."""
    x = torch.arange(37.0)[:, None].repeat(1, 128)
    rows = [(i * 5) % 37 for i in range(37)]
    torch.testing.assert_close(argument_scaled_positions(x, 5), x[rows])
    with pytest.raises(exc.KernelArgumentError, match=r"With r = 1073741824: .* past int32"):
        argument_scaled_positions(x, 1 << 30)
    x = x[:12]
    expected = x[[(3 ** (g + 2)) % 12 for g in range(12)]] + x[[(g << 2) % 12 for g in range(12)]]
    torch.testing.assert_close(argument_powers(x, 2), expected)
    torch.testing.assert_close(run_ref(argument_powers, (x, 2)), expected)
    with pytest.raises(exc.KernelArgumentError, match=r"With r = 28: .* past int32"):
        argument_powers(x, 28)


@pallasite.kernel(config=pallasite.Config(block_sizes=[4]))
def negated_argument(x, r: int):
    m = x.size(0)
    out = torch.empty_like(x)
    for t in hl.tile(m):
        out[t, :] = x[(-r + t.index) % m, :] + x[(abs(r) + t.index) % m, :]
    return out


def test_negating_the_smallest_int_argument_is_checked_per_call():
    """(trial L) -r and abs(r) of r = -2**31 wrapped back to -2**31 (negation had no interval
    rule): past int32 now, where torch computes 2**31."""
    x = torch.arange(12.0)[:, None].repeat(1, 128)
    rows = [(3 + i) % 12 for i in range(12)]
    torch.testing.assert_close(negated_argument(x, -3), x[rows] + x[rows])
    with pytest.raises(exc.KernelArgumentError, match=r"With r = -2147483648: neg covers \[2147483648, "):
        negated_argument(x, -(1 << 31))
