"""The autotuner at realistic sizes, ranked by the TPU cost model (a model, not a measurement).

For each kernel: the default config's modelled time, the tuned config's (a full
search, seed 0), their ratio, and the search's wall time. Nothing runs on a
device: the inputs are meta tensors and every candidate is only planned
(`pallasite.autotune.cost_model.estimate`, from the plan's schedule counts).

    python benchmarks/autotune.py [--chip v6e] [--effort full]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("PALLASITE_AUTOTUNE_QUIET", "1")

import pallasite  # noqa: E402
from examples.attention import attention  # noqa: E402
from examples.layer_norm import layer_norm  # noqa: E402
from examples.matmul import matmul  # noqa: E402
from pallasite.autotune.cost_model import estimate  # noqa: E402


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def cases():
    bh, s, d = 8 * 32, 4096, 128  # B=8, H=32 folded into the batch dim
    yield "matmul 4096x4096x4096 bf16", matmul, (_meta(4096, 4096), _meta(4096, 4096))
    yield "attention dense B8 H32 S4096 D128", attention, (_meta(bh, s, d), _meta(bh, s, d), _meta(bh, s, d), False)
    yield "attention causal B8 H32 S4096 D128", attention, (_meta(bh, s, d), _meta(bh, s, d), _meta(bh, s, d), True)
    yield "layer_norm 16384x8192 bf16", layer_norm, (_meta(16384, 8192), _meta(8192), _meta(8192), 1e-5)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chip", default="v6e")
    parser.add_argument("--effort", default="full", choices=("quick", "full"))
    options = parser.parse_args(argv)
    print(f"TPU cost model ({options.chip}), {options.effort} search; times are modelled, not measured")
    header = f"{'kernel':<38} {'default us':>12} {'tuned us':>12} {'ratio':>7} {'search s':>9} {'tried':>6}  tuned config"
    print(header)
    print("-" * len(header))
    for name, kernel, args in cases():
        kernel = pallasite.kernel(autotune_effort=options.effort, autotune_random_seed=0)(kernel.fn)
        bound = kernel.bind(args)
        default = bound.resolve_config()
        before = estimate(kernel, args, default, chip=options.chip).seconds
        start = time.perf_counter()
        result = bound.autotune(args, effort=options.effort, chip=options.chip)
        wall = time.perf_counter() - start
        print(f"{name:<38} {before * 1e6:12.1f} {result.best_seconds * 1e6:12.1f} "
              f"{before / result.best_seconds:7.2f} {wall:9.2f} {len(result.trials):6d}  {dict(result.best)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
