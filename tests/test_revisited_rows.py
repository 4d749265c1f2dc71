"""A written row chosen by an index that repeats rows out of order (`tile.id % 2`, `g % 3`,
a row read from data) is revisited by steps that are not consecutive: a block per step
would be written back and fetched again between visits (on a parallel axis, by either
core), losing the earlier visits' writes. Such an axis stays whole in VMEM instead, and the
grid axis that chooses the row runs in order (plan/memory.py `_axis_block`), so the last
writer wins and atomics add up, as in torch and reference mode."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def tile_id_row_store(x):
    m, n = x.size()
    out = torch.zeros([2, n], dtype=x.dtype, device=x.device)
    for tm in hl.tile(m, block_size=8):
        out[tm.id % 2, :] = x[tm, :].sum(0)
    return out


@pallasite.kernel
def modulo_row_store(x):
    out = torch.zeros([3, x.size(1)], dtype=x.dtype, device=x.device)
    for g in hl.grid(x.size(0)):
        out[g % 3, :] = x[g, :]
    return out


@pallasite.kernel
def modulo_row_update(x):
    out = torch.zeros([3, x.size(1)], dtype=x.dtype, device=x.device)
    for g in hl.grid(x.size(0)):
        out[g % 3, :] = out[g % 3, :] + x[g, :]
    return out


@pallasite.kernel
def modulo_row_atomic(x):
    out = torch.zeros([3, x.size(1)], dtype=x.dtype, device=x.device)
    for g in hl.grid(x.size(0)):
        hl.atomic_add(out, [g % 3, slice(None)], x[g, :])
    return out


@pallasite.kernel
def segment_row_atomic(x, seg):
    out = torch.zeros([3, x.size(1)], dtype=x.dtype, device=x.device)
    for g in hl.grid(x.size(0)):
        hl.atomic_add(out, [seg[g], slice(None)], x[g, :])
    return out


@pallasite.kernel
def segment_row_store(x, seg):
    out = torch.zeros([3, x.size(1)], dtype=x.dtype, device=x.device)
    for g in hl.grid(x.size(0)):
        out[seg[g], :] = x[g, :]
    return out


ROWS = torch.arange(10.0)[:, None].repeat(1, 128)
SEG = torch.tensor([0, 1, 0, 2, 0, 1, 1, 0, 2, 0], dtype=torch.int32)


def _last_writer(x, rows):
    out = torch.zeros(3, x.size(1))
    for g, row in enumerate(rows):
        out[row] = x[g]
    return out


def _summed(x, rows):
    out = torch.zeros(3, x.size(1))
    for g, row in enumerate(rows):
        out[row] += x[g]
    return out


CASES = [  # (kernel, args, expected, whether each visit writes the whole block)
    (modulo_row_store, (ROWS,), _last_writer(ROWS, [g % 3 for g in range(10)]), True),
    (modulo_row_update, (ROWS,), _summed(ROWS, [g % 3 for g in range(10)]), False),
    (modulo_row_atomic, (ROWS,), _summed(ROWS, [g % 3 for g in range(10)]), False),
    (segment_row_atomic, (ROWS, SEG), _summed(ROWS, SEG.tolist()), False),
    (segment_row_store, (ROWS, SEG), _last_writer(ROWS, SEG.tolist()), True),
]


@pytest.mark.parametrize("kernel,args,expected,whole", CASES, ids=[c[0].__name__ for c in CASES])
def test_rows_revisited_out_of_order_keep_every_visit(kernel, args, expected, whole, monkeypatch):
    from pallasite.runtime import interpret

    monkeypatch.setenv(interpret.CORES_ENV, "2")  # a parallel axis would split the steps between cores
    monkeypatch.setenv(interpret.RACES_ENV, "1")
    code, result = code_and_output(kernel, args)
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(kernel, args), expected)
    assert "'parallel'" not in code  # the steps that share a row run in order, on one core
    if whole:  # a block per step: each visit overwrites it, the last one wins
        assert "pl.BlockSpec((pl.Squeezed(), pl.Squeezed(), 128)" in code
    else:  # read or added to: the rows stay in VMEM across the steps
        assert "pl.BlockSpec((3, 128), lambda i0: (0, 0)),  # out" in code


def test_a_tile_id_modulo_row_keeps_the_last_tile():
    x = torch.arange(40.0)[:, None].repeat(1, 128)
    expected = torch.zeros(2, 128)
    for i in range(5):
        expected[i % 2] = x[i * 8:(i + 1) * 8].sum(0)
    _, result = code_and_output(tile_id_row_store, (x,))
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(tile_id_row_store, (x,)), expected)


@pallasite.kernel
def shifted_row_store(x):
    out = torch.zeros([x.size(0) + 2, x.size(1)], dtype=x.dtype, device=x.device)
    for g in hl.grid(x.size(0)):
        out[g + 2, :] = x[g, :] * 2
    return out


def test_an_injective_row_still_takes_one_block_per_step():
    code, result = code_and_output(shifted_row_store, (ROWS,))
    expected = torch.zeros(12, 128)
    expected[2:] = ROWS * 2
    torch.testing.assert_close(result, expected)
    assert "'parallel'" in code  # each step owns its row


@pallasite.kernel
def row_at_a_read_position(x, pos, out):
    for g in hl.grid(x.size(0)):
        out[pos[0], :] = x[g, :]  # one row for every step: a table read no grid index chooses
    return out


def test_a_row_no_grid_index_chooses_is_revisited_by_every_step():
    x, pos = torch.randn(6, 128), torch.tensor([2], dtype=torch.int32)
    expected = torch.zeros(4, 128)
    expected[2] = x[5]
    _, result = code_and_output(row_at_a_read_position, (x, pos, torch.zeros(4, 128)))
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(row_at_a_read_position, (x, pos, torch.zeros(4, 128))), expected)


@pallasite.kernel
def atomic_rows_of_the_inner_axis(x):
    a, b, d = x.size()
    out = torch.zeros([b, d], dtype=x.dtype, device=x.device)
    for i, j in hl.grid([a, b]):
        hl.atomic_add(out, [j, slice(None)], x[i, j, :])
    return out


@pallasite.kernel
def atomic_rows_of_a_tile_id(x):
    m, n = x.size()
    out = torch.zeros([n // 128, 128], dtype=x.dtype, device=x.device)
    for tm, tn in hl.tile([m, n], block_size=[8, 128]):
        hl.atomic_add(out, [tn.id, slice(None)], x[tm, tn].sum(0))
    return out


def test_atomics_into_rows_of_an_inner_axis_accumulate_over_the_outer_one():
    """An atomic exists to add from several programs into one row: the grid walks the axis
    the row does not depend on innermost (trial C: refused as programs overwriting each other)."""
    x = torch.randn(3, 5, 128)
    _, result = code_and_output(atomic_rows_of_the_inner_axis, (x,))
    torch.testing.assert_close(result, x.sum(0), rtol=1e-5, atol=1e-5)
    y = torch.randn(32, 256)
    _, result = code_and_output(atomic_rows_of_a_tile_id, (y,))
    torch.testing.assert_close(result, y.sum(0).view(2, 128), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(run_ref(atomic_rows_of_a_tile_id, (y,)), y.sum(0).view(2, 128), rtol=1e-5, atol=1e-5)
