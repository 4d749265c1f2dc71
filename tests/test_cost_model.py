"""The TPU cost model (`pallasite.autotune.cost_model.estimate`, issue #10): a modelled
time per call from the plan alone, checked against the only TPU measurements we have."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.autotune.cost_model import TERMS, CostEstimate, estimate
from pallasite.runtime.chips import chip_figures, default_chip

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.causal import (  # noqa: E402
    BLOCKS, SEED_BATCH_BLOCK, SEED_MEASURED_TFLOPS, attention_masked, attention_pruned, seed_configs,
)
from plan_helpers import matmul  # the shared test matmul (inner K loop, no config)


def _meta(*shape, dtype=torch.bfloat16, count=3):
    return tuple(torch.empty(*shape, dtype=dtype, device="meta") for _ in range(count))


@pytest.fixture(scope="module")
def seed_estimates():
    """The model's time for the seed's six causal-attention configs on v7x (B=8, H=32,
    D=256, S=4096, bf16, emit_pipeline, the seed's batch blocks)."""
    q, k, v = _meta(8 * 32, 4096, 256)
    result = {}
    for (block, variant), config in seed_configs().items():
        kernel = attention_pruned if variant == "pruned" else attention_masked
        result[block, variant] = estimate(kernel, (q, k, v), config, chip="v7x")
    return result


def test_the_model_ranks_the_seeds_six_configs_in_the_measured_order(seed_estimates):
    # measured: useful TF/s on tpu7x, higher is faster; the model: seconds, lower is faster
    measured = sorted(SEED_MEASURED_TFLOPS, key=lambda key: -SEED_MEASURED_TFLOPS[key])
    modelled = sorted(seed_estimates, key=lambda key: seed_estimates[key].seconds)
    assert modelled == measured, {key: f"{e.seconds * 1e3:.2f} ms" for key, e in seed_estimates.items()}


@pytest.mark.parametrize("block", BLOCKS)
def test_the_pruned_speedup_is_predicted_within_a_quarter(seed_estimates, block):
    measured = SEED_MEASURED_TFLOPS[block, "pruned"] / SEED_MEASURED_TFLOPS[block, "masked"]
    modelled = seed_estimates[block, "masked"].seconds / seed_estimates[block, "pruned"].seconds
    assert abs(modelled / measured - 1) <= 0.25, (block, modelled, measured)


def test_an_estimate_is_labelled_a_model_with_its_breakdown(seed_estimates):
    estimate_ = seed_estimates[1024, "pruned"]
    assert isinstance(estimate_, CostEstimate)
    assert estimate_.label == "model" and estimate_.chip == "v7x"
    assert tuple(estimate_.breakdown) == TERMS
    terms = estimate_.breakdown
    assert all(value > 0 for value in terms.values())
    # seconds = max(memory, compute + overhead) + exposed_dma (one call, one core): the DMA
    # path beside the core's
    expected = max(terms["memory"], terms["compute"] + terms["overhead"]) + terms["exposed_dma"]
    assert estimate_.seconds == pytest.approx(expected)
    assert "model" in estimate_.describe()


def test_the_seed_batch_blocks_are_the_ones_measured():
    configs = seed_configs()
    for block in BLOCKS:
        assert configs[block, "pruned"]["block_sizes"] == [SEED_BATCH_BLOCK[block], block, block]


def test_float32_factors_cost_more_mxu_time_than_bfloat16():
    bf16 = estimate(matmul, _meta(2048, 2048, count=2), {"block_sizes": [512, 512, 512]}, chip="v6e")
    f32 = estimate(matmul, _meta(2048, 2048, dtype=torch.float32, count=2),
                   {"block_sizes": [512, 512, 512]}, chip="v6e")
    assert f32.breakdown["compute"] > 2 * bf16.breakdown["compute"]
    assert f32.breakdown["memory"] > bf16.breakdown["memory"]  # twice the bytes in


def test_more_grid_steps_cost_more_overhead():
    args = _meta(2048, 2048, count=2)
    small = estimate(matmul, args, {"block_sizes": [128, 128, 128]}, chip="v6e")
    large = estimate(matmul, args, {"block_sizes": [512, 512, 512]}, chip="v6e")
    assert small.breakdown["overhead"] > large.breakdown["overhead"]
    assert small.breakdown["memory"] > large.breakdown["memory"]  # operands re-read per block
    assert small.seconds > large.seconds


def test_megacore_chips_split_the_parallel_grid_between_their_cores():
    from pallasite.autotune.cost_model import core_share
    from pallasite.plan.schedule import count_call
    from pallasite.plan.argument_tables import argument_tables as _tables

    args = _meta(1024, 1024, count=2)
    bound = matmul.bind(args)
    plan = bound.plan(bound.resolve_config({"block_sizes": [256, 256, 256]}), "v5p")
    counts = count_call(plan.calls[0], _tables(matmul, bound, plan.ir.arguments, args, {}))
    assert core_share(plan.calls[0], counts, 2) == pytest.approx(0.5)
    assert core_share(plan.calls[0], counts, 1) == 1.0
    one_program = matmul.bind(args).plan({"block_sizes": [1024, 1024, 256]}, "v5p")
    counts = count_call(one_program.calls[0], _tables(matmul, bound, one_program.ir.arguments, args, {}))
    assert core_share(one_program.calls[0], counts, 2) == 1.0  # nothing to split


@pytest.mark.parametrize("chip", ["v4", "v5p", "v5e", "v6e", "v7x"])
def test_the_megacore_split_follows_jaxs_chip_table(chip):
    """A pallas_call's parallel grid is split over a chip's TensorCores only where JAX
    accepts one logical device spanning them (megacore: v4, v5p). v7x has two TensorCores
    per chip but JAX refuses `num_tensor_cores_per_logical_device=2` for it: each is its own
    device, so one call runs on one core (no split; `parallel` stays the semantics)."""
    from jax._src.pallas.mosaic import tpu_info

    from pallasite.autotune.cost_model import core_share
    from pallasite.plan.schedule import count_call
    from pallasite.plan.argument_tables import argument_tables as _tables
    from pallasite.runtime.chips import chip_version

    version = chip_version(chip)
    try:
        tpu_info.get_tpu_info_for_chip(version, 2)
        megacore = True
    except ValueError:
        megacore = False
    figures = chip_figures(chip)
    assert figures.cores == (version.num_physical_tensor_cores_per_chip if megacore else 1)
    # per-TensorCore peaks: a logical device of one core (the whole chip only on megacore)
    single = tpu_info.get_tpu_info_for_chip(version, 1)
    assert figures.bf16_flops_per_second == single.bf16_ops_per_second
    assert figures.hbm_bytes_per_second == single.mem_bw_bytes_per_second
    args = _meta(1024, 1024, count=2)
    bound = matmul.bind(args)
    plan = bound.plan(bound.resolve_config({"block_sizes": [256, 256, 256]}), chip)
    counts = count_call(plan.calls[0], _tables(matmul, bound, plan.ir.arguments, args, {}))
    assert core_share(plan.calls[0], counts, figures.cores) == pytest.approx(0.5 if megacore else 1.0)
    assert megacore == (chip in ("v4", "v5p"))  # JAX's table as the issue lists it, minus v7x


def test_the_default_chip_comes_from_the_environment(monkeypatch):
    args = _meta(512, 512, count=2)
    monkeypatch.setenv("PALLASITE_TPU_CHIP", "v5e")
    assert estimate(matmul, args, {"block_sizes": [128, 128, 128]}).chip == "v5e"
    monkeypatch.setenv("PALLASITE_TPU_CHIP", "v6e")
    assert estimate(matmul, args, {"block_sizes": [128, 128, 128]}).chip == "v6e"
    monkeypatch.delenv("PALLASITE_TPU_CHIP")
    # without it, the chip plans and compiles target: the tuner scores for what runs
    bound = matmul.bind(args)
    modelled = estimate(matmul, args, {"block_sizes": [128, 128, 128]}).chip
    planned = bound.plan({"block_sizes": [128, 128, 128]}).chip
    assert chip_figures(modelled).name == chip_figures(planned).name == chip_figures(default_chip()).name


def test_a_config_planning_rejects_raises_invalid_config():
    args = _meta(512, 512, count=2)
    with pytest.raises(exc.InvalidConfig):
        estimate(matmul, args, {"block_sizes": [128, 128, 128], "pallas_loop_type": "bogus"}, chip="v6e")
    huge = _meta(16384, 16384, dtype=torch.float32, count=2)
    with pytest.raises(exc.InvalidConfig, match="MiB"):
        estimate(matmul, huge, {"block_sizes": [8192, 8192, 8192]}, chip="v7x")


def test_a_default_config_is_estimated_when_none_is_given():
    args = _meta(512, 512, count=2)
    assert estimate(matmul, args, chip="v6e").seconds == pytest.approx(
        estimate(matmul, args, matmul.bind(args).resolve_config(None), chip="v6e").seconds)


EXAMPLES = ("add", "argmax", "attention", "bmm", "centering", "embedding_bag", "geglu", "jagged_sum",
            "layer_norm", "matmul", "routing_scatter", "sliding_window_attention", "softmax",
            "softmax_dropout", "swiglu")


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_is_estimated_at_its_default_config(name):
    import importlib

    module = importlib.import_module(f"examples.{name}")
    cost = estimate(getattr(module, name), module.example_inputs(), chip="v6e")
    assert cost.seconds > 0 and cost.label == "model" and cost.chip == "v6e"
    assert cost.seconds >= max(cost.breakdown["memory"], cost.breakdown["compute"])


@pallasite.kernel
def _expert_rows(x, w):
    """A row of `w` chosen by a value an earlier loop of the kernel computes (MoE decode's
    `e = sel_idx[0, k]` then `w[e, tk, tn]`)."""
    m, h = x.shape
    chosen = torch.empty([1], dtype=torch.int32, device=x.device)
    out = torch.empty([m, w.size(2)], dtype=torch.float32, device=x.device)
    for _ in hl.grid(1):
        chosen[0] = torch.argmax(x[0, :]).to(torch.int32) % w.size(0)
    for tm, tn in hl.tile([m, w.size(2)]):
        e = chosen[0]
        acc = hl.zeros([tm, tn], dtype=torch.float32)
        for tk in hl.tile(h):
            acc = hl.dot(x[tm, tk], w[e, tk, tn], acc=acc)
        out[tm, tn] = acc
    return out


def test_a_block_chosen_by_a_value_the_kernel_computes_is_estimated():
    """No argument holds the table the block index reads, so its copies cannot be counted:
    the model counts a whole block at every step where the grid indices it reads change
    (trial Q: moe_decode_stack's autotuning rejected every candidate). More blocks along n
    copy more, fewer (wider ones) less."""
    x, w = torch.randn(8, 256), torch.randn(4, 256, 512)
    narrow = estimate(_expert_rows, (x, w), {"block_sizes": [8, 128, 128]})
    wide = estimate(_expert_rows, (x, w), {"block_sizes": [8, 512, 256]})
    assert narrow.breakdown["memory"] > 0 and wide.breakdown["memory"] > 0
    assert wide.breakdown["overhead"] < narrow.breakdown["overhead"]
    report = pallasite.testing.schedule_report(_expert_rows, (x, w), block_sizes=[8, 128, 128])
    assert report["hbm_bytes"] is None  # the report says unknown; only the model estimates
