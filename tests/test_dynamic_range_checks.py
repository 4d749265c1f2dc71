"""`static_shapes=False` with run-time range checks (issue #7 §6).

A gather, a scatter, a data-dependent loop range, a table-chosen block and a
host subscript are checked in interpret mode against a tensor's size. That
limit is the call's own size (the generated code passes `limit=table_size0`
where it checks), so one variant serves every size of the bucket and an index
outside the *current* table still raises, whichever size came first.
"""
from __future__ import annotations

import warnings

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.runtime.kernel import BoundKernel
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref



def _table(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _indices(n, rows, seed=1):
    return torch.randint(0, rows, (n,), generator=torch.Generator().manual_seed(seed), dtype=torch.int32)


@pallasite.kernel(static_shapes=False, config=pallasite.Config(block_sizes=[32]))
def gather_rows(table, indices):
    n = indices.size(0)
    out = torch.empty([n, table.size(1)], dtype=table.dtype, device=table.device)
    for tile in hl.tile(n):
        out[tile, :] = table[indices[tile], :]
    return out


@pallasite.kernel(static_shapes=False, config=pallasite.Config(block_sizes=[32]))
def scatter_rows(out, x, dest):
    for tile in hl.tile(x.size(0)):
        out[dest[tile], :] = x[tile, :] * 2
    return out


@pallasite.kernel(static_shapes=False, config=pallasite.Config(block_sizes=[32]))
def bag_sums(table, indices):
    bags, bag_size = indices.size()
    out = torch.empty([bags, table.size(1)], dtype=torch.float32, device=table.device)
    for g in hl.grid(bags):
        acc = hl.zeros([table.size(1)], dtype=torch.float32)
        for tile in hl.tile(bag_size):
            acc = acc + table[indices[g, tile], :].sum(0)
        out[g, :] = acc
    return out


def _scattered(out, dest, values):
    expected = out.clone()
    for lane, row in enumerate(dest.tolist()):
        expected[row] = values[lane]
    return expected


# Two sizes of one bucket: other table rows and other index lengths (partial last tiles).
SIZES = [(64, 70), (40, 100)]


def test_a_gather_serves_two_sizes_with_one_variant():
    gather_rows.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no size is pinned
        for rows, n in SIZES:
            table, indices = _table(rows, 128), _indices(n, rows)
            code, out = code_and_output(gather_rows, (table, indices))
            assert torch.equal(out, table[indices.long()])
            assert torch.equal(gather_rows(table, indices), table[indices.long()])
    assert gather_rows.cache_size == 1
    assert "limit=table_size0" in code and "64" not in code and "40" not in code
    check_tpu_lowering(gather_rows, (_table(48, 128), _indices(90, 48)), chips=("v5e", "v6e", "v7x"))


def test_a_scatter_serves_two_sizes_with_one_variant():
    scatter_rows.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rows, n in SIZES:
            out, x, dest = _table(rows, 128, seed=3), _table(n, 128), _indices(n, rows)
            expected = _scattered(out, dest, x * 2)
            code, result = code_and_output(scatter_rows, (out.clone(), x, dest))
            assert torch.equal(result, expected)
    assert scatter_rows.cache_size == 1
    assert "limit=out_size0" in code
    check_tpu_lowering(scatter_rows, (_table(48, 128), _table(90, 128), _indices(90, 48)),
                       chips=("v5e", "v6e", "v7x"))


def test_a_gather_by_row_dma_serves_two_sizes_and_checks_each():
    gather_rows.reset()
    config = {"block_sizes": [32], "pallas_indirect_access_mode": "dma"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rows, n in SIZES:
            table, indices = _table(rows, 128), _indices(n, rows)
            code, out = code_and_output(gather_rows, (table, indices), **config)
            assert torch.equal(out, table[indices.long()])
    assert gather_rows.cache_size == 1
    assert "stays in HBM" in code and "limit=table_size0" in code
    indices = _indices(100, 40)
    indices[60] = 40
    with pytest.raises(exc.ShapeMismatch, match=r"is 40 but table.size\(0\) is 40"):
        code_and_output(gather_rows, (_table(40, 128), indices), **config)
    check_tpu_lowering(gather_rows, (_table(48, 128), _indices(90, 48)), chips=("v7x",), **config)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_gather_in_an_inner_loop_serves_two_sizes(loop_type):
    bag_sums.reset()
    for rows, bag in [(40, 70), (56, 45)]:
        table, indices = _table(rows, 128), _indices(3 * bag, rows).reshape(3, bag)
        _, out = code_and_output(bag_sums, (table, indices), pallas_loop_type=loop_type)
        torch.testing.assert_close(out, table[indices.long()].sum(1), rtol=1e-5, atol=1e-4)
    assert bag_sums.cache_size == 1
    bad = _indices(3 * 45, 50).reshape(3, 45)
    bad[2, 44] = 50  # inside the first call's table (56 rows), outside this one (50)
    with pytest.raises(exc.ShapeMismatch, match=r"is 50 but table.size\(0\) is 50"):
        code_and_output(bag_sums, (_table(50, 128), bad), pallas_loop_type=loop_type)
    assert bag_sums.cache_size == 1
    check_tpu_lowering(bag_sums, (_table(40, 128), _indices(140, 40).reshape(2, 70)), chips=("v7x",),
                       pallas_loop_type=loop_type)


@pytest.mark.parametrize("first, second", [(64, 40), (40, 64)])
def test_an_index_outside_the_current_table_is_an_error_whichever_size_came_first(first, second):
    """The limit is each call's own table size, not the first call's."""
    gather_rows.reset()
    table = _table(first, 128)
    indices = _indices(70, first)
    assert torch.equal(gather_rows(table, indices), table[indices.long()])
    table = _table(second, 128)
    for bad in (second, -1, max(first, second) - 1 if second < first else second + 5):
        indices = _indices(100, second)
        indices[77] = bad
        with pytest.raises(exc.ShapeMismatch) as info:
            gather_rows(table, indices)
        message = str(info.value)
        assert f"is {bad} but table.size(0) is {second}" in message
        assert f"must lie in [0, {second})" in message and "table_size0" not in message
        assert "out[tile, :] = table[indices[tile], :]" in message
    if second > first:  # an index the first table could not hold is fine in this one
        indices = _indices(100, second)
        indices[5] = second - 1
        assert torch.equal(gather_rows(table, indices), table[indices.long()])
    assert gather_rows.cache_size == 1


@pytest.mark.parametrize("first, second", [(64, 40), (40, 64)])
def test_an_index_outside_the_current_destination_is_an_error(first, second):
    scatter_rows.reset()
    out, x = _table(first, 128), _table(70, 128)
    dest = _indices(70, first)
    assert torch.equal(scatter_rows(out.clone(), x, dest), _scattered(out, dest, x * 2))
    out, x, dest = _table(second, 128), _table(100, 128), _indices(100, second)
    dest[99] = second
    with pytest.raises(exc.ShapeMismatch, match=rf"is {second} but out.size\(0\) is {second}"):
        scatter_rows(out.clone(), x, dest)
    with pytest.raises(exc.ShapeMismatch, match=f"{second}"):
        run_ref(scatter_rows, (out.clone(), x, dest))
    assert scatter_rows.cache_size == 1


@pallasite.kernel(static_shapes=False)
def permute_blocks(x, perm):
    out = torch.empty_like(x)
    for g in hl.grid(x.size(0)):
        out[g, :, :] = x[perm[g], :, :] * 2
    return out


def test_a_table_chosen_block_serves_two_sizes_and_checks_each():
    permute_blocks.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for b in (4, 6):
            x, perm = _table(b, 16, 128), torch.randperm(b, generator=torch.Generator().manual_seed(b)).int()
            torch.testing.assert_close(permute_blocks(x, perm), x[perm.long()] * 2)
    assert permute_blocks.cache_size == 1
    x, perm = _table(4, 16, 128), torch.tensor([0, 1, 4, 2], dtype=torch.int32)  # 4 is in the 6-row x
    with pytest.raises(exc.ShapeMismatch, match=r"is 4 but x.size\(0\) is 4"):
        permute_blocks(x, perm)
    assert permute_blocks.cache_size == 1


@pallasite.kernel(static_shapes=False, ignore_warnings=[exc.TensorOperationInWrapper])  # the host store
def zero_rows_then_add_one(x, idx):
    x[idx] = 0.0  # a host subscript: JAX would clamp, interpret mode checks
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0), block_size=8):
        out[t, :] = x[t, :] + 1
    return out


def test_a_host_subscript_serves_two_sizes_and_checks_each():
    zero_rows_then_add_one.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rows, n in [(16, 3), (24, 5)]:
            x, idx = _table(rows, 256), _indices(n, rows)
            expected = x.clone()
            expected[idx.long()] = 0.0
            torch.testing.assert_close(zero_rows_then_add_one(x, idx), expected + 1)
            torch.testing.assert_close(x, expected)
    assert zero_rows_then_add_one.cache_size == 1
    x, idx = _table(16, 256), torch.tensor([1, 20, 2], dtype=torch.int32)  # 20 is in the 24-row x
    with pytest.raises(exc.ShapeMismatch, match=r"holds 20, outside axis 0 of 'x' \(size 16\)") as info:
        zero_rows_then_add_one(x, idx)
    assert "[-16, 16)" in str(info.value) and "x[idx] = 0.0" in str(info.value)
    assert zero_rows_then_add_one.cache_size == 1


@pallasite.kernel(static_shapes=False, ignore_warnings=[exc.TensorOperationInWrapper])  # the host gather
def gather_then_scale(x, idx):
    picked = x[idx]  # its rows are idx's length: a size formula, not the first call's number
    out = torch.empty_like(picked)
    for t in hl.tile(picked.size(0), block_size=8):
        out[t, :] = picked[t, :] * 3
    return out


def test_a_host_gather_serves_two_sizes_and_checks_each():
    gather_then_scale.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rows, n in [(16, 8), (24, 19)]:
            x, idx = _table(rows, 256), _indices(n, rows)
            code, out = code_and_output(gather_then_scale, (x, idx))
            torch.testing.assert_close(out, x[idx.long()] * 3)
    assert gather_then_scale.cache_size == 1
    assert "pl.cdiv(idx_size0, 8)" in code
    x, idx = _table(16, 256), _indices(8, 16)
    idx[3] = 20  # inside the 24-row x, outside this one
    with pytest.raises(exc.ShapeMismatch, match=r"holds 20, outside axis 0 of 'x' \(size 16\)"):
        gather_then_scale(x, idx)
    assert gather_then_scale.cache_size == 1
    check_tpu_lowering(gather_then_scale, (_table(24, 256), _indices(19, 24)), chips=("v7x",))


# ------------------------------------------------ config resolved at call sizes --


def _chunked_row_sum():
    @pallasite.kernel(static_shapes=False, config=pallasite.Config(reduction_loops=[100]))
    def chunked_row_sum(x):
        m, n = x.size()
        out = torch.empty([m], dtype=torch.float32, device=x.device)
        for tm in hl.tile(m):
            out[tm] = x[tm, :].sum(-1)
        return out
    return chunked_row_sum


def test_a_config_resolved_again_at_call_sizes_is_resolved_once_per_sizes(monkeypatch):
    calls = []
    resolve_at = BoundKernel._resolve_at

    def counted(self, config, sizes):
        calls.append((None if config is None else dict(pallasite.Config(**config) if isinstance(config, dict)
                                                       else config), tuple(sorted(sizes.items()))))
        return resolve_at(self, config, sizes)

    monkeypatch.setattr(BoundKernel, "_resolve_at", counted)
    kernel = _chunked_row_sum()
    with pytest.raises(exc.InvalidConfig, match="not a legal chunk"):
        kernel(torch.randn(20, 300))  # bound here: the declared chunk holds at no size >= 101
    small, other = torch.randn(20, 37), torch.randn(24, 60)
    for x in (small, small, other, small, other):
        torch.testing.assert_close(kernel(x), x.sum(-1))
    bound = kernel.bind((small,))
    for _ in range(2):
        compiled = bound.compile_config(None, bound.sizes_of((small,)))
        torch.testing.assert_close(compiled(small), small.sum(-1))
        _, out = code_and_output(kernel, (small,), reduction_loops=[100])
        torch.testing.assert_close(out, small.sum(-1))
    # once per config asked for and sizes (None: the kernel's own), never again for the same ones
    small_sizes = tuple(sorted(bound.sizes_of((small,)).items()))
    assert [sizes for _, sizes in calls].count(small_sizes) == 2
    assert len(calls) == len({repr(call) for call in calls})
    assert kernel.cache_size == 1
