"""Several index tensors in one subscript follow torch's advanced indexing (issue #20 §1).

`x[t.index, t.index]` is the diagonal, not the block: index tensors (a tile's
`.index`, a loaded index tile, a computed int vector) in several subscript
positions broadcast together and pick one element per lane. The compiler reads
the rows of the first index (a tile's block, or a gather) and selects, lane by
lane, the position each other index names along its axis (`take_along_dim`).
Where torch puts the indexed dims in front (index tensors separated by a
slice), so does the compiler. A store through two index tensors is refused
with an error naming torch's rule.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref

from plan_helpers import only_call



def _randint(n, high, seed):
    return torch.randint(0, high, (n,), generator=torch.Generator().manual_seed(seed), dtype=torch.int32)


def _randn(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


@pallasite.kernel(config=pallasite.Config(block_sizes=[128]))
def diagonal(x):
    n = x.size(0)
    out = torch.empty([n], dtype=x.dtype, device=x.device)
    for t in hl.tile(n):
        out[t] = x[t.index, t.index]
    return out


def test_the_same_tile_index_twice_is_the_diagonal():
    x = _randn(200, 200)  # a partial last tile
    _, out = code_and_output(diagonal, (x,))
    assert torch.equal(out, torch.diagonal(x))
    assert torch.equal(run_ref(diagonal, (x,)), torch.diagonal(x))


@pallasite.kernel(config=pallasite.Config(block_sizes=[16]))
def target_logit(logits, labels):
    n = logits.size(0)
    out = torch.empty([n], dtype=logits.dtype, device=logits.device)
    for t in hl.tile(n):
        out[t] = logits[t.index, labels[t]]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_cross_entropy_target_logit(dtype):
    logits = (_randn(40, 1000) * 100).to(dtype)
    labels = _randint(40, 1000, seed=3)
    expected = logits[torch.arange(40), labels.long()]
    _, out = code_and_output(target_logit, (logits, labels))
    assert torch.equal(out, expected)
    assert torch.equal(run_ref(target_logit, (logits, labels)), expected)


def test_target_logit_keeps_special_values_and_the_sign_of_zero():
    logits = _randn(16, 256)
    logits[0, 5], logits[1, 6], logits[2, 7], logits[3, 8] = float("inf"), float("-inf"), float("nan"), -0.0
    labels = torch.full((16,), 9, dtype=torch.int32)
    labels[:4] = torch.tensor([5, 6, 7, 8], dtype=torch.int32)
    _, out = code_and_output(target_logit, (logits, labels))
    expected = logits[torch.arange(16), labels.long()]
    assert torch.equal(out.isnan(), expected.isnan())
    assert torch.equal(out[~out.isnan()], expected[~expected.isnan()])
    assert torch.signbit(out[3])


def test_an_index_outside_the_axis_is_an_error_not_a_value():
    logits = _randn(32, 100)
    labels = _randint(32, 100, seed=4)
    labels[17] = 100
    with pytest.raises(exc.ShapeMismatch, match=r"labels"):
        code_and_output(target_logit, (logits, labels))


@pallasite.kernel(config=pallasite.Config(block_sizes=[64]))
def rows_then_tile_column(x, rows):
    n = rows.size(0)
    out = torch.empty([n], dtype=x.dtype, device=x.device)
    for t in hl.tile(n):
        out[t] = x[rows[t], t.index]
    return out


def test_a_gathered_row_paired_with_a_tile_column():
    x = _randn(50, 300)
    rows = _randint(300, 50, seed=5)
    _, out = code_and_output(rows_then_tile_column, (x, rows))
    assert torch.equal(out, x[rows.long(), torch.arange(300)])


@pallasite.kernel(config=pallasite.Config(block_sizes=[64]))
def two_gathered_indices(x, rows, cols):
    n = rows.size(0)
    out = torch.empty([n], dtype=x.dtype, device=x.device)
    for t in hl.tile(n):
        out[t] = x[rows[t], cols[t]] + 1
    return out


def test_two_loaded_index_vectors_pair_up():
    x = _randn(30, 200)
    rows, cols = _randint(100, 30, seed=6), _randint(100, 200, seed=7)
    _, out = code_and_output(two_gathered_indices, (x, rows, cols))
    assert torch.equal(out, x[rows.long(), cols.long()] + 1)


@pallasite.kernel(config=pallasite.Config(block_sizes=[32]))
def paired_then_slice(x, cols):
    n = cols.size(0)
    out = torch.empty([n, x.size(2)], dtype=x.dtype, device=x.device)
    for t in hl.tile(n):
        out[t, :] = x[t.index, cols[t], :]
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[32]))
def separated_by_a_slice(x, cols):
    n = cols.size(0)
    out = torch.empty([n, x.size(1)], dtype=x.dtype, device=x.device)
    for t in hl.tile(n):
        out[t, :] = x[t.index, :, cols[t]]
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[32]))
def slice_then_paired(x, cols):
    n = cols.size(0)
    out = torch.empty([x.size(0), n], dtype=x.dtype, device=x.device)
    for t in hl.tile(n):
        out[:, t] = x[:, t.index, cols[t]]
    return out


def test_where_torch_puts_the_paired_dim():
    x = _randn(70, 24, 128)
    cols = _randint(70, 24, seed=8)
    _, out = code_and_output(paired_then_slice, (x, cols))
    assert torch.equal(out, x[torch.arange(70), cols.long(), :])
    cols = _randint(70, 128, seed=9)
    _, out = code_and_output(separated_by_a_slice, (x, cols))  # torch: the paired dim goes first
    assert torch.equal(out, x[torch.arange(70), :, cols.long()])
    y = _randn(8, 70, 128)
    cols = _randint(70, 128, seed=10)
    _, out = code_and_output(slice_then_paired, (y, cols))
    assert torch.equal(out, y[:, torch.arange(70), cols.long()])


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def paired_index_tiles(x, rows, cols):
    m, n = rows.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tm, tn in hl.tile([m, n]):
        out[tm, tn] = x[rows[tm, tn], cols[tm, tn]]
    return out


def test_two_index_tiles_pair_element_by_element():
    x = _randn(20, 40)
    rows = torch.randint(0, 20, (12, 200), generator=torch.Generator().manual_seed(11), dtype=torch.int32)
    cols = torch.randint(0, 40, (12, 200), generator=torch.Generator().manual_seed(12), dtype=torch.int32)
    _, out = code_and_output(paired_index_tiles, (x, rows, cols))
    assert torch.equal(out, x[rows.long(), cols.long()])


@pallasite.kernel(config=pallasite.Config(block_sizes=[16, 128]))
def broadcast_indices(x):
    m, n = x.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tm, tn in hl.tile([m, n]):
        out[tm, tn] = x[tm.index[:, None], tn.index[None, :]]
    return out


def test_broadcast_index_vectors_make_a_block():
    x = _randn(40, 300)
    _, out = code_and_output(broadcast_indices, (x,))
    assert torch.equal(out, x)


@pallasite.kernel(config=pallasite.Config(block_sizes=[32]))
def paired_in_an_inner_loop(logits, labels):
    b, n = labels.size()
    out = torch.empty([b, n], dtype=logits.dtype, device=logits.device)
    for g in hl.grid(b):
        for t in hl.tile(n):
            out[g, t] = logits[g, t.index, labels[g, t]] * 2
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_paired_indices_in_an_inner_loop(loop_type):
    logits = _randn(3, 100, 256)
    labels = torch.randint(0, 256, (3, 100), generator=torch.Generator().manual_seed(13), dtype=torch.int32)
    _, out = code_and_output(paired_in_an_inner_loop, (logits, labels), pallas_loop_type=loop_type)
    expected = logits[torch.arange(3)[:, None], torch.arange(100)[None, :], labels.long()] * 2
    assert torch.equal(out, expected)
    check_tpu_lowering(paired_in_an_inner_loop, (logits, labels), pallas_loop_type=loop_type)


@pytest.mark.parametrize("kernel, args", [
    (diagonal, (_randn(200, 200),)),
    (target_logit, (_randn(40, 1000).to(torch.bfloat16), _randint(40, 1000, seed=3))),
    (separated_by_a_slice, (_randn(70, 24, 128), _randint(70, 128, seed=9))),
    (paired_index_tiles, (_randn(20, 40), torch.zeros(12, 200, dtype=torch.int32),
                          torch.zeros(12, 200, dtype=torch.int32))),
])
def test_paired_gathers_lower_for_every_chip(kernel, args):
    check_tpu_lowering(kernel, args)


@pallasite.kernel(config=pallasite.Config(block_sizes=[16]))
def store_through_two_indices(out, rows, cols, v):
    n = rows.size(0)
    for t in hl.tile(n):
        out[rows[t], cols[t]] = v[t]
    return out


def test_a_store_through_two_index_tensors_is_refused_with_torch_semantics():
    out = torch.zeros(8, 8)
    with pytest.raises(exc.IndexingError, match=r"pair up|element by element"):
        store_through_two_indices(out, _randint(16, 8, 1), _randint(16, 8, 2), _randn(16))


@pallasite.kernel(config=pallasite.Config(block_sizes=[16, 128]))
def mismatched_lengths(x):
    m, n = x.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tm, tn in hl.tile([m, n]):
        out[tm, tn] = x[tm.index, tn.index]
    return out


def test_index_tensors_that_do_not_broadcast_are_an_error():
    with pytest.raises(exc.IndexingError, match=r"broadcast"):
        mismatched_lengths(_randn(64, 128))


@pallasite.kernel(config=pallasite.Config(block_sizes=[16, 128]))
def transposed_broadcast(x):
    m, n = x.size()
    out = torch.empty([n, m], dtype=x.dtype, device=x.device)
    for tm, tn in hl.tile([m, n]):
        out[tn, tm] = x[tm.index[None, :], tn.index[:, None]]
    return out


def test_broadcast_tile_indices_read_the_block_not_a_gather():
    x = _randn(40, 300)
    call = only_call(broadcast_indices, (x,))
    assert all(a.gather is None for a in call.accesses.values())  # the (16, 128) block itself
    _, out = code_and_output(transposed_broadcast, (x,))  # torch orders the pairs as broadcast: (n, m)
    assert torch.equal(out, x.T)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8]))
def shifted_pairs(x, labels, c: hl.constexpr):
    m = x.size(0)
    beside_the_diagonal = torch.zeros([m], dtype=x.dtype)
    shifted_rows = torch.zeros([m], dtype=x.dtype)
    for t in hl.tile(m):
        beside_the_diagonal[t] = x[t.index, t.index + c]
        shifted_rows[t] = x[t.index + c, labels[t]]
    return beside_the_diagonal, shifted_rows


@pytest.mark.parametrize("c", [-3, -2, 2, 40])
def test_a_shifted_tile_index_beside_another_reads_0_outside_the_tensor(c):
    """A trial's finding: a shifted tile's positions (`t.index + c`) outside the tensor read 0,
    as alone; paired with another index tensor, the compiled kernel raised a range error
    (`x[t.index, t.index + c]`) and reference mode wrapped negative positions or raised."""
    x = torch.arange(37 * 37, dtype=torch.float32).reshape(37, 37) + 1
    labels = _randint(37, 37, 3)
    i = torch.arange(37)
    column, row = i + c, i + c
    expected = (torch.where((column >= 0) & (column < 37), x[i, column.clamp(0, 36)], 0.0),
                torch.where((row >= 0) & (row < 37), x[row.clamp(0, 36), labels.long()], 0.0))
    for result in (code_and_output(shifted_pairs, (x, labels, c))[1], run_ref(shifted_pairs, (x, labels, c))):
        for got, want in zip(result, expected):
            assert torch.equal(got, want)
