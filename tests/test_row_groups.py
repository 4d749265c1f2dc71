"""A read-only row chosen by a scalar (`table[tok, :]`, `x[g, :]`) is read from the group of
rows holding it (a BlockSpec block of the dtype's sublane tile, chosen by the index map), not
from the whole table in VMEM: Helion's decode steps read one token's row of a 2 GiB embedding
so. A TPU block cannot squeeze a tensor's second-to-last dim, so the block keeps the group's
rows and the kernel reads row `tok % group` of it."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.exc as exc
import pallasite.language as hl
from pallasite.plan.plans import BlockKind
from pallasite.testing import code_and_output, run_ref

from plan_helpers import randn


@pallasite.kernel
def embed_token(token, table, scale):
    """out[0, :] = table[token[0], :] * scale (a decode step's embedding)."""
    out = torch.empty([1, table.size(1)], dtype=table.dtype, device=table.device)
    for _ in hl.grid(1):
        tok = token[0]
        out[0, :] = table[tok, :] * scale
    return out


@pallasite.kernel
def rows_by_grid_index(x, w):
    """out[g, tile] = x[g, :].sum() * w[tile]: each program reads its own row of x."""
    rows = x.size(0)
    out = torch.empty([rows, w.size(0)], dtype=torch.float32, device=x.device)
    for g, tile in hl.tile([rows, w.size(0)], block_size=[1, None]):
        row = x[g.begin, :].to(torch.float32)
        out[g.begin, tile] = torch.sum(row) * w[tile]
    return out


@pallasite.kernel
def pick_rows(ids, table):
    """out[i, :] = table[ids[i], :] for each grid step i: rows picked by data, in any order."""
    count = ids.size(0)
    out = torch.empty([count, table.size(1)], dtype=table.dtype, device=table.device)
    for i in hl.grid(count):
        out[i, :] = table[ids[i], :]
    return out


def _table_axis(kernel, args, name, **config):
    (call,) = kernel.bind(args).plan(pallasite.Config(**config) if config else None).calls
    (operand,) = [op for op in call.inputs if op.symbol.name == name]
    return operand, call


@pytest.mark.parametrize("dtype, group", [(torch.float32, 8), (torch.bfloat16, 16), (torch.int8, 32)])
def test_a_data_chosen_row_reads_its_group_of_rows(dtype, group):
    table = (randn(1000, 256, dtype=torch.float32) * 10).to(dtype)
    token = torch.tensor([613], dtype=torch.int32)
    operand, call = _table_axis(embed_token, (token, table, 2), "table")
    row_axis = operand.axes[0]
    assert row_axis.kind is BlockKind.ROW_GROUP and row_axis.size == group
    assert operand.block_shape == (group, 256)
    assert any(op.symbol.name == "token" for op in call.scalar_prefetch)
    code, result = code_and_output(embed_token, (token, table, 2))
    assert f"% {group}" in code
    torch.testing.assert_close(result, table[613:614] * 2)
    torch.testing.assert_close(run_ref(embed_token, (token, table, 2)), result)


def test_a_huge_embedding_plans_within_vmem():
    """Helion's qwen/gemma decode steps: a 2.4 GiB table was kept whole in VMEM and refused."""
    table = torch.empty(151936, 8192, dtype=torch.bfloat16, device="meta")
    token = torch.empty(1, dtype=torch.int32, device="meta")
    _, call = _table_axis(embed_token, (token, table, 2), "table")
    assert call.vmem_bytes < 2 * 2**20  # two buffers of 16 rows x 8192 bf16 (512 KiB) and the output


def test_the_last_partial_group_and_row_zero():
    table = randn(21, 128)  # groups of 8: the last holds rows 16..20 only
    for row in (0, 7, 8, 20):
        token = torch.tensor([row], dtype=torch.int32)
        _, result = code_and_output(embed_token, (token, table, 3))
        torch.testing.assert_close(result, table[row:row + 1] * 3)


def test_a_row_past_the_table_is_a_shape_mismatch():
    table = randn(21, 128)
    for bad in (21, -1):
        with pytest.raises(exc.ShapeMismatch, match=r"table\[tok, :\]"):
            embed_token(torch.tensor([bad], dtype=torch.int32), table, 1)


def test_rows_chosen_by_a_grid_index_are_pipelined_per_group():
    x, w = randn(20, 256, dtype=torch.bfloat16), randn(384)
    operand, _ = _table_axis(rows_by_grid_index, (x, w), "x", block_sizes=[128])
    assert operand.axes[0].kind is BlockKind.ROW_GROUP
    _, result = code_and_output(rows_by_grid_index, (x, w), block_sizes=[128])
    expected = x.float().sum(1, keepdim=True) * w[None, :]
    torch.testing.assert_close(result, expected, atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(run_ref(rows_by_grid_index, (x, w), block_sizes=[128]), result)


def test_rows_picked_by_data_in_any_order():
    table = randn(300, 128)
    ids = torch.tensor([299, 0, 17, 17, 8, 150, 7], dtype=torch.int32)
    operand, _ = _table_axis(pick_rows, (ids, table), "table")
    assert operand.axes[0].kind is BlockKind.ROW_GROUP
    _, result = code_and_output(pick_rows, (ids, table))
    torch.testing.assert_close(result, table[ids.long()])
    torch.testing.assert_close(run_ref(pick_rows, (ids, table)), result)


def test_a_table_no_longer_than_a_group_stays_whole():
    table = randn(8, 128)
    operand, _ = _table_axis(embed_token, (torch.tensor([3], dtype=torch.int32), table, 1), "table")
    assert operand.axes[0].kind is BlockKind.FULL


@pallasite.kernel
def layer_rows(token, weights):
    """out[l, :] = weights[l, token[0], :] for each layer l: a leading axis squeezed by the
    grid index, the row's axis a group of rows."""
    layers, _, d = weights.size()
    out = torch.empty([layers, d], dtype=weights.dtype, device=weights.device)
    for layer in hl.grid(layers):
        out[layer, :] = weights[layer, token[0], :] + 1
    return out


def test_a_row_under_a_squeezed_leading_axis():
    weights = randn(3, 40, 128, dtype=torch.bfloat16)
    token = torch.tensor([33], dtype=torch.int32)
    operand, _ = _table_axis(layer_rows, (token, weights), "weights")
    assert [axis.kind for axis in operand.axes] == [BlockKind.SQUEEZED, BlockKind.ROW_GROUP, BlockKind.FULL]
    _, result = code_and_output(layer_rows, (token, weights))
    torch.testing.assert_close(result, weights[:, 33, :] + 1)
    torch.testing.assert_close(run_ref(layer_rows, (token, weights)), result)


@pallasite.kernel
def narrowed_row(ids, table, scale):
    """A narrowing read of a row read from its group (found by the trial: it crashed)."""
    n = ids.size(0)
    out = torch.empty([n, 128], dtype=table.dtype, device=table.device)
    for i in hl.grid(n):
        blk = table[ids[i], :]
        out[i, :] = blk[128:256] * scale + blk[0:128]
    return out


@pallasite.kernel
def row_total(ids, table):
    n = ids.size(0)
    out = torch.empty([n], dtype=torch.float32, device=table.device)
    for i in hl.grid(n):
        out[i] = table[ids[i], :].to(torch.float32).sum()
    return out


def test_a_narrowing_read_and_a_looped_reduction_of_a_grouped_row():
    table, ids = randn(50, 1024, dtype=torch.bfloat16), torch.tensor([49, 0, 20], dtype=torch.int32)
    _, result = code_and_output(narrowed_row, (ids, table[:, :256].contiguous(), 2))
    rows = table[ids.long(), :256]
    torch.testing.assert_close(result, rows[:, 128:] * 2 + rows[:, :128])
    _, totals = code_and_output(row_total, (ids, table), reduction_loops=[256])
    torch.testing.assert_close(totals, table[ids.long()].float().sum(1), atol=1e-3, rtol=1e-4)


def test_the_schedule_of_a_row_chosen_beside_a_scalar_argument():
    """A scalar argument the index map prefetches (the trial: the metrics read its shape)."""
    from pallasite.testing import schedule_report

    token, table = torch.tensor([19], dtype=torch.int32), randn(21, 256)
    report = schedule_report(embed_token, (token, table, 2))
    assert report["hbm_bytes"] < table.numel() * 4  # one group of rows, not the table
