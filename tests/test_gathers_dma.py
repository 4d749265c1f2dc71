"""Per-row DMA gathers (issue #7 §4, §6): `table[idx, :]` from a table that stays in HBM.

A table too large for VMEM is read one row per index: each row is copied by a
DMA from the pl.ANY table into VMEM scratch, its row index read as a scalar
from an SMEM copy of the index tensor. The plan chooses this lowering for a
table over the VMEM threshold (`pallas_indirect_access_mode="auto"`), or the
config forces it ("dma") or forbids it ("resident"). Tests lower the
threshold with `vmem_limit_bytes` (the threshold is a fraction of the VMEM
budget) instead of allocating large tables.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.gathers import GATHER_TABLE_VMEM_FRACTION
from pallasite.plan.loops import LOOP_TYPES
from pallasite.plan.plans import GatherMethod, Memory
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref

from plan_helpers import only_call

DMA = {"pallas_indirect_access_mode": "dma"}


def _table(*shape, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.int32:
        return torch.randint(-1000, 1000, shape, generator=generator, dtype=torch.int32)
    return torch.randn(shape, generator=generator).to(dtype)


def _indices(n, rows, seed=1):
    return torch.randint(0, rows, (n,), generator=torch.Generator().manual_seed(seed), dtype=torch.int32)


def _gathers(kernel, args, **config):
    call = only_call(kernel, args, **config)
    return call, [a.gather for a in call.accesses.values() if a.gather is not None]


@pallasite.kernel(config=pallasite.Config(block_sizes=[128]))
def gather_rows(table, indices):
    n = indices.size(0)
    out = torch.empty([n, *table.shape[1:]], dtype=table.dtype, device=table.device)
    for tile in hl.tile(n):
        idx = indices[tile]
        out[tile] = table[idx]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_rows_of_a_2d_table_by_dma(dtype):
    table = _table(64, 256, dtype=dtype)
    indices = _indices(200, 64)  # a partial last tile: its padding lanes copy nothing
    _, out = code_and_output(gather_rows, (table, indices), **DMA)
    assert torch.equal(out, table[indices.long()])
    call, (gather,) = _gathers(gather_rows, (table, indices), **DMA)
    assert gather.method is GatherMethod.ROW_DMA and gather.row_copy is not None
    assert "pallas_indirect_access_mode='dma'" in gather.reason
    (table_operand,) = [op for op in call.inputs if op.symbol.name == "table"]
    assert table_operand.memory is Memory.HBM
    assert any(op.symbol.name == "indices" and op.memory is Memory.SMEM for op in call.inputs)
    check_tpu_lowering(gather_rows, (table, indices), **DMA)


@pytest.mark.parametrize("dtype, shape", [
    (torch.float32, (16, 8, 128)), (torch.bfloat16, (16, 8, 128)), (torch.int32, (16, 8, 128)),
    (torch.float32, (16, 2, 8, 128)), (torch.bfloat16, (16, 2, 1, 16, 128))])
def test_rows_of_a_3d_to_5d_table_by_dma(dtype, shape):
    table = _table(*shape, dtype=dtype)
    indices = _indices(130, 16)
    _, out = code_and_output(gather_rows, (table, indices), **DMA)
    assert torch.equal(out, table[indices.long()])
    check_tpu_lowering(gather_rows, (table, indices), **DMA)



@pallasite.kernel(config=pallasite.Config(block_sizes=[128]))
def gather_into_a_new_axis(table, indices):
    n = indices.size(0)
    out = torch.empty([n, 1, table.size(1)], dtype=table.dtype, device=table.device)
    for tile in hl.tile(n):
        out[tile, :, :] = table[indices[tile], None, :] + 1
    return out


def test_elements_of_a_1d_table_by_dma():
    table, indices = _table(300), _indices(200, 300)
    _, out = code_and_output(gather_rows, (table, indices), **DMA)
    assert torch.equal(out, table[indices.long()])
    check_tpu_lowering(gather_rows, (table, indices), **DMA)


def test_a_dma_gather_with_a_new_axis():
    table, indices = _table(50, 128), _indices(200, 50)
    _, out = code_and_output(gather_into_a_new_axis, (table, indices), **DMA)
    assert torch.equal(out, table[indices.long(), None, :] + 1)
    check_tpu_lowering(gather_into_a_new_axis, (table, indices), **DMA)

def test_a_table_over_the_threshold_is_gathered_by_dma_automatically():
    table = _table(512, 128)  # 256 KiB: over a quarter of a 512 KiB budget
    indices = _indices(256, 512)
    limit = {"vmem_limit_bytes": 512 * 1024}
    _, (gather,) = _gathers(gather_rows, (table, indices), **limit)
    assert gather.method is GatherMethod.ROW_DMA and "too large to keep in VMEM" in gather.reason
    _, out = code_and_output(gather_rows, (table, indices), **limit)
    assert torch.equal(out, table[indices.long()])
    check_tpu_lowering(gather_rows, (table, indices), **limit)
    # the same table within the chip's budget stays resident
    _, (gather,) = _gathers(gather_rows, (table, indices))
    assert gather.method is GatherMethod.ONE_HOT_MATMUL and "fits VMEM" in gather.reason


def test_resident_mode_over_the_threshold_is_an_error_with_the_numbers():
    table, indices = _table(512, 128), _indices(256, 512)
    config = {"vmem_limit_bytes": 512 * 1024, "pallas_indirect_access_mode": "resident"}
    # the 0.25 MiB table with its (256, 512) one-hot and selected copies
    with pytest.raises(exc.VmemOverflow, match=r"one-hot over it: 1\.2 MiB, which exceeds the 0\.12 MiB VMEM "
                                              r"threshold") as info:
        gather_rows.bind((table, indices)).plan(config)
    assert "'dma'" in str(info.value) and f"{GATHER_TABLE_VMEM_FRACTION:.0%}" in str(info.value)


def test_a_gathered_block_too_large_even_for_dma_is_an_error():
    table, indices = _table(64, 4096), _indices(256, 64)  # the 128-row block is 2 MiB
    config = {"vmem_limit_bytes": 4 * 2**20, **DMA}
    with pytest.raises(exc.VmemOverflow, match=r"VMEM buffer of \[128, 4096\] float32: 2\.00 MiB, over the 1\.00 MiB"):
        gather_rows.bind((table, indices)).plan(config)


@pytest.mark.parametrize("mode", ["auto", "resident", "dma"])
def test_every_mode_gives_the_same_rows(mode):
    table, indices = _table(40, 128, dtype=torch.bfloat16), _indices(100, 40)
    _, out = code_and_output(gather_rows, (table, indices), pallas_indirect_access_mode=mode)
    assert torch.equal(out, table[indices.long()])


@pytest.mark.parametrize("value", ["one-hot", "DMA", 1, None])
def test_a_bad_mode_is_rejected(value):
    with pytest.raises(exc.InvalidConfig, match="pallas_indirect_access_mode"):
        pallasite.Config(pallas_indirect_access_mode=value)


def test_the_mode_is_part_of_the_compile_key():
    assert pallasite.Config(**DMA).key() != pallasite.Config(pallas_indirect_access_mode="auto").key()


@pallasite.kernel(config=pallasite.Config(block_sizes=[32]))
def bag_sums(table, indices):
    bags, bag_size = indices.size()
    dim = table.size(1)
    out = torch.empty([bags, dim], dtype=torch.float32, device=table.device)
    for g in hl.grid(bags):
        acc = hl.zeros([dim], dtype=torch.float32)
        for tile in hl.tile(bag_size):
            idx = indices[g, tile]
            acc = acc + table[idx, :].to(torch.float32).sum(0)
        out[g, :] = acc
    return out


@pytest.mark.parametrize("loop_type, dtype", [
    *((loop_type, torch.bfloat16) for loop_type in LOOP_TYPES), ("fori_loop", torch.int32)])
def test_a_dma_gather_in_an_inner_loop(loop_type, dtype):
    table = _table(40, 128, dtype=dtype)
    indices = _indices(3 * 70, 40).reshape(3, 70)  # 70 = 2 tiles of 32 + a partial one
    config = {"pallas_loop_type": loop_type, **DMA}
    _, out = code_and_output(bag_sums, (table, indices), **config)
    torch.testing.assert_close(out, table.float()[indices.long()].sum(1), rtol=1e-5, atol=1e-4)
    check_tpu_lowering(bag_sums, (table, indices), **config)


@pytest.mark.parametrize("bad", [64, -1, 1000])
def test_an_index_outside_the_table_is_an_error(bad):
    table, indices = _table(64, 128), _indices(200, 64)
    indices[150] = bad
    with pytest.raises(exc.ShapeMismatch) as info:
        code_and_output(gather_rows, (table, indices), **DMA)
    message = str(info.value)
    assert f"is {bad}" in message and "table.size(0) is 64" in message
    assert "out[tile] = table[idx]" in message and "test_gathers_dma.py" in message


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_an_index_outside_the_table_in_an_inner_loop_is_an_error(loop_type):
    table, indices = _table(40, 128), _indices(2 * 70, 40).reshape(2, 70)
    indices[1, 69] = 40
    with pytest.raises(exc.ShapeMismatch, match=r"is 40 but table.size\(0\) is 40"):
        code_and_output(bag_sums, (table, indices), pallas_loop_type=loop_type, **DMA)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_the_embedding_bag_example_by_dma(loop_type):
    from examples import embedding_bag as example

    inputs = example.example_inputs()
    config = {"block_sizes": [32], "pallas_loop_type": loop_type, **DMA}
    _, out = code_and_output(example.embedding_bag, inputs, **config)
    torch.testing.assert_close(out, example.reference(*inputs), rtol=1e-5, atol=1e-4)
    check_tpu_lowering(example.embedding_bag, inputs, **config)


# ---------------------------------------------------- forms that stay resident --

@pallasite.kernel(config=pallasite.Config(block_sizes=[128]))
def shift_left(x):
    out = torch.zeros_like(x)
    for tile in hl.tile(x.size(0) - 1):
        out[tile] = x[(tile.index + 1) % x.size(0)]  # computed (tile.index + 1 alone is a shifted tile)
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[128]))
def gather_middle_axis(table, indices):
    a, _, c = table.size()
    n = indices.size(0)
    out = torch.empty([a, n, c], dtype=table.dtype, device=table.device)
    for tile in hl.tile(n):
        out[:, tile, :] = table[:, indices[tile], :]
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[64, 128]))
def gather_and_tile(values, indices):
    m, n = indices.size(0), values.size(1)
    out = torch.empty([m, n], dtype=values.dtype, device=values.device)
    for tile_m, tile_n in hl.tile([m, n]):
        out[tile_m, tile_n] = values[indices[tile_m], tile_n]
    return out


def test_a_computed_index_vector_is_staged_in_smem_for_its_copies():
    x = _table(300)
    (gather,) = [a.gather for a in shift_left.bind((x,)).plan(DMA).calls[0].accesses.values() if a.gather]
    assert gather.method is GatherMethod.ROW_DMA and gather.row_copy.staged is not None
    _, out = code_and_output(shift_left, (x,), **DMA)
    assert torch.equal(out[:-1], x[1:]) and out[-1] == 0
    check_tpu_lowering(shift_left, (x,), **DMA)


def test_a_gather_along_a_middle_dim_keeps_the_resident_lowering():
    args = (_table(8, 24, 128), _indices(200, 24))
    with pytest.raises(exc.BackendUnsupported, match="gathers along dim 1; .* first dim only") as info:
        gather_middle_axis.bind(args).plan(DMA)
    assert "table[:, indices[tile], :]" in str(info.value)
    _, out = code_and_output(gather_middle_axis, args)  # auto: small, resident
    assert torch.equal(out, args[0][:, args[1].long(), :])


def test_a_large_table_gathered_along_a_middle_dim_says_why_dma_does_not_apply():
    args = (_table(8, 64, 128), _indices(200, 64))
    with pytest.raises(exc.VmemOverflow, match="exceeds the .* VMEM threshold.* gathers along dim 1"):
        gather_middle_axis.bind(args).plan({"vmem_limit_bytes": 512 * 1024})


# ------------------------------------------------ a tile's window of each row --

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_a_tile_window_of_each_row_by_dma(dtype):
    """`values[indices[tm], tn]`: each copy reads tn's block of its row, not the whole row."""
    args = (_table(50, 256, dtype=dtype), _indices(100, 50))  # 100: a partial index tile
    _, out = code_and_output(gather_and_tile, args, **DMA)
    assert torch.equal(out, args[0][args[1].long()])
    assert torch.equal(out, run_ref(gather_and_tile, args))
    call, (gather,) = _gathers(gather_and_tile, args, **DMA)
    assert gather.method is GatherMethod.ROW_DMA
    (access,) = [a for a in call.accesses.values() if a.gather is gather]
    assert tuple(access.ref_shape) == (64, 128)  # 64 rows of one 128-wide block
    code = check_tpu_lowering(gather_and_tile, args, **DMA)
    assert all("pl.ds(row, 1), pl.ds(" in text for text in code.values())


@pallasite.kernel(config=pallasite.Config(block_sizes=[32, 128]))
def scaled_windows(table, indices):
    m, d = indices.size(0), table.size(2)
    out = torch.empty([m, 3, d], dtype=torch.float32, device=table.device)
    for tile_m in hl.tile(m):
        idx = indices[tile_m]
        for tile_d in hl.tile(d):
            out[tile_m, :, tile_d] = table[idx, :, tile_d].to(torch.float32) * 2
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_row_windows_of_a_3d_table_in_an_inner_loop(loop_type):
    """The window at the inner loop's tile, after a whole middle dim, under every loop type."""
    args = (_table(40, 3, 384, dtype=torch.bfloat16), _indices(70, 40))
    config = {"pallas_loop_type": loop_type, **DMA}
    _, out = code_and_output(scaled_windows, args, **config)
    expected = args[0].float()[args[1].long()] * 2
    assert torch.equal(out, expected)
    assert torch.equal(run_ref(scaled_windows, args, **config), expected)
    check_tpu_lowering(scaled_windows, args, **config)


def test_a_large_table_read_at_tile_windows_is_gathered_by_dma_automatically():
    """Helion's gather budget test: a 32 MiB table, over the resident threshold, whose rows
    are read one 256-wide block at a time."""
    args = (_table(8192, 1024), _indices(256, 8192))
    call, (gather,) = _gathers(gather_and_tile, args, block_sizes=[128, 256])
    assert gather.method is GatherMethod.ROW_DMA and "too large to keep in VMEM" in gather.reason
    _, out = code_and_output(gather_and_tile, args, block_sizes=[128, 256])
    assert torch.equal(out, args[0][args[1].long()])


@pallasite.kernel(static_shapes=False)
def gather_and_tile_dynamic(table, indices):
    out = torch.empty([indices.size(0), table.size(1)], dtype=table.dtype, device=table.device)
    for tile_b, tile_e in hl.tile([indices.size(0), table.size(1)]):
        out[tile_b, tile_e] = table[indices[tile_b], tile_e]
    return out


def test_row_windows_by_dma_under_dynamic_shapes_guard_the_blocks_dividing_the_dim():
    """static_shapes=False (Helion's budget test, dynamic): the window's blocks dividing the
    width is a guard of the variant, so the row copies apply; a width they do not divide
    builds another variant (here resident, and a clear error past the threshold)."""
    gather_and_tile_dynamic.reset()
    for width in (1024, 512):  # one variant serves both
        args = (_table(8192, width), _indices(200, 8192))
        _, out = code_and_output(gather_and_tile_dynamic, args, block_sizes=[128, 256])
        assert torch.equal(out, args[0][args[1].long()])
    assert gather_and_tile_dynamic.cache_size == 1
    args = (_table(64, 1000), _indices(200, 64))  # small: resident, masked tail
    _, out = code_and_output(gather_and_tile_dynamic, args, block_sizes=[128, 256])
    assert torch.equal(out, args[0][args[1].long()]) and gather_and_tile_dynamic.cache_size == 2


def test_a_window_whose_last_block_is_partial_is_not_copied_by_dma():
    with pytest.raises(exc.BackendUnsupported, match="tile 'tile_n', whose last block is partial"):
        gather_and_tile.bind((_table(50, 200), _indices(100, 50))).plan(DMA)
    args = (_table(50, 200), _indices(100, 50))
    _, out = code_and_output(gather_and_tile, args)  # auto: small, resident
    assert torch.equal(out, args[0][args[1].long()])


@pytest.mark.parametrize("seed", [1, 5, 9])
def test_row_windows_are_race_free_on_two_cores(seed, monkeypatch):
    from pallasite.runtime import interpret

    monkeypatch.setenv(interpret.CORES_ENV, "2")
    monkeypatch.setenv(interpret.SEED_ENV, str(seed))
    args = (_table(50, 512), _indices(200, 50))
    gather_and_tile.reset()
    try:
        compiled = gather_and_tile.bind(args).compile_config(DMA)
        assert compiled.module.INTERPRET.detect_races
        out = compiled(*args)
    finally:
        gather_and_tile.reset()
    assert torch.equal(out, args[0][args[1].long()])


def test_reference_mode_agrees_with_the_dma_lowering():
    table, indices = _table(64, 256, dtype=torch.bfloat16), _indices(200, 64)
    _, out = code_and_output(gather_rows, (table, indices), **DMA)
    assert torch.equal(out, run_ref(gather_rows, (table, indices)))



@pallasite.kernel(config=pallasite.Config(block_sizes=[128]))
def double(x):
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * 2
    return out


def test_the_config_spec_offers_the_modes_only_to_kernels_that_gather():
    modes = gather_rows.bind((_table(8, 128), _indices(8, 8))).config_spec.indirect_access_modes
    assert modes == ("auto", "resident", "dma")
    assert shift_left.bind((_table(300),)).config_spec.indirect_access_modes == modes
    assert double.bind((_table(300),)).config_spec.indirect_access_modes == ()


# ------------------------------------------------------------- race detector --

@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_the_dma_gather_is_race_free_on_two_cores(loop_type, monkeypatch):
    from examples import embedding_bag as example
    from pallasite.runtime import interpret

    monkeypatch.setenv(interpret.CORES_ENV, "2")
    monkeypatch.setenv(interpret.SEED_ENV, "7")  # visit parallel grid points out of order
    inputs = example.example_inputs()
    example.embedding_bag.reset()  # compile anew under two cores
    try:
        compiled = example.embedding_bag.bind(inputs).compile_config(
            {"pallas_loop_type": loop_type, **DMA})
        assert compiled.module.INTERPRET.detect_races
        out = compiled(*inputs)  # a race, or a semaphore left signalled, raises exc.DataRace
    finally:
        example.embedding_bag.reset()
    torch.testing.assert_close(out, example.reference(*inputs), rtol=1e-5, atol=1e-4)


def test_a_row_copy_never_waited_for_is_reported():
    """The detector this file relies on: drop the loop waiting for the row copies."""
    from pallasite.runtime.kernel import CompiledKernel

    table, indices = _table(64, 128), _indices(200, 64)
    compiled = gather_rows.bind((table, indices)).compile_config(DMA)
    (wait,) = [line for line in compiled.code.splitlines() if "table_wait_row, 0)" in line]
    racy = CompiledKernel(compiled.bound, compiled.config, compiled.code.replace(wait, ""),
                          compiled.result_structure)
    with pytest.raises(exc.DataRace):
        racy(table, indices)


def test_the_schedule_metrics_count_the_copied_rows():
    from pallasite.plan.metrics import schedule_metrics

    table, indices = _table(64, 256), _indices(256, 64)
    bound = gather_rows.bind((table, indices))
    dma = schedule_metrics(bound.plan(DMA)).hbm_bytes
    resident = schedule_metrics(bound.plan({"pallas_indirect_access_mode": "resident"})).hbm_bytes
    rows = 256 * 256 * 4  # two index tiles of 128 rows, one DMA per row
    smem_indices = 256 * 4  # the SMEM copy the row indices are read from
    assert dma == resident - table.numel() * 4 + rows + smem_indices


def test_an_index_tensor_too_large_for_smem_is_staged_one_tile_at_a_time():
    # 78 KiB of indices cannot be copied to SMEM whole; each tile's 128 are staged instead
    args = (_table(64, 128), _indices(20_000, 64))
    (gather,) = [a.gather for a in gather_rows.bind(args).plan(DMA).calls[0].accesses.values() if a.gather]
    assert gather.method is GatherMethod.ROW_DMA and gather.row_copy.staged is not None
    check_tpu_lowering(gather_rows, args, **DMA)
