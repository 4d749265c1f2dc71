"""Compile latency of the example kernels.

For each example: the first call after ``kernel.reset()`` (trace, codegen and
JAX compilation) and the median of five warm calls, which take the cached
fast path. Run from the repository root: ``python benchmarks/compile_latency.py``.
"""

from __future__ import annotations

import importlib
import statistics
import sys
import time
from pathlib import Path

import torch

if not __package__:  # run as a script: make `examples` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.run_all import EXAMPLES  # noqa: E402

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


def main() -> None:
    print(f"{'example':<12} | {'first call (s)':>14} | {'warm call (ms)':>14}")
    print(f"{'-' * 12}-+-{'-' * 14}-+-{'-' * 14}")
    for name in EXAMPLES:
        try:
            first, warm = measure(name)
        except Exception as exception:  # one failing example should not hide the rest
            first_line = (str(exception).strip().splitlines() or [""])[0]
            print(f"{name:<12} | failed: {type(exception).__name__}: {first_line}")
            continue
        print(f"{name:<12} | {first:>14.2f} | {warm:>14.2f}")


if __name__ == "__main__":
    main()
