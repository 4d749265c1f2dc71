"""The VMEM estimate counts what a gather's lowering materializes (issue #20 §1).

A gather without a vector gather instruction builds a one-hot of (lanes, rows) and
selected windows as large as the window times the lanes; those arrays, not the
table, are what overflows VMEM. For each gather method, the plan's estimate must
cover the largest vector of the lowered Mosaic kernel, and a config whose
intermediates exceed the chip's VMEM is refused before compiling (so the tuner
never picks it).
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.plans import GatherMethod
from pallasite.plan.vmem import padded_bytes
from pallasite.runtime.chips import chip_figures
from pallasite.testing import check_tpu_lowering, code_and_output, lowered_vectors

from plan_helpers import only_call


@pallasite.kernel
def gather_rows(table, indices):
    n = indices.size(0)
    out = torch.empty([n, table.size(1)], dtype=table.dtype, device=table.device)
    for tile in hl.tile(n):
        out[tile, :] = table[indices[tile], :]
    return out


@pallasite.kernel
def pick_per_row(logits, labels):
    n = labels.size(0)
    out = torch.empty([n], dtype=logits.dtype, device=logits.device)
    for tile in hl.tile(n):
        out[tile] = logits[tile.index, labels[tile]]
    return out


@pallasite.kernel
def scatter_rows(out, indices, values):
    n = indices.size(0)
    for tile in hl.tile(n):
        out[indices[tile], :] = values[tile, :]
    return out


def _ints(n, high, seed=0):
    return torch.randint(0, high, (n,), generator=torch.Generator().manual_seed(seed), dtype=torch.int32)


# Each gather method, with lanes well past the window's columns: the one-hot (or the
# selected windows) outgrows every buffer the call declares.
CASES = {
    "one_hot_matmul_f32": (gather_rows, lambda: (torch.randn(512, 128), _ints(1024, 512)),
                           dict(block_sizes=[1024]), GatherMethod.ONE_HOT_MATMUL),
    "one_hot_matmul_bf16": (gather_rows, lambda: (torch.randn(512, 128).to(torch.bfloat16), _ints(1024, 512)),
                            dict(block_sizes=[1024]), GatherMethod.ONE_HOT_MATMUL),
    "select_sum_int32": (gather_rows, lambda: (torch.randint(-9, 9, (64, 128), dtype=torch.int32), _ints(128, 64)),
                         dict(block_sizes=[128]), GatherMethod.SELECT_SUM),
    "one_hot_matmul_f16": (gather_rows, lambda: (torch.randn(512, 128).to(torch.float16), _ints(1024, 512)),
                           dict(block_sizes=[1024]), GatherMethod.ONE_HOT_MATMUL),
    "select_sum_int8": (gather_rows, lambda: (torch.randint(-9, 9, (64, 128), dtype=torch.int8), _ints(128, 64)),
                        dict(block_sizes=[128]), GatherMethod.SELECT_SUM),
    "row_dma": (gather_rows, lambda: (torch.randn(512, 128), _ints(256, 512)),
                dict(block_sizes=[256], pallas_indirect_access_mode="dma"), GatherMethod.ROW_DMA),
    "lane_select": (pick_per_row, lambda: (torch.randn(256, 2048), _ints(256, 2048)), dict(block_sizes=[256]), None),
    "scatter_one_hot": (scatter_rows, lambda: (torch.zeros(256, 128), _ints(1024, 256), torch.randn(1024, 128)),
                        dict(block_sizes=[1024]), GatherMethod.ONE_HOT_MATMUL),
}


@pytest.mark.parametrize("name", CASES)
def test_the_estimate_covers_the_largest_array_the_lowered_kernel_holds(name):
    kernel, make_args, config, method = CASES[name]
    args = make_args()
    call = only_call(kernel, args, **config)
    methods = {a.gather.method for a in call.accesses.values() if a.gather is not None} | \
              {a.scatter.method for a in call.accesses.values() if a.scatter is not None}
    assert methods == ({method} if method is not None else set())
    modules: dict[str, list[str]] = {}
    check_tpu_lowering(kernel, args, chips=("v7x",), mosaic=modules, **config)
    (module,) = modules["v7x"]
    largest = max(padded_bytes(shape, dtype) for shape, dtype in lowered_vectors(module))
    assert call.vmem_bytes >= largest, (call.vmem_bytes, largest)
    # and the kernel computes what torch does
    _, out = code_and_output(kernel, [a.clone() for a in args], **config)
    if kernel is gather_rows:
        expected = args[0][args[1].long()]
    elif kernel is pick_per_row:
        expected = args[0][torch.arange(args[0].size(0)), args[1].long()]
    else:
        expected = args[0].clone()
        expected[args[1].long()] = args[2]  # unique rows are not guaranteed: compare where one lane writes
        once = torch.bincount(args[1].long(), minlength=args[0].size(0)) == 1
        out, expected = out[once], expected[once]
    assert torch.equal(out, expected)


def test_a_gather_whose_intermediates_exceed_vmem_is_refused_before_compiling():
    # (4096 lanes, 8192 rows): a 128 MiB f32 one-hot for a 4 MiB table
    table, indices = torch.randn(8192, 128), _ints(4096, 8192)
    capacity = chip_figures("v7x").vmem_capacity_bytes
    with pytest.raises(exc.VmemOverflow):
        gather_rows.bind((table, indices)).plan(pallasite.Config(block_sizes=[4096],
                                                                 pallas_indirect_access_mode="resident"), "v7x")
    call = only_call(gather_rows, (table, indices), block_sizes=[128])
    assert call.vmem_bytes <= capacity


def test_the_tuner_only_picks_configs_whose_intermediates_fit(monkeypatch):
    monkeypatch.setenv("PALLASITE_TPU_CHIP", "v7x")
    table, indices = torch.randint(-9, 9, (512, 128), dtype=torch.int32), _ints(4096, 512)
    bound = gather_rows.bind((table, indices))
    rejected = []
    for block in (128, 256, 512, 1024, 2048, 4096):
        config = pallasite.Config(block_sizes=[block], pallas_indirect_access_mode="resident")
        try:
            bound.plan(config, "v7x")
        except exc.VmemOverflow:
            rejected.append(block)
    # the select-and-sum's (lanes, rows, 128) int32 selection: 32 MiB at 128 lanes, past the
    # resident threshold (a quarter of 64 MiB), and past the whole VMEM from 256 lanes on
    assert rejected == [128, 256, 512, 1024, 2048, 4096]
    result = bound.autotune((table, indices), effort="full", chip="v7x")
    plan = bound.plan(result.best, "v7x")
    assert all(call.vmem_bytes <= chip_figures("v7x").vmem_capacity_bytes for call in plan.calls)
