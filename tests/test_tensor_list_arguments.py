"""A list or tuple of tensors as a kernel argument (Helion's `bufs: list[torch.Tensor]`).

Each tensor of the sequence is an input of its own (`bufs__item_0`, ...), read at every
call and written back where the kernel writes it; its shape and dtype key the variant, as
the sequence's length and its other items do.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def store_then_matmul(x, bufs):
    m, h = x.shape
    out = torch.empty([m, h], dtype=torch.float32, device=x.device)
    for tm, th in hl.tile([m, h]):
        bufs[1][tm, th] = x[tm, th] * 2.0
    for tm, tn in hl.tile([m, h]):
        acc = hl.zeros([tm, tn], dtype=torch.float32)
        for tk in hl.tile(h):
            acc = torch.addmm(acc, bufs[1][tm, tk], bufs[0][tk, tn])
        out[tm, tn] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_list_of_tensors_is_read_and_written_as_separate_inputs(loop_type):
    """It was refused ("pass tensors as separate arguments"); Helion's megakernel suite passes one."""
    x, w = torch.randn(16, 256), torch.randn(256, 256)
    y = torch.zeros(16, 256)
    code, out = code_and_output(store_then_matmul, (x, [w, y]), block_sizes=[16, 128, 16, 128, 128],
                                pallas_loop_type=loop_type)
    torch.testing.assert_close(out, (x * 2.0) @ w, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(y, x * 2.0)  # written back into the caller's tensor
    assert "bufs__item_1" in code
    y_ref = torch.zeros(16, 256)
    torch.testing.assert_close(run_ref(store_then_matmul, (x, [w, y_ref]), block_sizes=[16, 128, 16, 128, 128]),
                               (x * 2.0) @ w, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(y_ref, x * 2.0)


@pallasite.kernel
def weighted_sum(xs, scales):
    out = torch.zeros_like(xs[0])
    for t in hl.tile(out.size(0)):
        acc = hl.zeros([t], dtype=torch.float32)
        for i in hl.static_range(len(xs)):
            acc = acc + xs[i][t] * scales[i]
        out[t] = acc
    return out


def test_each_call_reads_the_tensors_it_is_given_and_keys_by_their_shapes():
    a, b, c = (torch.randn(100) for _ in range(3))
    torch.testing.assert_close(weighted_sum((a, b), (2.0, -1.0)), 2.0 * a - b)
    torch.testing.assert_close(weighted_sum((c, a), (2.0, -1.0)), 2.0 * c - a)  # same variant, new data
    torch.testing.assert_close(weighted_sum([a, b, c], (1.0, 1.0, 0.5)), a + b + 0.5 * c)
    longer = [torch.randn(300) for _ in range(2)]
    torch.testing.assert_close(weighted_sum(longer, [1.0, 3.0]), longer[0] + 3.0 * longer[1])
    torch.testing.assert_close(run_ref(weighted_sum, ((a, b), (2.0, -1.0))), 2.0 * a - b)


def test_a_nested_or_float64_list_item_is_a_clear_argument_error():
    a = torch.randn(8)
    with pytest.raises(exc.KernelArgumentError, match="xs"):
        weighted_sum([[a, a]], (1.0,))
    with pytest.raises(exc.KernelArgumentError, match="xs"):
        weighted_sum([a.double()], (1.0,))


@pallasite.kernel
def rows_by_listed_indices(table, idxs):
    out = torch.empty([idxs[0].size(0), table.size(1)], dtype=table.dtype)
    for t in hl.tile(idxs[0].size(0)):
        out[t, :] = table[idxs[0][t], :]
    return out


def test_an_int64_index_tensor_in_a_list_is_range_checked_in_both_modes():
    """Reference mode read row 3 for 2**32 + 3 in a list argument; compiled refused (trial AA)."""
    table = torch.randn(16, 8)
    for run in (lambda i: code_and_output(rows_by_listed_indices, (table, [i]))[1],
                lambda i: run_ref(rows_by_listed_indices, (table, [i]))):
        torch.testing.assert_close(run(torch.full((8,), 3)), table[torch.full((8,), 3)])
        with pytest.raises(exc.KernelArgumentError, match="4294967299"):
            run(torch.full((8,), 2**32 + 3))


def test_errors_name_a_list_items_tensor_as_the_user_wrote_it():
    """Errors said `idxs__item_0[t]` and `table.size(0)` of `bufs__item_0`: the generated
    code's parameter names; they now say `idxs[0]` (naming.as_written), in both modes."""
    table = torch.randn(16, 8)
    for run in (lambda i: code_and_output(rows_by_listed_indices, (table, [i]))[1],
                lambda i: run_ref(rows_by_listed_indices, (table, [i]))):
        with pytest.raises(exc.PallasiteError) as info:
            run(torch.full((8,), 20))
        assert "idxs[0]" in str(info.value) and "__item_" not in str(info.value)


@pallasite.kernel(static_shapes=False)
def sums_of_segments(group):
    x, offsets = group[0], group[1]
    rows, m = offsets.size(0) - 1, x.size(1)
    used = x[:offsets[-1].item()]  # an element of a list item, read on the host
    out = torch.zeros([rows, m], dtype=x.dtype, device=x.device)
    for tile_b in hl.tile(rows):
        first, last = offsets[tile_b], offsets[tile_b.index + 1]
        for tile_m in hl.tile(m):
            total = hl.zeros([tile_b, tile_m], dtype=x.dtype)
            for tile_k in hl.tile(0, (last - first).amax()):
                live = tile_k.index[None, :] < (last - first)[:, None]
                rows_read = torch.where(live, first[:, None] + tile_k.index[None, :], 0)
                total = total + torch.where(live[:, :, None], used[rows_read, tile_m], 0.0).sum(1)
            out[tile_b, tile_m] = total
    return out


def test_an_element_of_a_list_item_read_on_the_host_binds_once():
    """Fuzz seed 16881 case 90: `group[1][-1].item()` made binding loop forever (the element
    was recorded under the item's name, which the argument specs never read)."""
    x = torch.randn(40, 8, generator=torch.Generator().manual_seed(0))
    offsets = torch.tensor([0, 5, 5, 31], dtype=torch.int32)
    expected = torch.stack([x[a:b].sum(0) for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())])
    for result in (code_and_output(sums_of_segments, ([x, offsets],))[1], run_ref(sums_of_segments, ([x, offsets],))):
        torch.testing.assert_close(result, expected)
