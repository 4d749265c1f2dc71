"""The search over a `ConfigSpec`: which configs to try, in which order, and the winner.

The objective is injected (`objective(config) -> seconds`): on a CPU the TPU cost
model's estimate, on a TPU the measured device time (`autotune/measure.py`). A
config the objective rejects (`exc.InvalidConfig`: planning refused it, e.g. VMEM
overflow) or fails on (any pallasite error) counts as infinitely slow and never
aborts the search.

- effort "none": the default config only.
- effort "quick": the default and its neighbourhood (every config one knob away).
- effort "full": a seeded genetic search: an initial population (the default, its
  neighbours and random samples), then generations of mutated children of the best
  few (plus crossover), stopping after a fixed budget or when no generation improves,
  then a hill-climb from the best (every config one knob away, while that improves);
  the top few are then re-ranked by `rerank` (on a TPU: a paired re-measurement).
- `configs=[...]`: exactly those configs (the invalid ones listed in
  `SearchResult.rejected_configs`; if all are invalid, one `InvalidConfig` lists each).
- `seeds` (`autotune_seed_configs`): configs the search starts from beside the default:
  each is scored first, "quick" also tries its neighbourhood, "full" puts it (and its
  neighbours) in the initial population, so the generations breed from it when it is
  good. A seed that does not plan is listed in `SearchResult.rejected_seeds` and the
  search goes on. Effort "none" and `configs=[...]` (an exact list) take no seeds.
The order of candidates depends only on the space and `seed`, so a fixed seed gives
the same search (and, with a deterministic objective, the same winner).
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .. import exc
from ..config import Config
from .config_spec import ConfigSpec
from .progress import Progress

EFFORTS = ("none", "quick", "full")
FULL_BUDGET = 160  # objective evaluations of a full search (before the re-rank)
FULL_POPULATION = 16
FULL_PATIENCE = 3  # generations without improvement before stopping
POLISH_BUDGET = 48  # evaluations the final hill-climb may add past the generations
RERANK_TOP = 3
RERANK_MOST = 8  # finalists re-ranked at most, however many a rebenchmark threshold admits


@dataclass(frozen=True)
class Trial:
    """One candidate in search order: its time (inf if rejected) and why it was rejected."""

    config: Config
    seconds: float
    error: str | None = None


@dataclass
class SearchResult:
    best: Config
    best_seconds: float
    default: Config
    trials: list[Trial] = field(default_factory=list)
    wall_seconds: float = 0.0
    # `configs=[...]` entries rejected (position, the config as given, why); the rest ran
    rejected_configs: list[tuple[int, Config, str]] = field(default_factory=list)
    # `autotune_seed_configs` entries rejected (position, the config as given, why)
    rejected_seeds: list[tuple[int, Config, str]] = field(default_factory=list)

    def save(self, path: Any) -> None:
        """Helion's `bound.autotune(args).save(path)`: the best config's `Config.save`."""
        self.best.save(path)

    def ranked(self) -> list[Trial]:
        """Distinct legal trials, fastest first."""
        seen, out = set(), []
        for trial in sorted(self.trials, key=lambda t: t.seconds):
            if trial.config.key() not in seen and math.isfinite(trial.seconds):
                seen.add(trial.config.key())
                out.append(trial)
        return out


class _Evaluator:
    """Memoized objective, recording every distinct kernel as a `Trial`: a candidate is
    first made canonical (`ConfigSpec.canonical`: the knobs its plan left unused dropped),
    so configs planning the same kernel are scored once, under one config."""

    def __init__(self, space: ConfigSpec, objective: Callable[[Config], float],
                 overrides: dict, progress: Progress):
        self.space, self.objective, self.overrides, self.progress = space, objective, overrides, progress
        self.trials: list[Trial] = []
        self.seen: dict[tuple, float] = {}

    def __call__(self, config: Config) -> float:
        if self.overrides:
            config = Config({**config, **self.overrides})
        try:
            config = self.space.normalize(config)
        except exc.InvalidConfig as err:
            return self._record(config, math.inf, err.message)
        key = config.key()
        if key in self.seen:
            return self.seen[key]
        try:
            canonical, _ = self.space.canonical(config)
        except exc.PallasiteError as err:
            return self._record(config, math.inf, f"{type(err).__name__}: {err.message}")
        if canonical.key() in self.seen:  # the same kernel as a config already scored
            self.seen[key] = self.seen[canonical.key()]
            return self.seen[key]
        self.seen[key] = seconds = self._score(canonical)
        return seconds

    def _score(self, config: Config) -> float:
        try:
            seconds = float(self.objective(config))
            error = None
        except exc.PallasiteError as err:
            seconds, error = math.inf, f"{type(err).__name__}: {err.message}"
        return self._record(config, seconds, error)

    def _record(self, config: Config, seconds: float, error: str | None) -> float:
        self.seen[config.key()] = seconds
        self.trials.append(Trial(config, seconds, error))
        self.progress.advance(min((t.seconds for t in self.trials), default=math.inf))
        return seconds

    def reason(self, config: Config) -> str:
        """Why `config` scored inf (the error of its trial, or of the trial it matched)."""
        keys = {config.key()}
        for make in (lambda c: Config({**c, **self.overrides}), self.space.normalize,
                     lambda c: self.space.canonical(c)[0]):
            try:
                config = make(config)
                keys.add(config.key())
            except exc.PallasiteError:
                break
        found = [t.error for t in self.trials if t.config.key() in keys and t.error]
        return found[-1] if found else "rejected"

    def best(self, n: int = 1) -> list[Trial]:
        ranked = sorted((t for t in self.trials if math.isfinite(t.seconds)), key=lambda t: t.seconds)
        return ranked[:n]


def search(space: ConfigSpec, objective: Callable[[Config], float], *, effort: str = "quick",
           seed: int = 0, configs: Sequence[Config] | None = None, overrides: dict | None = None,
           rerank: Callable[[list[Config]], list[float]] | None = None,
           title: str = "autotune", quiet: bool | None = None,
           seeds: Sequence[Config] = (), rerank_threshold: float | None = None) -> SearchResult:
    """Search `space` for the config with the least `objective`. `rerank(configs)`, if
    given, re-scores the top candidates of a full search (lists of the same length): the
    best three, or with `rerank_threshold` (`autotune_rebenchmark_threshold`) every one
    within that factor of the best (at most `RERANK_MOST`); `seeds`: configs to start from
    beside the default (module docstring)."""
    if effort not in EFFORTS:
        raise exc.InvalidConfig(f"autotune_effort={effort!r}: expected one of {EFFORTS}.")
    start = time.perf_counter()
    overrides = dict(overrides or {})
    default = space.normalize(Config({**space.default_config(), **overrides}))
    try:  # the default as the search records it (canonical), so reports can point at it
        default = space.canonical(default)[0]
    except exc.PallasiteError:
        pass  # the default with these overrides does not plan: it is recorded as rejected
    rng = random.Random(seed)
    seeds = [] if configs or effort == "none" else list(seeds)
    starts = [default, *(_start(space, config, overrides) for config in seeds)]
    total = _planned(space, effort, configs, starts)
    with Progress(title, total, quiet=quiet) as progress:
        evaluate = _Evaluator(space, objective, overrides, progress)
        rejected, rejected_seeds = [], []
        if configs:
            for i, config in enumerate(configs):
                if not math.isfinite(evaluate(config)):
                    rejected.append((i, config, evaluate.reason(config)))
        else:
            evaluate(default)
            for i, config in enumerate(seeds):
                if not math.isfinite(evaluate(config)):
                    rejected_seeds.append((i, config, evaluate.reason(config)))
            starts = [default] + [point for point, config in zip(starts[1:], seeds)
                                  if point is not None and math.isfinite(evaluate(config))]
            if effort == "quick":
                for point in starts:
                    for config in space.neighbours(point):
                        evaluate(config)
            elif effort == "full":
                _genetic(space, evaluate, starts, rng)
        finalists = _finalists(evaluate, rerank_threshold)
        if effort == "full" and rerank is not None and len(finalists) > 1:
            scores = rerank([t.config for t in finalists])
            finalists = [t for _, t in sorted(zip(scores, finalists), key=lambda p: p[0])]
    if configs and not finalists:
        listed = "\n".join(f"  configs[{i}] {dict(config)}: {reason}" for i, config, reason in rejected)
        raise exc.InvalidConfig(f"Every config in configs=[...] is invalid for this kernel:\n{listed}")
    if not finalists:
        reasons = "; ".join(sorted({t.error for t in evaluate.trials if t.error}))[:2000]
        raise exc.InvalidConfig(f"Every candidate config was rejected: {reasons}")
    best = finalists[0]
    return SearchResult(best.config, best.seconds, default, evaluate.trials, time.perf_counter() - start,
                        rejected, rejected_seeds)


def _finalists(evaluate: _Evaluator, threshold: float | None) -> list[Trial]:
    """The candidates a re-rank re-scores: the best `RERANK_TOP`, or those within
    `threshold` times the best time (the best always, at most `RERANK_MOST`)."""
    if threshold is None:
        return evaluate.best(RERANK_TOP)
    ranked = evaluate.best(RERANK_MOST)
    return [t for t in ranked if t is ranked[0] or t.seconds <= ranked[0].seconds * threshold]


def _start(space: ConfigSpec, config: Config, overrides: dict) -> Config | None:
    """A seed as a point of the space to step from (None when it does not normalize)."""
    try:
        return space.normalize(Config({**config, **overrides}))
    except exc.InvalidConfig:
        return None


def _planned(space: ConfigSpec, effort: str, configs, starts: list[Config | None]) -> int:
    if configs:
        return len(configs)
    if effort == "none":
        return 1
    if effort == "quick":
        return sum(1 + (len(space.neighbours(start)) if start is not None else 0) for start in starts)
    return FULL_BUDGET + POLISH_BUDGET  # at most: the generations, then the hill-climb


def _genetic(space: ConfigSpec, evaluate: _Evaluator, starts: list[Config], rng: random.Random) -> None:
    """Population-based search from `starts` (the default and the seeds that plan): their
    neighbours and samples, then mutated and crossed children of the best."""
    default = starts[0]
    for start in starts:
        for config in space.neighbours(start):
            if len(evaluate.trials) >= FULL_BUDGET:
                return
            evaluate(config)
    for _ in range(4 * FULL_POPULATION):  # bounded: in a tiny space samples keep repeating
        if len(evaluate.trials) >= FULL_POPULATION:
            break
        evaluate(space.sample(rng))
    best = evaluate.best(1)[0].seconds if evaluate.best(1) else math.inf
    stale = 0
    while len(evaluate.trials) < FULL_BUDGET and stale < FULL_PATIENCE:
        parents = [t.config for t in evaluate.best(4)] or [default]
        before = len(evaluate.trials)
        for _ in range(FULL_POPULATION):
            parent = rng.choice(parents)
            if len(parents) > 1 and rng.random() < 0.3:
                child = _crossover(space, parent, rng.choice(parents), rng)
            else:
                child = space.mutate(parent, rng, changes=rng.choice((1, 1, 2)))
            evaluate(child)
            if len(evaluate.trials) >= FULL_BUDGET:
                break
        new_best = evaluate.best(1)[0].seconds if evaluate.best(1) else math.inf
        stale = stale + 1 if new_best >= best or len(evaluate.trials) == before else 0
        best = min(best, new_best)
    _polish(space, evaluate)


def _polish(space: ConfigSpec, evaluate: _Evaluator) -> None:
    """Hill-climb from the best config found: score every config one knob away and move to
    the best while that improves (a generation may stop one step short of an optimum the
    mutations did not happen to hit), within `POLISH_BUDGET` more evaluations."""
    limit = max(len(evaluate.trials), FULL_BUDGET) + POLISH_BUDGET
    tried: set[tuple] = set()
    while evaluate.best(1) and len(evaluate.trials) < limit:
        best = evaluate.best(1)[0]
        if best.config.key() in tried:  # its neighbourhood gave nothing better
            return
        tried.add(best.config.key())
        for config in space.neighbours(best.config):
            if len(evaluate.trials) >= limit:
                return
            evaluate(config)


def _crossover(space: ConfigSpec, a: Config, b: Config, rng: random.Random) -> Config:
    genes = space.genes()
    va, vb = space.values_of(a, genes), space.values_of(b, genes)
    return space.config_of([x if rng.random() < 0.5 else y for x, y in zip(va, vb)], genes, base=a)
