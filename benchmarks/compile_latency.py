"""Compile latency of the example kernels, in a first process and a second one.

For each example, two fresh Python processes run one after the other, sharing
one `PALLASITE_CACHE_DIR` and `PALLASITE_CODE_DIR` (new for the example): each
times the kernel's first call (trace, plan, codegen and JAX compilation; the
imports are not counted) and the median of five warm calls, which take the
cached fast path. The second process's first call shows what the caches save
(generated modules, tuned configs; on a TPU also JAX's compiled Mosaic kernels,
`runtime/jax_cache.py` — interpret-mode programs cannot be stored). Run from
the repository root: ``python benchmarks/compile_latency.py [names...]``.
"""

from __future__ import annotations

import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

if not __package__:  # run as a script: make `examples` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.run_all import EXAMPLES, ROOT  # noqa: E402

WARM_CALLS = 5


def timed_call(kernel, inputs: tuple) -> float:
    """Seconds for one call, including reading one output value back."""
    start = time.perf_counter()
    result = kernel(*inputs)
    for tensor in result if isinstance(result, (tuple, list)) else (result,):
        if isinstance(tensor, torch.Tensor) and tensor.numel():
            tensor.reshape(-1)[0].item()
    return time.perf_counter() - start


def measure(name: str) -> tuple[float, float]:
    """(first call in seconds, median warm call in milliseconds) for one example."""
    module = importlib.import_module(f"examples.{name}")
    kernel = getattr(module, name)
    inputs = module.example_inputs()
    kernel.reset()
    first = timed_call(kernel, inputs)
    warm = [timed_call(kernel, inputs) for _ in range(WARM_CALLS)]
    return first, 1000.0 * statistics.median(warm)


def in_a_process(name: str, cache: str) -> tuple[float, float]:
    """`measure(name)` in a new Python process using the caches under `cache`."""
    env = dict(os.environ, PALLASITE_CACHE_DIR=os.path.join(cache, "cache"),
               PALLASITE_CODE_DIR=os.path.join(cache, "code"), PALLASITE_AUTOTUNE_QUIET="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, __file__, "--child", name], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError((done.stderr.strip().splitlines() or ["?"])[-1])
    first, warm = done.stdout.split()[-2:]
    return float(first), float(warm)


def main(names: list[str]) -> None:
    print(f"{'example':<26} | {'first call (s)':>14} | {'warm call (ms)':>14} | "
          f"{'2nd process (s)':>15} | {'2nd / 1st':>9}")
    print(f"{'-' * 26}-+-{'-' * 14}-+-{'-' * 14}-+-{'-' * 15}-+-{'-' * 9}")
    ratios = []
    for name in names:
        with tempfile.TemporaryDirectory(prefix="pallasite-latency-") as cache:
            try:
                first, warm = in_a_process(name, cache)
                second, _ = in_a_process(name, cache)
            except Exception as exception:  # one failing example should not hide the rest
                print(f"{name:<26} | failed: {type(exception).__name__}: {exception}")
                continue
        ratios.append(second / first)
        print(f"{name:<26} | {first:>14.2f} | {warm:>14.2f} | {second:>15.2f} | {second / first:>9.2f}")
    if ratios:
        print(f"median second-process / first-process first call: {statistics.median(ratios):.2f} "
              f"({len(ratios)} examples)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        first_call, warm_call = measure(sys.argv[2])
        print(first_call, warm_call)
    else:
        main(sys.argv[1:] or [name for name in EXAMPLES if not name.startswith("ring_")])
