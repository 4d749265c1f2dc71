"""Helion's tuning hooks (issue #22): `autotuner_fn=` chooses the tuner of a kernel's first
call, `helion.autotuner.LocalAutotuneCache` is pallasite's on-disk cache around such a
tuner, `search_algorithms` names pallasite's searches, and
`autotune_rebenchmark_threshold` picks which finalists a full search re-measures."""
from __future__ import annotations

import inspect
import math

import pytest
import torch

import pallasite
from pallasite import exc
from pallasite.autotune.search import search
from pallasite.autotuner import GeneticSearch, LocalAutotuneCache, NeighbourhoodSearch, search_algorithms
from plan_helpers import add_kernel

X, Y = torch.randn(16, 256), torch.randn(16, 256)


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PALLASITE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PALLASITE_AUTOTUNE_QUIET", "1")


class CountedSearch(NeighbourhoodSearch):
    runs = 0

    def autotune(self):
        CountedSearch.runs += 1
        return super().autotune()


def _cached_tuner(bound_kernel, args, **kwargs):
    return LocalAutotuneCache(CountedSearch(bound_kernel, args, **kwargs))


def test_local_autotune_cache_searches_once_and_a_new_kernel_reads_the_disk():
    CountedSearch.runs = 0
    first = add_kernel(autotune_effort="quick", autotuner_fn=_cached_tuner)
    torch.testing.assert_close(first(X, Y), X + Y)
    assert CountedSearch.runs == 1
    chosen = first.bind((X, Y)).resolve_config()
    again = add_kernel(autotune_effort="quick", autotuner_fn=_cached_tuner)  # as a new process would
    torch.testing.assert_close(again(X, Y), X + Y)
    assert CountedSearch.runs == 1  # from the disk cache
    assert again.bind((X, Y)).resolve_config() == chosen


def test_a_programs_tuner_factory_as_helions_add_example_writes_it():
    def one_generation(bound_kernel, args, **kwargs):
        tuner_cls = search_algorithms["PatternSearch"]
        options = dict(kwargs)
        if "max_generations" in inspect.signature(tuner_cls.__init__).parameters:
            options.setdefault("max_generations", 1)
        return LocalAutotuneCache(tuner_cls(bound_kernel, args, **options))

    kernel = add_kernel(autotune_effort="quick", autotuner_fn=one_generation, autotune_rebenchmark_threshold=1.0005)
    torch.testing.assert_close(kernel(X, Y), X + Y)
    assert search_algorithms["PatternSearch"] is NeighbourhoodSearch
    assert search_algorithms["DifferentialEvolutionSearch"] is GeneticSearch


def test_the_config_a_tuner_returns_is_the_one_that_runs():
    class Fixed:
        def __init__(self, bound_kernel, args):
            self.bound_kernel = bound_kernel

        def autotune(self):
            return pallasite.Config(block_sizes=[8, 128])

    kernel = add_kernel(autotune_effort="quick", autotuner_fn=Fixed)
    torch.testing.assert_close(kernel(X, Y), X + Y)
    assert kernel.bind((X, Y)).resolve_config() == pallasite.Config(block_sizes=[8, 128])
    with pytest.raises(exc.InvalidConfig, match="take no options"):
        NeighbourhoodSearch(kernel.bind((X, Y)), (X, Y), max_generations=1)
    with pytest.raises(exc.InvalidConfig, match="LocalAutotuneCache"):
        LocalAutotuneCache(Fixed(None, ()))


def test_the_rebenchmark_threshold_chooses_the_finalists_a_full_search_re_measures():
    space = add_kernel().bind((torch.empty(512, 2048, device="meta"),) * 2).config_spec

    def objective(config):
        a, b = config.block_sizes
        return 1.0 + 0.01 * (math.log2(a / 8) + math.log2(b / 128)) + 0.001 * bool(config.get("loop_orders"))

    seen = []

    def rerank(configs):
        seen.append(len(configs))
        return list(range(len(configs)))

    search(space, objective, effort="full", rerank=rerank)
    search(space, objective, effort="full", rerank=rerank, rerank_threshold=1.0)
    search(space, objective, effort="full", rerank=rerank, rerank_threshold=1.5)
    # the default three; within 0%: the best alone (nothing to re-rank); within 50%: at most eight
    assert seen == [3, 8]


@pytest.mark.parametrize("setting, value", [("autotune_rebenchmark_threshold", 0.9),
                                            ("autotune_rebenchmark_threshold", "1.1"), ("autotuner_fn", 3)])
def test_bad_tuning_hooks_are_refused_at_decoration(setting, value):
    with pytest.raises(exc.InvalidConfig, match=setting):
        add_kernel(**{setting: value})
