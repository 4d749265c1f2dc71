"""Which TPU generation pallasite plans for: `PALLASITE_TPU_CHIP`, else the attached TPU's
own generation, else v7x (the generation the seed results were measured on)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.runtime import chips
from pallasite.runtime.chips import chip_figures, default_chip


@pallasite.kernel
def add_one(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] + 1.0
    return out


X = torch.arange(256, dtype=torch.float32)


def test_without_a_tpu_or_a_setting_the_chip_is_v7x(monkeypatch):
    monkeypatch.delenv(chips.CHIP_ENV, raising=False)
    assert default_chip() == "v7x"
    figures = chip_figures()
    assert figures.name == "7x" and figures.vmem_capacity_bytes == 64 * 2**20  # per TensorCore
    assert "# Chip: TPU v7x\n" in add_one.bind((X,)).to_code()
    torch.testing.assert_close(add_one(X), X + 1.0)


def test_the_setting_names_the_chip(monkeypatch):
    monkeypatch.setenv(chips.CHIP_ENV, "v5e")
    assert default_chip() == "v5e"
    assert "# Chip: TPU v5e\n" in add_one.bind((X,)).to_code()


@pytest.mark.parametrize("kind, chip", [("TPU v5 lite", "v5e"), ("TPU v6 lite", "v6e"), ("TPU7x", "v7x"),
                                        ("TPU v5p", "v5p"), ("TPU v4", "v4")])
def test_an_attached_tpu_is_the_default_chip(monkeypatch, kind, chip):
    monkeypatch.delenv(chips.CHIP_ENV, raising=False)
    monkeypatch.setattr(chips, "attached_device_kind", lambda: kind)
    assert default_chip() == chip
    assert chip_figures().name == chips.chip_version(chip).value
    monkeypatch.setenv(chips.CHIP_ENV, "v6e")  # the setting, when given, still decides
    assert default_chip() == "v6e"


def test_a_tpu_jax_cannot_describe_falls_back_to_v7x_with_a_warning(monkeypatch):
    monkeypatch.delenv(chips.CHIP_ENV, raising=False)
    monkeypatch.setattr(chips, "attached_device_kind", lambda: "TPU v99")
    with pytest.warns(UserWarning, match="TPU v99.*v7x.*PALLASITE_TPU_CHIP"):
        assert default_chip() == "v7x"
