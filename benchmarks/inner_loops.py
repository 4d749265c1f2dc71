"""Inner-loop schedules side by side: HBM traffic, exposed DMA waits, interpret time.

For matmul 1024^3 bf16 and attention (B*H=8, S=1024, D=128), per loop type,
prints from the plan the HBM bytes the schedule moves against the minimum
(each input read once, each output written once), host padding copies, the
DMA waits not overlapped with compute, and the TPU-interpret-mode wall time
of one warm call. The wall time is the CPU simulator's, not a TPU's: compare
ratios measured in this one run, not absolute figures.

    python benchmarks/inner_loops.py
"""
from __future__ import annotations

import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import pallasite  # noqa: E402
from examples.attention import attention  # noqa: E402
from examples.matmul import matmul  # noqa: E402
from pallasite.plan.loops import STRATEGIES  # noqa: E402
from pallasite.plan.metrics import schedule_metrics  # noqa: E402

LOOP_TYPES = tuple(STRATEGIES)


def cases():
    torch.manual_seed(0)
    x, y = torch.randn(1024, 1024).bfloat16(), torch.randn(1024, 1024).bfloat16()
    yield "matmul 1024^3 bf16", matmul, (x, y), [256, 256, 256]
    q, k, v = (torch.randn(8, 1024, 128).bfloat16() for _ in range(3))
    yield "attention BH=8 S=1024 D=128", attention, (q, k, v), [256, 256]


def main() -> None:
    header = f"{'kernel':30} {'loop type':14} {'HBM MiB':>8} {'min MiB':>8} {'ratio':>6} {'pad MiB':>8} {'exposed waits':>13} {'interpret s':>11}"
    print(header)
    print("-" * len(header))
    for name, kernel, args, blocks in cases():
        bound = kernel.bind(args)
        for loop_type in LOOP_TYPES:
            config = pallasite.Config(block_sizes=blocks, pallas_loop_type=loop_type)
            metrics = schedule_metrics(bound.plan(config))
            compiled = bound.compile_config(config)
            compiled(*args)  # compile and warm up
            start = time.perf_counter()
            compiled(*args)
            elapsed = time.perf_counter() - start
            mib = 2 ** 20
            print(f"{name:30} {loop_type:14} {metrics.hbm_bytes / mib:8.1f} {metrics.min_hbm_bytes / mib:8.1f} "
                  f"{metrics.hbm_bytes / metrics.min_hbm_bytes:6.2f} {metrics.host_padding_bytes / mib:8.1f} "
                  f"{metrics.exposed_dma_waits:13d} {elapsed:11.2f}")


if __name__ == "__main__":
    main()
