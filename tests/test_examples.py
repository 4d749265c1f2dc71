"""Every example kernel matches its torch reference and lowers to Mosaic."""
from __future__ import annotations

import importlib

import pytest

from pallasite.testing import check_tpu_lowering

EXAMPLES = [
    "add", "softmax", "layer_norm", "geglu", "swiglu", "argmax",
    "matmul", "bmm", "attention", "jagged_sum", "centering", "softmax_dropout",
    "embedding_bag", "routing_scatter", "sliding_window_attention", "jagged_attention",
]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_matches_torch(name):
    module = importlib.import_module(f"examples.{name}")
    getattr(module, name).reset()
    module.check()


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_lowers_to_mosaic(name):
    module = importlib.import_module(f"examples.{name}")
    kernel = getattr(module, name)
    # Lower the config the example runs with (the kernel's own, else the default).
    codes = check_tpu_lowering(kernel, module.example_inputs(), **(kernel.config or {}))
    assert set(codes) == {"v5e", "v6e", "v7x"}
