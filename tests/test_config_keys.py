"""Helion's config keys with real meaning here (issue #7 §6): `loop_orders`, and runtime
scalars that never recompile (seen through `Kernel.cache_size`)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output
from plan_helpers import matmul


@pallasite.kernel
def scaled_add(x, y, alpha: float):
    out = torch.empty_like(x)
    for tm, tn in hl.tile([x.size(0), x.size(1)]):
        out[tm, tn] = x[tm, tn] + alpha * y[tm, tn]
    return out


def test_loop_orders_permutes_the_grid():
    x, y = torch.randn(32, 256), torch.randn(32, 256)
    config = {"block_sizes": [8, 128], "loop_orders": [[1, 0]]}
    code, out = code_and_output(scaled_add, (x, y, 0.5), **config)
    torch.testing.assert_close(out, x + 0.5 * y)
    plan = scaled_add.bind((x, y, 0.5)).plan(config)
    assert [axis.dim.name for axis in plan.calls[0].grid] == ["tn", "tm"]
    assert [axis.num_blocks for axis in plan.calls[0].grid] == [2, 4]
    assert "grid=(2, 4)" in code
    check_tpu_lowering(scaled_add, (x, y, 0.5), **config)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_loop_orders_with_an_inner_loop(loop_type):
    x, y = torch.randn(64, 256), torch.randn(256, 384)
    config = {"block_sizes": [32, 128, 128], "loop_orders": [[1, 0]], "pallas_loop_type": loop_type}
    _, out = code_and_output(matmul, (x, y), **config)
    torch.testing.assert_close(out, x @ y, rtol=1e-4, atol=1e-4)
    check_tpu_lowering(matmul, (x, y), chips=("v7x",), **config)


@pytest.mark.parametrize("orders, message", [
    ([[0, 0]], "permutation"),
    ([[0, 1, 2]], "permutation"),
    ([[1, 0], [0, 1]], "1 multi-dim"),
    ("10", "list"),
])
def test_bad_loop_orders_are_rejected(orders, message):
    x, y = torch.randn(32, 256), torch.randn(32, 256)
    with pytest.raises(exc.InvalidConfig, match=message):
        scaled_add.bind((x, y, 0.5)).resolve_config({"block_sizes": [8, 128], "loop_orders": orders})


def test_runtime_scalars_never_recompile():
    x, y = torch.randn(16, 128), torch.randn(16, 128)
    scaled_add.reset()
    assert scaled_add.cache_size == 0
    for alpha in (0.5, 1.5, -2.0, 3.0):
        torch.testing.assert_close(scaled_add(x, y, alpha), x + alpha * y)
    assert scaled_add.cache_size == 1
    scaled_add(torch.randn(8, 128), torch.randn(8, 128), 1.0)  # a new shape compiles once more
    assert scaled_add.cache_size == 2


# ------------------------------------------- pallas_flatten_worklist / pallas_worklist_grouping


@pytest.mark.parametrize("key, value, message", [
    ("pallas_flatten_worklist", 1, "pallas_flatten_worklist must be True or False"),
    ("pallas_flatten_worklist", "yes", "pallas_flatten_worklist must be True or False"),
    ("pallas_worklist_grouping", 3, "pallas_worklist_grouping must be 1 or 2"),
    ("pallas_worklist_grouping", True, "pallas_worklist_grouping must be 1 or 2"),
    ("pallas_worklist_grouping", 0, "pallas_worklist_grouping must be 1 or 2"),
])
def test_worklist_keys_are_validated(key, value, message):
    with pytest.raises(exc.InvalidConfig, match=message):
        pallasite.Config(**{key: value})


def test_worklist_keys_are_in_the_compile_key_and_the_config_space():
    from examples.jagged_attention import example_inputs, jagged_attention
    args = example_inputs(torch.float32)
    bound = jagged_attention.bind(args)
    assert bound.config_spec.worklist_groupings == (1, 2)
    assert scaled_add.bind((torch.randn(8, 128), torch.randn(8, 128), 0.5)).config_spec.worklist_groupings == ()
    codes = {code_and_output(jagged_attention, args, block_sizes=[16, 16], **extra)[0]
             for extra in ({}, {"pallas_worklist_grouping": 2}, {"pallas_flatten_worklist": False})}
    assert len(codes) == 3


def test_a_gpu_only_key_reads_back_from_the_config():
    """(trial G) Helion's Config exposes `num_warps` and its other GPU keys as attributes;
    programs read them back (`config.num_warps`), which raised AttributeError here."""
    config = pallasite.Config(block_sizes=[8], num_warps=4)
    assert config.num_warps == 4 and config.num_stages is None
    assert dict(config) == {"block_sizes": [8]}  # the config itself ignores them
    with pytest.raises(AttributeError):
        config.warps
