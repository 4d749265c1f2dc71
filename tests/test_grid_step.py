"""`hl.grid(begin, end, step)`: the indices begin, begin + step, ... below end, as
`range(begin, end, step)` (Helion's spelling), at the top of a kernel (one program per index)
and as an inner loop under each loop type; in reference mode too. A step that is not a
positive compile-time int is refused at the user's line."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def copy_even_rows(x):
    out = torch.zeros_like(x)
    for row in hl.grid(0, x.size(0), 2):
        for col in hl.tile(x.size(1)):
            out[row, col, :] = x[row, col, :]
    return out


@pallasite.kernel
def every_third_column(x):
    m, n = x.shape
    out = torch.zeros([m, (n - 1) // 3], dtype=x.dtype)
    for tm in hl.tile(m):
        for c in hl.grid(1, n - 2, 3):
            out[tm, c // 3] = x[tm, c] + x[tm, c + 1] * 10
    return out


def test_a_stepped_grid_at_the_top():
    x = torch.randn(7, 8, 128)
    expected = torch.zeros_like(x)
    expected[0::2] = x[0::2]
    _, out = code_and_output(copy_even_rows, (x,), block_sizes=[8])
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(copy_even_rows, (x,)), expected)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_stepped_inner_grid(loop_type):
    x = torch.randn(16, 23)
    expected = torch.stack([x[:, c] + x[:, c + 1] * 10 for c in range(1, 21, 3)], 1)
    _, out = code_and_output(every_third_column, (x,), block_sizes=[8], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(every_third_column, (x,)), expected)


@pallasite.kernel
def zero_step(x):
    out = torch.zeros_like(x)
    for row in hl.grid(0, x.size(0), 0):
        out[row] = x[row]
    return out


@pallasite.kernel
def runtime_step(x, s: int):
    out = torch.zeros_like(x)
    for row in hl.grid(0, x.size(0), s):
        out[row] = x[row]
    return out


def test_a_step_that_is_not_a_positive_compile_time_int_is_refused():
    """A zero step in both modes; a runtime step in compiled code (reference mode, which
    only defines the meaning, runs it as range does)."""
    x = torch.randn(8)
    for run in (lambda: zero_step(x), lambda: run_ref(zero_step, (x,))):
        with pytest.raises(exc.IncorrectTileUsage, match=r"hl\.grid\(begin, end, step\): the step .* got 0"):
            run()
    with pytest.raises(exc.IncorrectTileUsage, match="got the runtime argument 's'"):
        runtime_step(x, 2)
    expected = torch.zeros_like(x)
    expected[::2] = x[::2]
    torch.testing.assert_close(run_ref(runtime_step, (x, 2)), expected)


@pallasite.kernel
def chunks_of_four(x):
    n = x.size(0)
    out = torch.zeros([n], dtype=x.dtype)
    for i in hl.grid(0, n, 4):
        out[i:i + 4] = x[i:i + 4] * 2
    return out


def test_windows_at_a_stepped_index_and_one_past_the_end():
    """`x[i:i + 4]` of computed start is the index vector i + hl.arange(4): inside the axis it
    runs; past its end (where torch would shorten the window) it is refused in interpret
    mode at the user's line, in the user's terms, never written past the tensor."""
    x = torch.randn(12)
    _, out = code_and_output(chunks_of_four, (x,))
    torch.testing.assert_close(out, x * 2)
    with pytest.raises(exc.ShapeMismatch, match=r"i \+ hl\.arange\(4\) is 10 but out\.size\(0\) is 10") as error:
        code_and_output(chunks_of_four, (torch.randn(10),))
    assert "A window x[s:s + n] of computed start" in str(error.value)
    assert "out[i:i + 4] = x[i:i + 4] * 2" in str(error.value) and "iota" not in str(error.value)
