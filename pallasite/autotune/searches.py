"""Helion's autotuner objects (`helion.autotuner`), for the `autotuner_fn=` kernel setting.

A Helion program may choose how its kernel is tuned: `autotuner_fn(bound_kernel, args)`
returns a tuner whose `autotune()` gives the config the first call runs
(`tuner.tuned_config`). The tuners here are pallasite's own search (`search.py`) at a
fixed effort, with its accuracy check:

- `NeighbourhoodSearch`: the default config and every config one knob away ("quick").
- `GeneticSearch`: the seeded population search ("full").
- `LocalAutotuneCache(tuner)`: the on-disk cache (`cache.py`) around a tuner: the entry of
  this kernel, signature and chip when there is one, else the tuner's result, stored.

`search_algorithms` names them, under Helion's names of the searches they stand for too
(`PatternSearch` steps between neighbours; `DifferentialEvolutionSearch` and
`RandomSearch` evolve or sample a population).
"""
from __future__ import annotations

from typing import Any

from .. import exc
from ..config import Config
from . import cache
from .progress import log


class _Search:
    """A pallasite search at one effort, for one bound kernel and its arguments."""

    effort = "quick"

    def __init__(self, bound_kernel: Any, args: tuple, **options: Any):
        if options:
            raise exc.InvalidConfig(
                f"{type(self).__name__}({', '.join(sorted(options))}=...): pallasite's searches take no options "
                "(the kernel's autotune_* settings steer them).")
        self.bound_kernel = bound_kernel
        self.args = tuple(args)

    def autotune(self) -> Config | None:
        """The search's best config that matches the baseline (None: the search failed, the
        default config runs)."""
        from .tuner import searched_config

        return searched_config(self.bound_kernel, self.args, {}, effort=self.effort)

    def cache_key(self) -> dict[str, Any]:
        """What identifies this tuner's result on disk (`LocalAutotuneCache`)."""
        from .tuner import cache_fields

        return {**cache_fields(self.bound_kernel), "search": type(self).__name__}


class NeighbourhoodSearch(_Search):
    """The default config and every config one knob away (effort "quick")."""

    effort = "quick"


class GeneticSearch(_Search):
    """A seeded population search: neighbours and samples, then generations of mutated and
    crossed children of the best (effort "full")."""

    effort = "full"


class LocalAutotuneCache:
    """The on-disk autotune cache around a tuner: `autotune()` returns the cached config of
    this kernel, argument signature, chip and tuner when there is one (and it still plans),
    else runs the tuner and stores its result."""

    def __init__(self, autotuner: _Search):
        if not isinstance(autotuner, _Search):
            raise exc.InvalidConfig(f"LocalAutotuneCache({autotuner!r}): expected one of pallasite's searches "
                                    f"({', '.join(sorted(search_algorithms))}).")
        self.autotuner = autotuner

    def autotune(self) -> Config | None:
        bound = self.autotuner.bound_kernel
        name = bound.kernel.fn.__name__
        fields = self.autotuner.cache_key()
        cached = cache.load(name, fields)
        if cached is not None:
            try:
                config = bound.config_spec.check(cached)
                log(f"{name}: using the cached config {dict(config)} ({cache.cache_dir()}); no search",
                    bound.kernel.tune.quiet)
                return config
            except exc.InvalidConfig:
                pass  # it no longer plans: search again and replace it
        config = self.autotuner.autotune()
        if config is not None:
            cache.store(name, fields, config)
        return config


search_algorithms: dict[str, type[_Search]] = {
    "NeighbourhoodSearch": NeighbourhoodSearch, "GeneticSearch": GeneticSearch,
    "PatternSearch": NeighbourhoodSearch, "DifferentialEvolutionSearch": GeneticSearch,
    "RandomSearch": GeneticSearch,
}
