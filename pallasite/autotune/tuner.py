"""Autotuning one bound kernel: objective, search, accuracy check and the disk cache.

When it runs: on the first call of a kernel at an argument signature, if the kernel
declares no `config=` (nor a one-entry `configs=[...]`), its effort is not "none",
its shapes are static, and the arguments are concrete (under an enclosing
`jax.jit` no candidate can run: the cached config is used, else the default). The winner is then that signature's config for
the rest of the process (`BoundKernel.resolve_config`), and is cached on disk, so a
later process skips the search. `to_code()` before the first call shows the default.
The test suite sets `PALLASITE_AUTOTUNE_EFFORT=none` (tests/conftest.py) so its
hundreds of kernels compile one config each; tests of the tuner opt in per kernel.
"""
from __future__ import annotations

import hashlib
import inspect
import math
import os
from typing import Any, Callable

import jax
import torch

from .. import exc
from ..config import Config, as_config
from . import cache
from .cost_model import estimate
from ..exc import warn_user
from .progress import log
from .search import SearchResult, search
from .settings import callable_identity

ACCURACY_CANDIDATES = 3  # ranked configs whose output is tried before falling back to the default


def wants_tuning(bound) -> bool:
    """Whether the kernel's first call at this signature picks its config by tuning."""
    kernel = bound.kernel
    if bound.dynamic or kernel.tune.effort == "none":
        return False
    return kernel.tune.force or not (kernel.config is not None or len(kernel.configs) == 1)


def is_traced(args: tuple, kwargs: dict) -> bool:
    return any(isinstance(v, jax.core.Tracer) for v in (*args, *kwargs.values()))


def traced_config(bound) -> Config | None:
    """The config a first call under `jax.jit` runs (`kernel.jax_fn` on traced arrays): no
    candidate can run on traced values, so the cached config of this signature if there is
    one, else the default (said once per kernel: a call on concrete arrays tunes and
    caches)."""
    config = _cached(bound, cache_fields(bound))
    if config is None and _first_note(bound.kernel, "traced"):
        how = ("A kernel that copies between devices runs only under jax.shard_map, so it is never tuned "
               "by a call: choose its config with config= (kernel.bind(args).autotune(args) ranks the "
               "candidates without caching)." if bound.remote else
               "Call it once on concrete arrays to tune and cache a config.")
        warn_user(f"pallasite autotune: {bound.kernel.fn.__name__} is first called under jax.jit (traced "
                  "arguments), where no candidate can run and no tuned config is cached for this "
                  f"signature; the default config runs. {how}")
    return config


def _first_note(kernel, what: str) -> bool:
    """True the first time a kernel asks to note `what` (each note is said once per kernel)."""
    noted = kernel.__dict__.setdefault("_autotune_notes", set())
    if what in noted:
        return False
    noted.add(what)
    return True


def _cached(bound, fields: dict) -> Config | None:
    """This signature's cached config (`fields`: its cache key), if it still plans (else
    None, with a warning)."""
    name = bound.kernel.fn.__name__
    cached = cache.load(name, fields)
    if cached is None:
        return None
    try:
        config = bound.config_spec.check(cached)
    except exc.InvalidConfig as err:
        warn_user(f"pallasite autotune cache: the cached config of {name} no longer plans "
                  f"({err.message}); ignoring it.")
        return None
    log(f"{name}: using the cached config {dict(config)} ({cache.cache_dir()}); no search",
        bound.kernel.tune.quiet)
    return config


def note_untuned(bound) -> None:
    """With dynamic shapes (`static_shapes=False`) nothing is tuned: one config serves
    every size of a bucket, and a config tuned at one size need not plan, or be fast, at
    another. When the kernel asked for tuning (an effort other than "none" given by
    `autotune_effort=` or PALLASITE_AUTOTUNE_EFFORT, or several `configs`), say so once per
    kernel, naming the config that runs; the default effort asks for nothing."""
    kernel = bound.kernel
    asked = kernel.tune.effort != "none" and kernel.tune.effort_asked or len(kernel.configs) > 1
    if kernel.config is not None or not asked or not _first_note(kernel, "dynamic"):
        return
    asked = (f"configs=[...] ({len(kernel.configs)} configs)" if len(kernel.configs) > 1
             else f'autotune_effort="{kernel.tune.effort}"')
    runs = f"configs[0] {dict(kernel.configs[0])}" if kernel.configs else "the default config"
    warn_user(f"pallasite autotune: {kernel.fn.__name__} has static_shapes=False, so it is not tuned "
              f"({asked} is ignored: one config serves every size of a bucket, and a config tuned at "
              f"one size need not plan at another); {runs} runs. Pass config= to choose one, or use "
              "static shapes to tune.")


def objective_for(bound, args: tuple, kwargs: dict | None = None, chip: str | None = None
                  ) -> tuple[Callable[[Config], float], Callable | None, str]:
    """(objective, rerank, label): measured device time on a TPU, else the cost model."""
    from ..runtime.chips import on_tpu

    if chip is None and on_tpu():
        from .measure import measured_objective, paired_rerank

        return measured_objective(bound, args, kwargs), paired_rerank(bound, args, kwargs), "measured"
    space = bound.config_spec

    def model(config: Config) -> float:
        # the search canonicalized `config` just before (planning it for the default chip)
        plan = space.planned(config) if chip is None else None
        return estimate(bound.kernel, args, config, kwargs=kwargs, chip=chip, plan=plan).seconds

    return model, None, "model"


def autotune(bound, args: tuple, kwargs: dict | None = None, *, effort: str | None = None,
             objective: Callable[[Config], float] | None = None, chip: str | None = None,
             quiet: bool | None = None) -> SearchResult:
    """Search `bound`'s config space for these arguments (no cache, no accuracy check)."""
    kernel = bound.kernel
    settings = kernel.tune
    rerank, label = None, "objective"
    if objective is None:
        objective, rerank, label = objective_for(bound, tuple(args), dict(kwargs or {}), chip)
    effort = effort or (settings.effort if settings.effort != "none" else "quick")
    if quiet is None and (settings.quiet or not settings.progress_bar):
        quiet = True
    return search(bound.config_spec, objective, effort=effort, seed=settings.random_seed,
                  configs=kernel.configs or None, overrides=settings.config_overrides, rerank=rerank,
                  title=f"autotune {kernel.fn.__name__} ({label})", quiet=quiet, seeds=settings.seed_configs,
                  rerank_threshold=settings.rebenchmark_threshold)


def kernel_identity(fn: Callable) -> str:
    """The kernel's name in the cache: its source file and qualified name. Not its module
    name, which is `__main__` when the file runs as a script: `python mykernels.py` and
    `pallasite run mykernels` share their tuned configs."""
    try:
        where = os.path.realpath(inspect.getsourcefile(fn) or "")
    except TypeError:  # a builtin or a C function: no file
        where = ""
    return f"{where or fn.__module__}:{fn.__qualname__}"


def cache_fields(bound) -> dict[str, Any]:
    from ..version import __version__
    from ..runtime.chips import default_chip, on_tpu
    from ..runtime.scope import stable_text

    kernel = bound.kernel
    try:
        text = inspect.getsource(kernel.fn)
    except (OSError, TypeError):
        text = kernel.fn.__code__.co_code.hex()
    specs = [(s.kind, s.shape, str(s.dtype), getattr(s.python_type, "__name__", None),
              _stable_const(s.value) if s.kind == "const" else None) for s in bound.specs]
    captured = [(name, s.shape, str(s.dtype)) for name, s in bound.captured.items()]
    chip = jax.devices()[0].device_kind if on_tpu() else f"model:{default_chip()}"
    return {"kernel": kernel_identity(kernel.fn),
            "source": hashlib.sha256(text.encode()).hexdigest(), "signature": repr((specs, captured)),
            # kernels a factory builds share source and name: their closure values tell them apart
            "closure": callable_identity(kernel.fn),
            # the globals and closure values the trace read (runtime/scope.py; stable names on disk)
            "constants": stable_text(bound.constants),
            "chip": chip, "pallasite": __version__, "jax": jax.__version__,
            "configs": repr([c.key() for c in kernel.configs]), **kernel.tune.describe()}


def _stable_const(value: Any) -> Any:
    """A constant argument as the cache key writes it: a function (an epilogue) by its
    module, name and source (`callable_identity`), not by its address."""
    return callable_identity(value) if inspect.isfunction(value) else value


def tuned_config(bound, args: tuple, kwargs: dict) -> Config | None:
    """The config a first call runs: the kernel's `autotuner_fn(bound, args).autotune()` when
    it names one (`autotune/searches.py`), else cached, else searched and checked (then
    cached); None (the default config) if the search itself fails, with a warning."""
    tuner_fn = bound.kernel.tune.autotuner_fn
    if tuner_fn is not None:
        chosen = tuner_fn(bound, tuple(args)).autotune()
        return None if chosen is None else bound.config_spec.check(as_config(chosen))
    fields = cache_fields(bound)
    cached = _cached(bound, fields)
    if cached is not None:
        return cached
    return searched_config(bound, args, kwargs, fields)


def searched_config(bound, args: tuple, kwargs: dict, fields: dict | None = None,
                    effort: str | None = None) -> Config | None:
    """The search's config for these arguments, checked for accuracy (`_accurate`) and,
    with `fields` (its cache key), cached; None (the default) if the search fails."""
    name = bound.kernel.fn.__name__
    try:
        result = autotune(bound, args, kwargs, effort=effort)
    except Exception as err:  # noqa: BLE001 - a failed search must not fail a call the default serves
        if bound.kernel.configs and isinstance(err, exc.InvalidConfig):
            raise  # every config in configs=[...] is invalid (one error lists each): nothing to run
        message = err.message if isinstance(err, exc.PallasiteError) else f"{type(err).__name__}: {err}"
        warn_user(f"pallasite autotune: the search for {name} failed ({message}); using the default "
                  "config.")
        return None
    for i, given, reason in result.rejected_configs:
        warn_user(f"pallasite autotune: configs[{i}] {dict(given)} is invalid for {name} ({reason}); "
                  "it is skipped.")
    for i, given, reason in result.rejected_seeds:
        warn_user(f"pallasite autotune: autotune_seed_configs[{i}] {dict(given)} is invalid for {name} "
                  f"({reason}); the search started without it.")
    config, matched = _accurate(bound, result, args, kwargs)
    if not matched or fields is None:  # a mismatch is no tuned config to keep
        return config
    path = cache.store(name, fields, config, {"seconds": result.best_seconds,
                                              "candidates": len(result.trials)})
    log(f"{name}: chose {dict(config)} from {len(result.trials)} candidates in "
        f"{result.wall_seconds:.2f}s; " + (f"cached in {path}" if path is not None else "not cached"),
        bound.kernel.tune.quiet)
    return config


def _accurate(bound, result: SearchResult, args: tuple, kwargs: dict) -> tuple[Config, bool]:
    """(config, matched): the best-ranked config whose output matches the baseline (the
    default config's output, or `autotune_baseline_fn`'s); else the default, with
    matched False when even the default does not match `autotune_baseline_fn` (then a
    warning says so and the caller caches nothing)."""
    settings = bound.kernel.tune
    name = bound.kernel.fn.__name__
    default = result.default
    ranked = [t.config for t in result.ranked()][:ACCURACY_CANDIDATES] or [default]
    if not settings.accuracy_check:
        return ranked[0], True
    if settings.baseline_fn is None and ranked[0] == default:
        return default, True
    labels = _labels(bound, args, kwargs)
    atol, rtol = settings.baseline_atol, settings.baseline_rtol
    if settings.baseline_fn is not None:
        expected = _run(lambda a, k: settings.baseline_fn(*a, **k), args, kwargs)
        baseline_name = f"autotune_baseline_fn {getattr(settings.baseline_fn, '__name__', '')}"
        checked = ranked + ([default] if default not in ranked else [])
    else:
        expected = _run(lambda a, k: bound.compile_config(default)(*a, **k), args, kwargs)
        baseline_name = f"the default config {dict(default)}"
        checked = ranked
    problems = []
    for config in checked:
        if config == default and settings.baseline_fn is None:
            return config, True
        try:
            got = _run(lambda a, k: bound.compile_config(config)(*a, **k), args, kwargs)
            problem = _difference(got, expected, atol, rtol, labels)
        except exc.PallasiteError as err:
            problem = f"it failed: {err.message}"
        if problem is None:
            return config, True
        problems.append((config, problem))
        if config != default:
            warn_user(f"pallasite autotune: discarding config {dict(config)} of {name}: its output "
                      f"differs from {baseline_name} ({problem}).")
    if settings.baseline_fn is None:
        warn_user(f"pallasite autotune: none of the {len(ranked)} best configs of {name} matched "
                  f"{baseline_name}'s output; using the default config.")
        return default, True
    detail = dict(problems).get(default, problems[-1][1] if problems else "")
    warn_user(f"pallasite autotune: no config of {name} matched {baseline_name} within atol {atol} + "
              f"rtol {rtol}: the {len(checked)} checked (the default config included) all differ; the "
              f"default config {dict(default)}: {detail}. The kernel or the baseline is wrong (a "
              "baseline must make the kernel's in-place updates too). Running the default config; "
              "not cached.")
    return default, False


def _labels(bound, args: tuple, kwargs: dict) -> list[str]:
    """Names of what `_run` returns for the kernel: its returned values, then the tensor
    arguments (which an in-place kernel updates)."""
    try:
        params = list(inspect.signature(bound.kernel.fn).parameters)
    except (TypeError, ValueError):
        params = []
    names = [params[i] if i < len(params) else f"#{i}" for i, a in enumerate(args)
             if isinstance(a, torch.Tensor)]
    names += [k for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    return [f"argument {n} (as updated in place by the kernel)" for n in names]


def _run(fn: Callable, args: tuple, kwargs: dict) -> list:
    """`fn` on copies of the arguments (in-place updates stay off the caller's tensors),
    from the same torch RNG state each time: [returned values, updated tensor arguments]."""
    state = torch.get_rng_state()
    copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    kw = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    try:
        out = fn(copies, kw)
    finally:
        torch.set_rng_state(state)
    outputs = _flatten(out)
    return [outputs, [a for a in copies + list(kw.values()) if isinstance(a, torch.Tensor)]]


def _flatten(value: Any) -> list:
    """The tensors and numbers a kernel returned, in order (None, an in-place kernel's, is none)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    return [value]


def _difference(got: list, expected: list, atol: float, rtol: float, labels: list[str]) -> str | None:
    """None if every output and updated argument matches, else what differs (named: the
    returned value's position, or the argument the kernel updated in place)."""
    (outs, updated), (want_outs, want_updated) = got, expected
    if len(outs) < len(want_outs):
        return f"{len(outs)} returned values, expected {len(want_outs)}"
    one = len(want_outs) == 1
    named = [("the returned value" if one else f"returned value {i}", a, b)
             for i, (a, b) in enumerate(zip(outs, want_outs))]
    named += [(label, a, b) for label, a, b in zip(labels, updated, want_updated)]
    for what, a, b in named:
        if not isinstance(b, torch.Tensor):
            b = torch.as_tensor(b)
        a = torch.as_tensor(a)
        if tuple(a.shape) != tuple(b.shape):
            return f"{what} has shape {list(a.shape)}, expected {list(b.shape)}"
        a64, b64 = a.double(), b.double()
        if not torch.allclose(a64, b64, atol=atol, rtol=rtol, equal_nan=True):
            worst = (a64 - b64).abs().nan_to_num(math.inf).max().item()
            return f"{what}: max abs difference {worst:.3g} > atol {atol} + rtol {rtol}"
    return None
