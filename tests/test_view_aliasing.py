"""A device loop that writes a buffer must not touch it through another view as well
(frontend/view_aliasing.py): each tensor a loop names is its own operand, so a read through
`x_flat` would not see the loop's write through `x` (it gave the values before the loop)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import code_and_output

from plan_helpers import randn


@pallasite.kernel
def write_then_read_view(x, out):
    n, d = x.size()
    x_flat = x.view(-1)
    for t in hl.tile(n, block_size=8):
        x[t, :] = x[t, :] + 1
        out[t, :] = hl.load(x_flat, [t.index[:, None] * d + hl.arange(d)[None, :] + 0])
    return out


@pallasite.kernel
def write_two_views(x):
    n, d = x.size()
    x_flat = x.view(-1)
    for t in hl.tile(n, block_size=8):
        x[t, :] = x[t, :] + 1
        hl.store(x_flat, [t.index[:, None] * d + hl.arange(d)[None, :] + 0], x[t, :] * 0)
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
                                          (write_two_views, lambda x: (x,))])
def test_a_loop_writing_a_buffer_through_one_view_and_touching_another_is_refused(kernel, args):
    """It ran and read x_flat as it was before the loop (a silently wrong result)."""
    x = randn(16, 128)
    with pytest.raises(exc.UnsupportedOperation, match="another view of the same buffer"):
        kernel(*args(x))


def test_reading_through_two_views_is_fine():
    x = randn(16, 128)
    _, result = code_and_output(read_two_views, (x,))
    torch.testing.assert_close(result, x * 2)


@pallasite.kernel
def read_view_then_write(x):
    """Each program reads its rows through x, then writes them through x_flat: the read comes
    first, so it sees what a read of one operand would."""
    n, d = x.size()
    x_flat = x.view(-1)
    for t in hl.tile(n, block_size=8):
        hl.store(x_flat, [t.index[:, None] * d + hl.arange(d)[None, :] + 0], x[t, :] * 2)
    return x


def test_a_read_through_one_view_before_the_write_through_another_is_fine():
    x = randn(16, 128)
    _, result = code_and_output(read_view_then_write, (x.clone(),))
    torch.testing.assert_close(result, x * 2)


@pallasite.kernel
def bump_then_read(x, other, out):
    """Writes x, then reads `other`: the caller may pass a view of x as `other`."""
    n, d = x.size()
    for t in hl.tile(n, block_size=8):
        x[t, :] = x[t, :] + 1
        out[t, :] = other[t, :]
    return out


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
