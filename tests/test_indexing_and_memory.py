"""Indexing forms, tile attributes, scalars, and where each tensor lives.

Each test is a kernel, an input, a torch reference and an assertion; where
the schedule matters it also asserts on the plan: which tensors are inputs,
outputs or aliased in-place updates, which live in SMEM, and the grid's
dimension semantics.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.index_expr import Binary, BinaryOp, Const, GridIndex, TableRead
from pallasite.testing import check_tpu_lowering, code_and_output
from plan_helpers import names, only_call, randn


# ------------------------------------------------------------ tile indexing --


@pallasite.kernel
def shift_1d(x: torch.Tensor) -> torch.Tensor:
    (n,) = x.size()
    out = torch.empty_like(x)
    for tile in hl.tile(n, block_size=128):
        out[tile] = x[tile] + 1
    return out


def test_1d_tile_with_partial_last_block():
    x = randn(300)
    torch.testing.assert_close(shift_1d(x), x + 1)


@pallasite.kernel
def add_2d(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
        out[tile_m, tile_n] = x[tile_m, tile_n] + y[tile_m, tile_n]
    return out


def test_2d_tiles_partial_on_both_axes_run_in_parallel():
    x, y = randn(12, 200, seed=1), randn(12, 200, seed=2)
    torch.testing.assert_close(add_2d(x, y), x + y)
    call = only_call(add_2d, (x, y))
    assert [axis.num_blocks for axis in call.grid] == [2, 2]
    assert [axis.semantics for axis in call.grid] == ["parallel", "parallel"]


@pallasite.kernel
def tunable_2d(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([m, n], block_size=[None, 128]):
        out[tile_m, tile_n] = x[tile_m, tile_n] * 2
    return out


def test_tunable_block_size_comes_from_config():
    x = randn(24, 256, seed=3)
    _, result = code_and_output(tunable_2d, (x,), block_sizes=[8])
    torch.testing.assert_close(result, x * 2)
    assert [axis.num_blocks for axis in only_call(tunable_2d, (x,), block_sizes=[8]).grid] == [3, 2]


@pallasite.kernel
def rows_and_columns(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.size()
    scaled_rows = torch.empty_like(x)
    column_sums = torch.empty([n], dtype=x.dtype)
    for tile_m in hl.tile(m, block_size=8):
        scaled_rows[tile_m, :] = x[tile_m, :] * w[:][None, :]
    for tile_n in hl.tile(n, block_size=128):
        column_sums[tile_n] = x[:, tile_n].sum(0) + x[0, tile_n] - x[-1, tile_n]
    return scaled_rows, column_sums


def test_full_slices_and_integer_indices():
    x, w = randn(16, 256, seed=4), randn(256, seed=5)
    scaled_rows, column_sums = rows_and_columns(x, w)
    torch.testing.assert_close(scaled_rows, x * w)
    torch.testing.assert_close(column_sums, x.sum(0) + x[0] - x[-1], atol=1e-5, rtol=1e-5)


@pallasite.kernel
def new_axis_loads(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
        out[tile_m, tile_n] = x[tile_m, None, tile_n][:, 0, :] + bias[None, tile_n]
    return out


def test_none_axes_in_a_subscript():
    x, bias = randn(16, 256, seed=6), randn(256, seed=7)
    torch.testing.assert_close(new_axis_loads(x, bias), x + bias[None, :])


@pallasite.kernel
def tile_index_subscripts(x: torch.Tensor) -> torch.Tensor:
    (n,) = x.size()
    out = torch.empty_like(x)
    for tile in hl.tile(n, block_size=128):
        out[tile.index] = x[tile.index] * 2 + tile.index.to(torch.float32)
    return out


def test_tile_index_as_subscript_and_value():
    x = randn(300, seed=8)
    torch.testing.assert_close(tile_index_subscripts(x), x * 2 + torch.arange(300).float())


@pallasite.kernel
def row_differences(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m // 8, n], dtype=x.dtype)
    for tile_n, tile_m in hl.tile([n, m], block_size=[128, 8]):
        out[tile_m.id, tile_n] = x[tile_m.begin + 1, tile_n] - x[tile_m.begin, tile_n]
    return out


def test_scalar_index_from_tile_begin_arithmetic():
    x = randn(16, 256, seed=9)
    torch.testing.assert_close(row_differences(x), x[1::8] - x[0::8])
    # Each program writes its own row of `out` (tests/test_tile_id_rows.py): both axes parallel.
    assert [axis.semantics for axis in only_call(row_differences, (x,)).grid] == ["parallel", "parallel"]


@pallasite.kernel
def offset_tiles(x: torch.Tensor) -> torch.Tensor:
    (n,) = x.size()
    out = torch.zeros_like(x)
    for tile in hl.tile(256, n, block_size=128):
        out[tile] = x[tile] * 2
    return out


def test_tile_with_begin_a_multiple_of_the_block():
    x = randn(600, seed=10)
    expected = torch.zeros(600)
    expected[256:] = x[256:] * 2
    torch.testing.assert_close(offset_tiles(x), expected)
    assert only_call(offset_tiles, (x,)).grid[0].num_blocks == 3


@pallasite.kernel
def misaligned_begin(x: torch.Tensor) -> torch.Tensor:
    (n,) = x.size()
    out = torch.zeros_like(x)
    for tile in hl.tile(100, n, block_size=128):
        out[tile] = x[tile]
    return out


def test_a_tile_begin_not_a_multiple_of_the_block_runs_on_a_resident_axis():
    x = randn(600)
    expected = torch.zeros_like(x)
    expected[100:] = x[100:]
    torch.testing.assert_close(misaligned_begin(x), expected)


@pallasite.kernel
def mixed_axis_indexing(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
        out[tile_m, tile_n] = x[tile_m, tile_n] + x[tile_m, 0][:, None]
    return out


def test_one_axis_indexed_by_a_tile_and_a_scalar():
    x = randn(16, 256)
    torch.testing.assert_close(mixed_axis_indexing(x), x + x[:, :1])


# ----------------------------------------------------------- grid indexing --


@pallasite.kernel
def scale_batches(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    b, s, d = x.size()
    out = torch.empty_like(x)
    for g in hl.grid(b):
        out[g, :, :] = x[g, :, :] * scale[g]
    return out


def test_grid_index_and_per_program_table_in_smem():
    x, scale = randn(3, 16, 128, seed=11), randn(3, seed=12)
    torch.testing.assert_close(scale_batches(x, scale), x * scale[:, None, None])
    call = only_call(scale_batches, (x, scale))
    memory = {operand.symbol.name: operand.memory for operand in call.inputs}
    assert memory == {"x": "vmem_block", "scale": "smem"}
    assert call.inputs[0].block_shape == (None, 16, 128)  # the batch axis is squeezed
    assert [axis.semantics for axis in call.grid] == ["parallel"]


@pallasite.kernel
def per_head_bias(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    batch, heads, seq, dim = x.size()
    out = torch.empty_like(x)
    for bh, tile_s in hl.tile([batch * heads, seq], block_size=[1, 8]):
        b = bh.begin // heads
        h = bh.begin % heads
        out[b, h, tile_s, :] = x[b, h, tile_s, :] + bias[h] * (b + 1)
    return out


def test_grid_index_arithmetic_on_a_4d_tensor():
    x, bias = randn(2, 3, 16, 128, seed=13), randn(3, seed=14)
    expected = x + bias[None, :, None, None] * torch.tensor([1.0, 2.0])[:, None, None, None]
    torch.testing.assert_close(per_head_bias(x, bias), expected)
    call = only_call(per_head_bias, (x, bias))
    assert call.inputs[0].block_shape == (None, None, 8, 128)
    # Block indices are expression trees of the grid index: b = bh // 3, h = bh % 3.
    assert [axis.index for axis in call.inputs[0].axes[:2]] == [
        Binary(BinaryOp.FLOORDIV, GridIndex(0), Const(3)), Binary(BinaryOp.MOD, GridIndex(0), Const(3))]
    assert {op.symbol.name: op.memory for op in call.inputs}["bias"] == "smem"
    assert [axis.semantics for axis in call.grid] == ["parallel", "parallel"]


@pallasite.kernel
def per_head_grid(x: torch.Tensor) -> torch.Tensor:
    batch, heads, seq, dim = x.size()
    out = torch.empty_like(x)
    for bh in hl.grid(batch * heads):
        b = bh // heads
        h = bh % heads
        out[b, h, :, :] = x[b, h, :, :] * (h + 1) - b
    return out


def test_hl_grid_index_split_into_batch_and_head():
    x = randn(2, 3, 8, 128, seed=15)
    h = torch.arange(3).float()[None, :, None, None]
    b = torch.arange(2).float()[:, None, None, None]
    torch.testing.assert_close(per_head_grid(x), x * (h + 1) - b)
    assert [axis.semantics for axis in only_call(per_head_grid, (x,)).grid] == ["parallel"]


def test_grid_index_arithmetic_lowers_to_mosaic():
    check_tpu_lowering(per_head_bias, (randn(2, 3, 16, 128), randn(3)))


@pallasite.kernel
def gather_row(x: torch.Tensor, row: int) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([n], dtype=x.dtype)
    for tile_n in hl.tile(n, block_size=128):
        out[tile_n] = x[row, tile_n] * 2
    return out


def test_runtime_int_scalar_as_an_index():
    x = randn(16, 256, seed=16)
    torch.testing.assert_close(gather_row(x, 3), x[3] * 2)
    torch.testing.assert_close(gather_row(x, 11), x[11] * 2)
    assert len(gather_row.bind((x, 3))._compiled) == 1


@pallasite.kernel
def pick_batch(x: torch.Tensor, batch: int) -> torch.Tensor:
    b, s, d = x.size()
    out = torch.empty([s, d], dtype=x.dtype)
    for tile_s in hl.tile(s, block_size=8):
        out[tile_s, :] = x[batch, tile_s, :]
    return out


def test_runtime_scalar_choosing_a_block_is_scalar_prefetched():
    x = randn(2, 16, 128)
    torch.testing.assert_close(pick_batch(x, 1), x[1])
    torch.testing.assert_close(pick_batch(x, 0), x[0])  # same compiled kernel, new scalar
    call = only_call(pick_batch, (x, 1))
    assert names(call.scalar_prefetch) == ["batch"]
    x_operand = next(op for op in call.inputs if op.symbol.name == "x")
    batch = call.scalar_prefetch[0].symbol
    assert x_operand.axes[0].kind == "squeezed" and x_operand.axes[0].index == TableRead(batch)
    check_tpu_lowering(pick_batch, (x, 1), chips=("v5e",))


@pallasite.kernel
def permute_blocks(x: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    b, m, n = x.size()
    out = torch.empty_like(x)
    for g in hl.grid(b):
        out[g, :, :] = x[perm[g], :, :] * 2
    return out


def test_table_values_choosing_blocks_are_scalar_prefetched():
    x = randn(4, 16, 128)
    perm = torch.tensor([2, 0, 3, 1], dtype=torch.int32)
    torch.testing.assert_close(permute_blocks(x, perm), x[perm.long()] * 2)
    call = only_call(permute_blocks, (x, perm))
    assert names(call.scalar_prefetch) == ["perm"]
    perm_symbol = call.scalar_prefetch[0].symbol
    assert next(op for op in call.inputs if op.symbol.name == "x").axes[0].index == TableRead(perm_symbol, (GridIndex(0),))
    check_tpu_lowering(permute_blocks, (x, perm), chips=("v7x",))


# --------------------------------------------------------- tile attributes --


@pallasite.kernel
def tile_attributes(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    (n,) = x.size()
    positions = torch.empty([n], dtype=torch.int32)
    info = torch.empty([4, 5], dtype=torch.int32)
    for tile in hl.tile(n, block_size=128):
        positions[tile] = tile.index
        info[tile.id, 0] = tile.begin
        info[tile.id, 1] = tile.end
        info[tile.id, 2] = tile.block_size
        info[tile.id, 3] = tile.id
        info[tile.id, 4] = tile.count
    return positions, info


def test_tile_attributes_stored_as_values():
    positions, info = tile_attributes(randn(400))
    torch.testing.assert_close(positions, torch.arange(400, dtype=torch.int32))
    expected = torch.tensor(
        [[0, 128, 128, 0, 4], [128, 256, 128, 1, 4], [256, 384, 128, 2, 4], [384, 400, 128, 3, 4]],
        dtype=torch.int32,
    )
    torch.testing.assert_close(info, expected)  # the last tile's end is clamped to 400


def test_tables_read_at_scalar_indices_live_in_smem():
    call = only_call(tile_attributes, (randn(400),))
    memory = {operand.symbol.name: operand.memory for operand in call.outputs}
    assert memory == {"positions": "vmem_block", "info": "smem"}


@pallasite.kernel
def offset_lookup(x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
        shift = offsets[tile_m.id] + offsets[tile_n.id + 2]
        out[tile_m, tile_n] = x[tile_m, tile_n] + shift
    return out


def test_int_table_indexed_by_tile_ids_in_smem():
    x = randn(16, 256, seed=17)
    offsets = torch.tensor([10, 20, 1, 2], dtype=torch.int32)
    expected = x + torch.tensor([[11.0, 12.0], [21.0, 22.0]]).repeat_interleave(8, 0).repeat_interleave(128, 1)
    torch.testing.assert_close(offset_lookup(x, offsets), expected)
    call = only_call(offset_lookup, (x, offsets))
    assert {op.symbol.name: op.memory for op in call.inputs} == {"x": "vmem_block", "offsets": "smem"}


def test_smem_table_lowers_to_mosaic():
    check_tpu_lowering(offset_lookup, (randn(16, 256), torch.tensor([10, 20, 1, 2], dtype=torch.int32)))


# --------------------------------------------------- creation, specialize --


@pallasite.kernel
def created_values(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.size()
    out = torch.empty_like(x)
    columns = torch.empty([m, n], dtype=torch.int32)
    for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
        acc = hl.zeros([tile_m, tile_n])
        acc = acc + hl.full([tile_m, tile_n], 2.0) * x[tile_m, tile_n]
        out[tile_m, tile_n] = acc + hl.full([tile_m, 1], 0.5, torch.float32) + torch.ones_like(acc)
        columns[tile_m, tile_n] = hl.arange(128)[None, :] + tile_n.begin + hl.zeros([tile_m, tile_n], dtype=torch.int32)
    return out, columns


def test_hl_zeros_full_and_arange():
    x = randn(16, 256, seed=18)
    out, columns = created_values(x)
    torch.testing.assert_close(out, 2 * x + 1.5)
    torch.testing.assert_close(columns, torch.arange(256, dtype=torch.int32).expand(16, 256))


@pallasite.kernel
def arange_steps(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m, n], dtype=torch.float32)
    for tile_m in hl.tile(m, block_size=8):
        evens = hl.arange(0, 2 * n, 2).to(torch.float32)
        out[tile_m, :] = x[tile_m, :] + evens[None, :] + hl.arange(5, 5 + n, dtype=torch.int32)[None, :]
    return out


def test_hl_arange_with_begin_and_step():
    x = randn(8, 128, seed=19)
    expected = x + torch.arange(0, 256, 2).float() + torch.arange(5, 133)
    torch.testing.assert_close(arange_steps(x), expected)


@pallasite.kernel
def repeat_columns(x: torch.Tensor, copies: int) -> torch.Tensor:
    m, n = x.size()
    copies = hl.specialize(copies)
    out = torch.empty([m, n * copies], dtype=x.dtype)
    for tile_m in hl.tile(m, block_size=8):
        row = x[tile_m, :]
        out[tile_m, :] = row[:, None, :].expand(8, copies, n).reshape(8, n * copies)
    return out


def test_specialized_scalar_sizes_host_code_and_recompiles_per_value():
    x = randn(8, 128, seed=20)
    repeat_columns.reset()
    torch.testing.assert_close(repeat_columns(x, 2), x.repeat(1, 2))
    torch.testing.assert_close(repeat_columns(x, 3), x.repeat(1, 3))
    assert repeat_columns.bind((x, 2)) is not repeat_columns.bind((x, 3))
