"""A device loop that writes a buffer must not touch it through another view as well
(frontend/view_aliasing.py): each tensor a loop names is its own operand, so a read through
`x_flat` would not see the loop's write through `x` (it gave the values before the loop)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import code_and_output, run_ref

from plan_helpers import randn


@pallasite.kernel
def write_then_read_view(x, out):
    n, d = x.size()
    x_flat = x.view(-1)
    for t in hl.tile(n, block_size=8):
        x[t, :] = x[t, :] + 1
        out[t, 0] = hl.load(x_flat, [t.index * d])  # column 0 of each row: an element gather
    return out


@pallasite.kernel
def read_view_then_write(x, out):
    """Each program reads column 0 through x_flat before it writes x: the read comes first,
    yet the next program's read misses this program's write."""
    n, d = x.size()
    x_flat = x.view(-1)
    for t in hl.tile(n, block_size=8):
        out[t, 0] = hl.load(x_flat, [t.index * d])
        x[t, :] = x[t, :] + 1
    return out


@pallasite.kernel
def write_two_views(x):
    n, d = x.size()
    x2 = x.view(n // 2, 2 * d)
    x_flat = x.view(-1)
    for t in hl.tile(n // 2, block_size=8):
        x2[t, :] = x2[t, :] * 2
        hl.store(x_flat, [t.index * 2 * d], hl.zeros([t], dtype=x.dtype))
    return x


@pallasite.kernel
def read_two_views(x):
    n, d = x.size()
    x_flat = x.view(-1)
    out = torch.empty_like(x)
    for t in hl.tile(n, block_size=8):
        out[t, :] = x[t, :] + hl.load(x_flat, [t.index[:, None] * d + hl.arange(d)[None, :] + 0])
    return out


@pytest.mark.parametrize("kernel, args", [(write_then_read_view, lambda x: (x, torch.zeros_like(x))),
                                          (read_view_then_write, lambda x: (x, torch.zeros_like(x))),
                                          (write_two_views, lambda x: (x,))])
def test_a_loop_writing_a_buffer_through_one_view_and_touching_another_is_refused(kernel, args):
    """In either order: the body runs once per program, so a read before this program's
    write still comes after an earlier program's."""
    x = randn(16, 128)
    with pytest.raises(exc.UnsupportedOperation, match="another view of the same buffer"):
        kernel(*args(x))


def test_reading_through_two_views_is_fine():
    x = randn(16, 128)
    _, result = code_and_output(read_two_views, (x,))
    torch.testing.assert_close(result, x * 2)


@pallasite.kernel
def rows_of_earlier_programs(x, src):
    """Each program reads the rows `src` names through x_flat, then writes its own rows
    through x: rows an earlier program wrote (found by a trial: the grid was parallel and the
    reads saw the values from before the loop)."""
    n, d = x.size()
    x_flat = x.view(-1)
    for t in hl.tile(n, block_size=8):
        x[t, :] = hl.load(x_flat, [src[t][:, None] * d + hl.arange(d)[None, :]]) + 1
    return x


@pallasite.kernel
def own_rows_through_the_flat_view(x):
    n, d = x.size()
    x_flat = x.view(-1)
    for t in hl.tile(n, block_size=8):
        hl.store(x_flat, [t.index[:, None] * d + hl.arange(d)[None, :]], x[t, :] * 2)
    return x


def test_rows_of_the_flat_view_are_the_base_itself():
    """x_flat's rows of width d are x: one operand, so the planner orders the reads after the
    earlier programs' writes (an arbitrary grid) and the kernel computes what torch does."""
    x = torch.zeros(32, 128)
    src = torch.clamp(torch.arange(32) - 8, min=0).to(torch.int32)  # block k reads block k - 1
    code, result = code_and_output(rows_of_earlier_programs, (x.clone(), src))
    expected = torch.repeat_interleave(torch.arange(1.0, 5.0), 8)[:, None].expand(32, 128)
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(rows_of_earlier_programs, (x.clone(), src)), expected)
    assert "x_flat_rows" not in code and "'arbitrary'" in code
    y = randn(16, 128)
    _, result = code_and_output(own_rows_through_the_flat_view, (y.clone(),))
    torch.testing.assert_close(result, y * 2)


@pallasite.kernel
def bump_then_read(x, other, out):
    """Writes x, then reads `other`: the caller may pass a view of x as `other`."""
    n, d = x.size()
    for t in hl.tile(n, block_size=8):
        x[t, :] = x[t, :] + 1
        out[t, :] = other[t, :]
    return out


def test_an_expanded_argument_the_kernel_writes_is_refused_before_it_runs():
    """An expanded tensor's rows share memory: torch refuses to write it in place, and the
    write-back after the kernel raised torch's own error without the argument's name (trial)."""
    x, other = randn(16, 128), randn(16, 128)
    out = torch.zeros(1, 128).expand(16, 128)
    with pytest.raises(exc.KernelArgumentError, match="'x' .*stride 0"):
        bump_then_read(torch.zeros(1, 128).expand(16, 128), other, torch.zeros(16, 128))
    with pytest.raises(exc.KernelArgumentError, match="'out' .*stride 0"):
        bump_then_read(x.clone(), other, out)


def test_arguments_sharing_a_written_buffer_are_refused():
    """k(x, x, out) read x's values from before the write (found by the trial): the kernel
    takes each argument as its own buffer, so the caller must not pass one it writes twice."""
    x, out = randn(16, 128), torch.zeros(16, 128)
    with pytest.raises(exc.KernelArgumentError, match="'x' and 'other' share memory"):
        bump_then_read(x, x, out)
    with pytest.raises(exc.KernelArgumentError, match="share memory"):
        bump_then_read(x, x.view(16, 128)[:, :], out)
    _, result = code_and_output(bump_then_read, (x.clone(), x.clone(), out))  # distinct buffers: fine
    torch.testing.assert_close(result, x)


@pallasite.kernel
def rows_through_a_cast(x, src):
    y = x.float()  # float32 already: torch returns x itself
    for t in hl.tile(x.size(0), block_size=8):
        x[t, :] = y[src[t], :] + 1
    return x


@pallasite.kernel
def rows_of_a_flattened_copy(x, src):
    n, d = x.size()
    x_flat = x.reshape(-1)  # x non-contiguous: torch copies
    for t in hl.tile(n, block_size=8):
        x[t, :] = hl.load(x_flat, [src[t][:, None] * d + hl.arange(d)[None, :]]) + 1
    return x


def _earlier_blocks(x, src, read):
    """torch, eagerly: each block of 8 rows written from the rows `read` gives then."""
    for start in range(0, x.size(0), 8):
        x[start:start + 8] = read(x)[src[start:start + 8]] + 1
    return x


def test_no_op_casts_are_the_tensor_and_flattened_copies_are_copies():
    """Found by the trial: `x.float()` of float32 x is x in torch (the loop read stale rows),
    and `x.reshape(-1)` of a transposed argument is a copy (the loop read new rows)."""
    src = torch.clamp(torch.arange(32) - 8, min=0).to(torch.int32)
    x = torch.zeros(32, 128)
    expected = _earlier_blocks(x.clone(), src.long(), lambda t: t)
    torch.testing.assert_close(code_and_output(rows_through_a_cast, (x.clone(), src))[1], expected)
    transposed = torch.zeros(128, 32).t()
    flat = transposed.reshape(-1).clone().view(32, 128)
    expected = _earlier_blocks(transposed.clone(), src.long(), lambda t: flat)
    _, result = code_and_output(rows_of_a_flattened_copy, (torch.zeros(128, 32).t(), src))
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(rows_of_a_flattened_copy, (torch.zeros(128, 32).t(), src)), expected)


@pallasite.kernel
def flat_view_of(x):
    x_flat = x.view(-1)
    out = torch.empty_like(x_flat)
    for t in hl.tile(x_flat.size(0)):
        out[t] = x_flat[t] * 2
    return out


def test_a_flat_view_of_a_non_contiguous_argument_is_refused_as_torch_refuses_it():
    with pytest.raises(exc.ShapeMismatch, match=r"x.view\(...\): the caller passed 'x' non-contiguous") as info:
        flat_view_of(torch.zeros(128, 32).t())
    assert "x_flat = x.view(-1)" in str(info.value)
    x = randn(32, 128)
    torch.testing.assert_close(flat_view_of(x), x.view(-1) * 2)
