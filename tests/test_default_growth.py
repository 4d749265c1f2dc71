"""The default config grows its blocks while the TPU cost model says it pays
(`pallasite/autotune/growth.py`): faster in the model than the heuristic default, within
the VMEM budget, untouched where nothing can grow or the model cannot count the kernel
from its shapes, and computing the same results."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.autotune import growth
from pallasite.autotune.cost_model import estimate
from pallasite.runtime.chips import chip_figures
from pallasite.testing import run_ref, schedule_report

from plan_helpers import matmul, randn


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def _fresh(kernel):
    """A new kernel object: its bound kernels (and their resolved defaults) are its own."""
    return pallasite.kernel(kernel.fn)


@pytest.mark.parametrize("chip", ["v5e", "v6e", "v7x"])
def test_a_matmul_default_grows_its_row_block_and_is_modelled_faster(monkeypatch, chip):
    # 256-row blocks make every row block re-read all of y: larger ones read it fewer times.
    monkeypatch.setenv("PALLASITE_TPU_CHIP", chip)
    kernel = _fresh(matmul)
    args = (_meta(4096, 4096), _meta(4096, 4096))
    space = kernel.bind(args).config_spec
    heuristic, default = space.heuristic_default(), space.default_config()
    assert heuristic.block_sizes == [256, 1024, 1024]
    assert default.block_sizes[0] > heuristic.block_sizes[0]
    before, after = (estimate(kernel, args, config, chip=chip).seconds for config in (heuristic, default))
    assert after <= before * (1 - growth.MIN_GAIN)


@pytest.mark.parametrize("chip", ["v5e", "v6e", "v7x"])
def test_growth_keeps_within_the_vmem_budget(monkeypatch, chip):
    monkeypatch.setenv("PALLASITE_TPU_CHIP", chip)
    kernel = _fresh(matmul)
    args = (_meta(8192, 8192), _meta(8192, 8192))
    space = kernel.bind(args).config_spec
    start = schedule_report(kernel, args, chip=chip, **space.heuristic_default())["vmem_bytes"]
    grown = schedule_report(kernel, args, chip=chip, **space.default_config())["vmem_bytes"]
    assert grown <= max(start, growth.VMEM_SHARE * chip_figures(chip).vmem_capacity_bytes)


def test_no_planning_when_every_block_covers_its_dim(monkeypatch):
    kernel = _fresh(matmul)
    bound = kernel.bind((randn(64, 96), randn(96, 128)))
    planned = []
    monkeypatch.setattr(growth, "modelled_from_shapes", lambda plan: planned.append(plan))
    assert bound.config_spec.default_config() == bound.config_spec.heuristic_default()
    assert planned == []


@pallasite.kernel
def leading_rows_sum(x, rows: int):
    """Column sums of the first `rows` rows: a loop bound read from a kernel scalar, so the
    model cannot count the schedule from the shapes alone."""
    _, d = x.size()
    out = torch.empty([d], dtype=torch.float32, device=x.device)
    for tile_d in hl.tile(d):
        acc = hl.zeros([tile_d], dtype=torch.float32)
        for tile_r in hl.tile(rows):
            acc = acc + x[tile_r, tile_d].to(torch.float32).sum(0)
        out[tile_d] = acc
    return out


def test_a_kernel_whose_bounds_read_values_keeps_the_heuristic_default(monkeypatch):
    bound = _fresh(leading_rows_sum).bind((_meta(4096, 65536), 3000))
    space = bound.config_spec
    heuristic = space.heuristic_default()
    assert any(spec.extent > size for spec, size in zip(space.block_sizes, heuristic.block_sizes))
    assert growth.modelled_from_shapes(bound.plan(heuristic)) is None
    assert space.default_config() == heuristic


def test_dynamic_shapes_keep_the_heuristic_default():
    kernel = pallasite.kernel(static_shapes=False)(matmul.fn)
    x, y = randn(2048, 512), randn(512, 1024)
    compiled = kernel.bind((x, y))
    config = compiled.resolve_config()
    assert config.block_sizes == compiled.config_spec.heuristic_default().block_sizes


def test_a_grown_default_computes_what_the_heuristic_one_does(monkeypatch):
    # 1024 rows: the heuristic default's 256-row block grows; the result must not change.
    monkeypatch.setenv("PALLASITE_TPU_CHIP", "v6e")
    kernel = _fresh(matmul)
    x, y = randn(1024, 512, dtype=torch.bfloat16), randn(512, 1024, seed=1, dtype=torch.bfloat16)
    space = kernel.bind((x, y)).config_spec
    heuristic, default = space.heuristic_default(), space.default_config()
    assert default.block_sizes[0] > heuristic.block_sizes[0]
    result = kernel(x, y)
    expected = x.float() @ y.float()
    torch.testing.assert_close(result, expected, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(result, run_ref(kernel, (x, y), config=default), atol=1e-3, rtol=1e-3)
