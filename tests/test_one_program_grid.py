"""A one-program grid hides none of its DMA: on a chip that runs a pallas_call on one
TensorCore (v5e, v6e, v7x), the cost model charges every byte of its blocks as exposed
(`exposed_dma`), so neither the tuner nor the default picks one program over data that
spans many blocks. Modelled, never timed."""
from __future__ import annotations

import pytest
import torch

from pallasite.autotune.cost_model import estimate
from pallasite.runtime.chips import chip_figures
from pallasite.testing import schedule_report

from plan_helpers import add_kernel

ROWS, COLS = 512, 2048  # float32: 4 MiB per tensor, four (128, 2048) blocks or more


def _args():
    return (torch.empty(ROWS, COLS, device="meta"), torch.empty(ROWS, COLS, device="meta"))


@pytest.mark.parametrize("chip", ["v5e", "v6e", "v7x"])
def test_a_one_program_grid_is_charged_all_its_bytes_as_exposed_dma(chip):
    assert chip_figures(chip).cores == 1  # no megacore: one core runs the whole grid
    add = add_kernel()
    whole = estimate(add, _args(), {"block_sizes": [ROWS, COLS]}, chip=chip)
    blocked = estimate(add, _args(), {"block_sizes": [128, COLS]}, chip=chip)
    every_byte = 3 * ROWS * COLS * 4  # x and y in, out back: nothing to overlap them with
    assert whole.breakdown["exposed_dma"] == pytest.approx(every_byte / chip_figures(chip).hbm_bytes_per_second)
    assert blocked.breakdown["exposed_dma"] == pytest.approx(whole.breakdown["exposed_dma"] / 4)
    assert whole.seconds > blocked.seconds


@pytest.mark.parametrize("chip", ["v5e", "v6e", "v7x"])
def test_neither_the_tuner_nor_the_default_picks_one_program(monkeypatch, chip):
    monkeypatch.setenv("PALLASITE_TPU_CHIP", chip)
    add = add_kernel()
    bound = add.bind(_args())
    tuned = bound.autotune(_args(), effort="full", quiet=True).best
    default = bound.config_spec.default_config()
    for config in (tuned, default):
        assert schedule_report(add, _args(), chip=chip, **config)["grid_steps"] > 1, dict(config)
