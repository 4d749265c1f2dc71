"""A row index that lies outside its tensor only where a device `if` keeps the access from
running (`if s >= 0: out[s, :] = ...` with -1 marking "no row", `if g > 0: x[g - 1, :]`)
is valid code, as in torch. The range check runs under the `if` (interpret mode), not
before the kernel for every step, and no block is ever chosen outside the tensor: a
guarded read's index map is clamped into the tensor (the DMA of a step whose `if` is
false fetches a row nobody reads), a guarded write whose row is not known to lie inside
keeps that axis whole in VMEM (a block per step would be written back at a step that
wrote nothing). plan/memory.py `_axis_block`, plan/bounds.py `check_access_bounds`."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def guarded_sentinel_store(x, seg, out):
    for g in hl.grid(x.size(0)):
        s = seg[g]
        if s >= 0:
            out[s, :] = x[g, :]
    return out


@pallasite.kernel
def guarded_sentinel_load(x, seg):
    out = torch.zeros_like(x)
    for g in hl.grid(x.size(0)):
        s = seg[g]
        if s >= 0:
            out[g, :] = x[s, :] * 2
    return out


@pallasite.kernel
def guarded_gather_rows(table, seg, x):
    out = torch.zeros_like(x)
    for g in hl.grid(x.size(0)):
        s = seg[g]
        if s >= 0:
            out[g, :] = table[s, :] * 2
    return out


@pallasite.kernel
def guarded_sentinel_load_3d(x, seg):
    out = torch.zeros_like(x)
    for g in hl.grid(x.size(0)):
        s = seg[g]
        if s >= 0:
            out[g, :, :] = x[s, :, :] + 1
    return out


@pallasite.kernel
def guarded_previous_row(x):
    out = torch.zeros_like(x)
    for g in hl.grid(x.size(0)):
        if g > 0:
            out[g, :] = x[g - 1, :] + x[g, :]
    return out


@pallasite.kernel
def guarded_row_before(x):
    out = torch.full_like(x, 5.0)
    for g in hl.grid(x.size(0)):
        if g > 0:
            out[g - 1, :] = x[g, :]
    return out


@pallasite.kernel
def guarded_next_row_else(x):
    out = torch.zeros_like(x)
    for g in hl.grid(x.size(0)):
        if g < x.size(0) - 1:
            out[g + 1, :] = x[g, :]
        else:
            out[0, :] = x[g, :]
    return out


@pallasite.kernel
def guarded_repeated_row(x, keep):
    out = torch.zeros([3, x.size(1)], dtype=x.dtype, device=x.device)
    for g in hl.grid(x.size(0)):
        if keep[g] != 0:
            out[g % 3, :] = x[g, :]
    return out


@pallasite.kernel
def guarded_half_row(x):
    out = torch.zeros([x.size(0) // 2, x.size(1)], dtype=x.dtype, device=x.device)
    for g in hl.grid(x.size(0)):
        if g % 2 == 0:
            out[g // 2, :] = x[g, :]
    return out


@pallasite.kernel
def flagged_segment_row(x, seg, w):
    out = torch.zeros([3, x.size(1)], dtype=x.dtype, device=x.device)
    for g in hl.grid(x.size(0)):
        if w[g] > 0:
            out[seg[g], :] = x[g, :]
    return out


@pallasite.kernel
def unguarded_previous_row(x):
    out = torch.zeros_like(x)
    for g in hl.grid(x.size(0)):
        out[g, :] = x[g - 1, :]
    return out


X = torch.arange(8.0)[:, None] + torch.arange(128.0)[None, :] / 128
SEG = torch.tensor([3, -1, 0, -1, 7, 5, -1, 1], dtype=torch.int32)


def _sentinel_store(x, seg):
    out = torch.full_like(x, -4.0)
    for g, s in enumerate(seg.tolist()):
        if s >= 0:
            out[s] = x[g]
    return out


def _sentinel_load(x, seg):
    out = torch.zeros_like(x)
    for g, s in enumerate(seg.tolist()):
        if s >= 0:
            out[g] = x[s] * 2
    return out


def _shift(x, by):
    out = torch.zeros_like(x)
    for g in range(x.size(0)):
        if 0 <= g + by < x.size(0):
            out[g + by] = x[g]
    return out


def _repeated(x, keep):
    out = torch.zeros(3, x.size(1))
    for g, k in enumerate(keep.tolist()):
        if k:
            out[g % 3] = x[g]
    return out


KEEP = torch.tensor([1, 1, 0, 0, 1, 1, 0, 0], dtype=torch.int32)
CASES = [  # (kernel, args, expected)
    (guarded_sentinel_store, (X, SEG, torch.full_like(X, -4.0)), _sentinel_store(X, SEG)),
    (guarded_sentinel_load, (X, SEG), _sentinel_load(X, SEG)),
    (guarded_previous_row, (X,), _shift(X, 1) + X * (torch.arange(8) > 0)[:, None]),
    (guarded_row_before, (X,), torch.cat([X[1:], torch.full((1, 128), 5.0)])),
    (guarded_next_row_else, (X,), torch.roll(X, 1, 0)),
    (guarded_repeated_row, (X, KEEP), _repeated(X, KEEP)),
    # (trial D) steps that share a row's block, only some storing: a step that did not store
    # copied the output's first contents over the earlier step's write
    (guarded_half_row, (X,), X[0::2]),
    (flagged_segment_row, (X, torch.tensor([0, 0, 1, 1, 1, 2, 2, 2], dtype=torch.int32),
                           torch.tensor([1, 0, 0, 1, 0, 1, 0, 0], dtype=torch.int32)), X[[0, 3, 5]]),
]


@pytest.mark.parametrize("kernel,args,expected", CASES, ids=[c[0].__name__ for c in CASES])
def test_an_index_outside_the_tensor_where_the_if_is_false_is_valid(kernel, args, expected, monkeypatch):
    from pallasite.runtime import interpret

    monkeypatch.setenv(interpret.CORES_ENV, "2")
    monkeypatch.setenv(interpret.RACES_ENV, "1")
    _, result = code_and_output(kernel, [a.clone() for a in args])
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(kernel, [a.clone() for a in args]), expected)


def test_a_guarded_read_chooses_its_block_inside_the_tensor():
    table = torch.randn(40, 128)  # longer than a group of 8 rows: the row's group is the block
    seg = torch.tensor([33, -1, 0, -1, 39, 5, -1, 17], dtype=torch.int32)
    x = torch.zeros(8, 128)
    code, result = code_and_output(guarded_gather_rows, (table, seg, x))
    expected = torch.zeros(8, 128)
    for g, s in enumerate(seg.tolist()):
        if s >= 0:
            expected[g] = table[s] * 2
    torch.testing.assert_close(result, expected)
    # the index map clamps the row read from data: no step fetches block -1
    assert "jnp.minimum(jnp.maximum(seg_ref[i0], 0), 39) // 8" in code
    x3 = torch.randn(8, 16, 128)
    code, result = code_and_output(guarded_sentinel_load_3d, (x3, SEG))
    assert "jnp.minimum(jnp.maximum(seg_ref[i0], 0), 7)" in code
    expected = torch.zeros_like(x3)
    for g, s in enumerate(SEG.tolist()):
        if s >= 0:
            expected[g] = x3[s] + 1
    torch.testing.assert_close(result, expected)


def test_a_guarded_write_of_a_row_read_from_data_keeps_the_axis_whole():
    code, _ = code_and_output(guarded_sentinel_store, (X, SEG, torch.zeros_like(X)))
    assert "pl.BlockSpec((8, 128), lambda i0: (0, 0)),  # out" in code
    assert "'parallel'" not in code


def test_a_guarded_index_outside_the_tensor_is_still_caught_where_it_runs():
    bad = torch.tensor([3, -1, 0, -1, 9, 5, -1, 1], dtype=torch.int32)  # 9 passes the `if`
    with pytest.raises(exc.ShapeMismatch, match=r"s is 9 but x.size\(0\) is 8"):
        guarded_sentinel_load(X, bad)
    with pytest.raises(exc.ShapeMismatch, match=r"s is 9 but out.size\(0\) is 8"):
        guarded_sentinel_store(X, bad, torch.zeros_like(X))


def test_an_unguarded_index_outside_the_tensor_is_refused_when_planning():
    with pytest.raises(exc.ShapeMismatch, match=r"g - 1 covers \[-1, 6\]"):
        unguarded_previous_row(X)
