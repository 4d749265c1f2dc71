"""`benchmarks/vs_handwritten.py`: its kernels compute what torch does (compiled and in
reference mode) under the hand-written schedules' configs, and every hand-written config
plans at the benchmark's sizes (the table would otherwise print an error row)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from pallasite.testing import code_and_output, run_ref, schedule_report

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.handwritten_kernels import attention, matmul_bf16, rms_norm  # noqa: E402
from benchmarks.vs_handwritten import cases  # noqa: E402
from plan_helpers import randn  # noqa: E402


@pytest.mark.parametrize("case", cases(), ids=lambda case: case.name)
def test_every_handwritten_config_plans_at_the_benchmark_size(case):
    args = case.args()
    report = schedule_report(case.kernel, args, chip="v7x", **case.handwritten.config)
    assert report["hbm_bytes"] >= report["min_hbm_bytes"] > 0
    assert report["modelled_seconds"] > 0


def _check(kernel, args, expected, config, tolerance):
    _, result = code_and_output(kernel, args, **config)
    torch.testing.assert_close(result.float(), expected.float(), atol=tolerance, rtol=tolerance)
    torch.testing.assert_close(result.float(), run_ref(kernel, args, config=config).float(),
                               atol=tolerance, rtol=tolerance)


def test_the_bf16_matmul_under_the_matmul_guides_schedule_shape():
    x, y = randn(256, 384, dtype=torch.bfloat16), randn(384, 512, seed=1, dtype=torch.bfloat16)
    expected = (x.float() @ y.float()).to(torch.bfloat16)
    # one bf16 rounding of values up to ~60: a quarter
    _check(matmul_bf16, (x, y), expected, dict(block_sizes=[128, 256, 128], pallas_loop_type="emit_pipeline"), 0.25)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_under_flash_attentions_default_blocks(causal):
    q, k, v = (randn(2, 256, 128, seed=seed, dtype=torch.bfloat16) for seed in range(3))
    expected = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=causal).to(torch.bfloat16)
    _check(attention, (q, k, v, causal), expected,
           dict(block_sizes=[1, 128, 128], pallas_loop_type="emit_pipeline"), 2e-2)


def test_rms_norm_row_blocked():
    x, weight = randn(64, 512, dtype=torch.bfloat16), randn(512, seed=1, dtype=torch.bfloat16)
    rows = x.float()
    expected = (rows * torch.rsqrt(rows.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(torch.bfloat16)
    _check(rms_norm, (x, weight, 1e-6), expected, dict(block_sizes=[16]), 2e-2)
