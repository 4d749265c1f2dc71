"""`torch.nn.functional.pad` of a tile (issue 22 §2): constant mode, static non-negative
widths on the last dims, as torch defines it (the fill cast to the value's dtype). Lowered
as `jnp.pad` (Mosaic: a concatenation with the fill). An axis holding a partial tile's
padding cannot be padded (the fill would follow the padding, not the elements): refused."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


def _check(kernel, args, expected, **config):
    _, out = code_and_output(kernel, args, **config)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(kernel, args, **config), expected)


@pallasite.kernel
def pad_columns(x):
    """Rows of 8 (20 rows: a partial last tile, on an axis the pad leaves alone)."""
    m, n = x.shape
    out = torch.empty([m, n + 4], dtype=x.dtype, device=x.device)
    for tm in hl.tile(m, block_size=8):
        out[tm, :] = F.pad(x[tm, :], (1, 3), value=2.5)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_pad_last_dim(dtype):
    x = (torch.randn(20, 124) * 4).to(dtype)
    _check(pad_columns, (x,), F.pad(x, (1, 3), value=2.5))  # int32: torch casts 2.5 to 2


@pallasite.kernel
def pad_two_dims(x):
    b, r, n = x.shape
    out = torch.empty([b, r + 3, n + 3], dtype=x.dtype, device=x.device)
    for tb in hl.tile(b, block_size=2):
        out[tb, :, :] = F.pad(x[tb, :, :], (1, 2, 3, 0))  # last dim (1, 2), then rows (3, 0)
    return out


def test_pad_last_two_dims_default_fill():
    x = torch.randn(3, 5, 125)
    _check(pad_two_dims, (x,), F.pad(x, (1, 2, 3, 0)))


@pallasite.kernel
def causal_shift(x):
    """Shift right by 3 along the last dim, zeros coming in: pad, then a static slice."""
    m, n = x.shape
    out = torch.empty_like(x)
    for tm in hl.tile(m, block_size=8):
        v = x[tm, :]
        out[tm, :] = v + 0.5 * F.pad(v, (3, 0))[:, :n]
    return out


def test_pad_then_static_slice_shifts():
    x = torch.randn(16, 128)
    _check(causal_shift, (x,), x + 0.5 * F.pad(x, (3, 0))[:, :128])


@pallasite.kernel
def padded_sums_inner(x):
    """F.pad inside an inner loop (every loop type): k = 12, a partial last k tile, summed
    over that tile (its padding masked by the reduction, as for any tile)."""
    m, k, d = x.shape
    total = torch.empty([m, d + 2], dtype=x.dtype, device=x.device)
    for tm in hl.tile(m, block_size=8):
        acc = hl.zeros([tm, d + 2], dtype=torch.float32)
        for tk in hl.tile(k, block_size=8):
            acc = acc + F.pad(x[tm, tk, :], (1, 1), value=1.0).sum(1)
        total[tm, :] = acc
    return total


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_pad_in_inner_loop(loop_type):
    x = torch.randn(8, 12, 128)
    expected = F.pad(x, (1, 1), value=1.0).sum(1)
    _, out = code_and_output(padded_sums_inner, (x,), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(run_ref(padded_sums_inner, (x,), pallas_loop_type=loop_type), expected,
                               atol=1e-4, rtol=1e-4)


def _padding(fn):
    @pallasite.kernel
    def kernel(x):
        m, n = x.shape
        out = torch.empty([m, 8], dtype=x.dtype, device=x.device)
        for tm in hl.tile(m, block_size=8):
            out[tm, :] = fn(x[tm, :])[:, :8]
        return out

    return kernel


@pytest.mark.parametrize("fn, error, message", [
    (lambda v: F.pad(v, (1, 1), mode="reflect"), exc.UnsupportedOperation, "only mode='constant'"),
    (lambda v: F.pad(v, (-1, 2)), exc.UnsupportedOperation, "crops"),
    (lambda v: F.pad(v, (0, 0, 1, 0))[1:, :], exc.UnsupportedOperation, "partial"),  # rows: 20 = 8 + 8 + 4
])
def test_refused_pads(fn, error, message):
    with pytest.raises(error, match=message) as info:
        code_and_output(_padding(fn), (torch.randn(20, 128),))
    assert "test_pad.py" in str(info.value)
