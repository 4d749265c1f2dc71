"""Every example kernel matches its torch reference and lowers to Mosaic."""
from __future__ import annotations

import importlib

import pytest

from pallasite.testing import check_tpu_lowering

EXAMPLES = ["add", "softmax", "layer_norm", "geglu", "swiglu", "argmax"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_matches_torch(name):
    module = importlib.import_module(f"examples.{name}")
    getattr(module, name).reset()
    module.check()


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_lowers_to_mosaic(name):
    module = importlib.import_module(f"examples.{name}")
    codes = check_tpu_lowering(getattr(module, name), module.example_inputs())
    assert set(codes) == {"v5e", "v6e", "v7x"}
