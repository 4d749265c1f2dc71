"""Integer division by zero in device code: torch raises ZeroDivisionError; a TPU returns
garbage. Compiled, `x // y` and `x % y` returned values silently (4 // 0 gave -2); now
interpret mode checks each integer divisor the planner cannot prove nonzero, on the lanes
that hold data (a partial tile's padding is not checked), where the division runs (not
where an `if` skips it), and the call raises `exc.ShapeMismatch` at the user's line, as
reference mode does. A divisor proven nonzero (`t.index + 1`) costs no check."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref

from source_lines import assert_points_at


@pallasite.kernel
def quotients(x, y):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] // y[t] + x[t] % y[t] + torch.fmod(x[t], y[t]) + torch.div(x[t], y[t], rounding_mode="trunc")
    return out


@pallasite.kernel
def by_a_row_sum(x, y):
    m, n = x.shape
    out = torch.empty_like(x)
    for tm in hl.tile(m):
        for tn in hl.tile(n):
            out[tm, tn] = x[tm, tn] // y[tm, tn].sum(1, keepdim=True)
    return out


@pallasite.kernel
def guarded(x, y):
    out = torch.zeros_like(x)
    for g in hl.grid(x.size(0)):
        d = y[g]
        if d != 0:
            out[g] = x[g] // d
    return out


@pallasite.kernel
def by_positions(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] // (t.index + 1)
    return out


def _expected(x, y):
    return x // y + x % y + torch.fmod(x, y) + torch.div(x, y, rounding_mode="trunc")


def test_a_zero_divisor_raises_in_both_modes():
    x = torch.arange(1, 301, dtype=torch.int32)
    y = torch.arange(300, dtype=torch.int32) % 7 + 1
    _, out = code_and_output(quotients, (x, y), block_sizes=[128])
    torch.testing.assert_close(out, _expected(x, y))
    y[200] = 0
    for run in (lambda: code_and_output(quotients, (x, y), block_sizes=[128]),
                lambda: run_ref(quotients, (x, y), block_sizes=[128])):
        with pytest.raises(exc.ShapeMismatch, match="ZeroDivisionError|division by zero") as error:
            run()
        assert_points_at(error.value, quotients, "out[t] = x[t] // y[t] + x[t] % y[t]")


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_padding_lanes_are_not_divisors(loop_type):
    """A partial last tile's padding holds zeros: never checked."""
    x = torch.randint(-50, 50, (20, 200), dtype=torch.int32)
    y = torch.randint(1, 3, (20, 200), dtype=torch.int32)
    _, out = code_and_output(by_a_row_sum, (x, y), block_sizes=[8, 128], pallas_loop_type=loop_type)
    sums = torch.cat([y[:, :128].sum(1, keepdim=True).expand(20, 128), y[:, 128:].sum(1, keepdim=True).expand(20, 72)], 1)
    expected = (x // sums).to(torch.int32)
    torch.testing.assert_close(out, expected)
    y[19, 150:] = 0
    y[19, 128:150] = 0
    with pytest.raises(exc.ShapeMismatch, match="division by zero"):
        code_and_output(by_a_row_sum, (x, y), block_sizes=[8, 128], pallas_loop_type=loop_type)


def test_a_division_an_if_skips_is_not_checked():
    x = torch.arange(1, 9, dtype=torch.int32)
    y = torch.tensor([1, 0, 2, 0, 3, 0, 4, 0], dtype=torch.int32)
    expected = torch.where(y != 0, x // torch.where(y != 0, y, 1), 0)
    _, out = code_and_output(guarded, (x, y))
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(guarded, (x, y)), expected)


def test_a_divisor_proven_nonzero_is_not_checked():
    x = torch.arange(300, dtype=torch.int32)
    code, out = code_and_output(by_positions, (x,), block_sizes=[128])
    torch.testing.assert_close(out, x // (torch.arange(300, dtype=torch.int32) + 1))
    assert "CHECKS.divisors" not in code
    code, _ = code_and_output(quotients, (x + 1, x % 5 + 1), block_sizes=[128])
    assert code.count("CHECKS.divisors(") == 4


@pallasite.kernel
def by_an_argument_in_a_loop(x, group: int):
    m, n = x.shape
    out = torch.empty([m], dtype=torch.int32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.int32)
        for tn in hl.tile(n):
            acc = acc + x[tm, tn].sum(1) // group + tn.begin // group
        out[tm] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_an_argument_divisor_in_a_loop_body(loop_type):
    """The divisor is the outer function's variable; the first version rebound it inside the
    loop body's function (UnboundLocalError in Helion's int4_gemm_v2, found by the corpus)."""
    x = torch.randint(-50, 50, (16, 256), dtype=torch.int32)
    expected = (x[:, :128].sum(1) // 3 + x[:, 128:].sum(1) // 3 + 128 // 3).to(torch.int32)
    _, out = code_and_output(by_an_argument_in_a_loop, (x, 3), block_sizes=[8, 128], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected)
    with pytest.raises(exc.ShapeMismatch, match="division by zero"):
        code_and_output(by_an_argument_in_a_loop, (x, 0), block_sizes=[8, 128], pallas_loop_type=loop_type)
