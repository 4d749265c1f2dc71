"""Measured device time, the search's objective on a real TPU.

`measured_objective` times a config's compiled kernel: one warm-up run (compile and
first transfer, excluded), then the median of `repeats` runs. `paired_rerank`
re-measures the finalists interleaved (A B C A B C ...) so drift affects them alike,
and one noisy first measurement cannot win.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import jax

from ..config import Config


def _runner(bound, config: Config, args: tuple, kwargs: dict) -> Callable[[], Any]:
    compiled = bound.compile_config(config)
    jax_args = compiled._jax_args(compiled._values(args, kwargs))
    return lambda: jax.block_until_ready(compiled._jitted(*jax_args))


def _time(run: Callable[[], Any]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def measured_objective(bound, args: tuple, kwargs: dict | None = None,
                       repeats: int = 7) -> Callable[[Config], float]:
    def objective(config: Config) -> float:
        run = _runner(bound, config, args, kwargs or {})
        run()  # warm-up: compile and first transfer, not counted
        return statistics.median(_time(run) for _ in range(repeats))
    return objective


def paired_rerank(bound, args: tuple, kwargs: dict | None = None,
                  rounds: int = 9) -> Callable[[list[Config]], list[float]]:
    def rerank(configs: list[Config]) -> list[float]:
        runs = [_runner(bound, config, args, kwargs or {}) for config in configs]
        for run in runs:
            run()
        times: list[list[float]] = [[] for _ in runs]
        for _ in range(rounds):
            for i, run in enumerate(runs):
                times[i].append(_time(run))
        return [statistics.median(t) for t in times]
    return rerank
