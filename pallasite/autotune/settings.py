"""The tuning settings a kernel accepts (Helion's names), checked once at decoration.

- autotune_effort: "none" | "quick" | "full"; default: `$PALLASITE_AUTOTUNE_EFFORT`, else "quick".
- autotune_random_seed: the search's seed; default `$PALLASITE_AUTOTUNE_RANDOM_SEED`, else 0.
- autotune_accuracy_check: compare the tuned config's output before using it (default True).
- autotune_baseline_fn: a reference with the kernel's signature; the tuned config's output
  must match it within autotune_baseline_atol / autotune_baseline_rtol (default 1e-2 each).
  Without one, the default config's output is the baseline.
- autotune_config_overrides: fixed values for some keys in every candidate (and the result).
- autotune_seed_configs: a config, or a list of configs, the search starts from beside the
  default (`search.py`: scored first, their neighbourhoods searched); partial configs are
  completed with defaults, and one that does not plan is skipped with a warning.
- autotune_progress_bar: draw the search's progress (default True; False: the log lines only).
- autotune_log_level: a `logging` level; above INFO (or 0, as Helion reads it) the tuner prints
  nothing, neither log lines nor progress (default INFO).
- autotune_rebenchmark_threshold: a factor >= 1; the finalists a full search re-measures on a
  TPU are every config within that factor of the best time (default: the best three).
- autotuner_fn: `fn(bound_kernel, args) -> tuner` whose `tuner.autotune()` returns the config
  a first call runs instead of the built-in search (Helion's hook: `autotune/searches.py`,
  e.g. `LocalAutotuneCache(NeighbourhoodSearch(bound_kernel, args))`).
- force_autotune: tune the first call even when the kernel names its config (`config=`, or
  one entry of `configs=`); the named config still completes candidates (default False).
"""
from __future__ import annotations

import difflib

import functools
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from .. import exc
from ..config import Config, as_config
from .search import EFFORTS

EFFORT_ENV = "PALLASITE_AUTOTUNE_EFFORT"
SEED_ENV = "PALLASITE_AUTOTUNE_RANDOM_SEED"
KEYS = ("autotune_random_seed", "autotune_accuracy_check", "autotune_baseline_fn",
        "autotune_baseline_atol", "autotune_baseline_rtol", "autotune_config_overrides", "autotune_progress_bar",
        "autotune_log_level", "force_autotune", "autotune_seed_configs", "autotune_rebenchmark_threshold",
        "autotuner_fn")


@dataclass(frozen=True)
class TuneSettings:
    effort: str = "quick"
    random_seed: int = 0
    accuracy_check: bool = True
    baseline_fn: Callable | None = None
    baseline_atol: float = 1e-2
    baseline_rtol: float = 1e-2
    config_overrides: dict[str, Any] = field(default_factory=dict)
    progress_bar: bool = True
    log_level: int = logging.INFO
    force: bool = False
    seed_configs: tuple[Config, ...] = ()
    rebenchmark_threshold: float | None = None
    autotuner_fn: Callable | None = None
    # the effort was asked for (autotune_effort= or PALLASITE_AUTOTUNE_EFFORT), not the default
    effort_asked: bool = False

    @property
    def quiet(self) -> bool:
        """Whether the tuner prints nothing (Helion: log level 0 disables output)."""
        return self.log_level == 0 or self.log_level > logging.INFO

    def describe(self) -> dict[str, Any]:
        """What changes the search's result or which config is accepted (part of the disk
        cache key): a config accepted against one baseline, tolerance or with the accuracy
        check off is not reused under another."""
        return {"effort": self.effort, "seed": self.random_seed,
                "overrides": repr(sorted(self.config_overrides.items())),
                "seed_configs": repr([c.key() for c in self.seed_configs]),
                "rebenchmark_threshold": self.rebenchmark_threshold,
                "autotuner_fn": callable_identity(self.autotuner_fn) if self.autotuner_fn is not None else None,
                "accuracy_check": self.accuracy_check,
                "baseline": callable_identity(self.baseline_fn) if self.baseline_fn is not None else None,
                "baseline_tolerance": (self.baseline_atol, self.baseline_rtol)}


def callable_identity(fn: Callable) -> str:
    """A stable identity of a callable across processes: its source file (else its module) and
    qualified name, and a hash of its source (or, without source, of its bytecode, constants
    and closure), so a baseline edited under the same name is a different baseline. A callable
    with neither (a builtin such as `torch.add`) is identified by its name alone. The file, not
    the module, names it: a script's functions are `__main__`'s when it runs as a script and
    its own module's when imported (`pallasite run`), and both share tuned configs."""
    import hashlib
    import inspect
    import os

    target = inspect.unwrap(fn) if callable(fn) else fn
    while isinstance(target, functools.partial):
        target = target.func
    try:
        where = os.path.realpath(inspect.getsourcefile(target) or "")
    except TypeError:  # a builtin or a C function: no file
        where = ""
    name = f"{where or getattr(target, '__module__', None) or type(target).__module__}." \
           f"{getattr(target, '__qualname__', None) or type(target).__qualname__}"
    code = getattr(target, "__code__", None) or getattr(getattr(target, "__call__", None), "__code__", None)
    try:
        body = inspect.getsource(target)
    except (OSError, TypeError):
        body = _code_text(code) if code is not None else ""
    if isinstance(fn, functools.partial):
        body += repr((fn.args, sorted(fn.keywords.items())))
    closure = getattr(target, "__closure__", None) or ()
    body += repr([_plain(cell.cell_contents) for cell in closure if _has_contents(cell)])
    return f"{name}:{hashlib.sha256(body.encode()).hexdigest()[:16]}"


def _code_text(code) -> str:
    """Bytecode, names and constants of a code object, nested code objects included
    (their repr holds an address, which is not stable)."""
    consts = [_code_text(c) if hasattr(c, "co_code") else repr(c) for c in code.co_consts]
    return repr((code.co_code.hex(), code.co_names, consts))


def _has_contents(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:  # an empty cell
        return False


def _plain(value: Any) -> str:
    """A closure value as text when it is plain data; otherwise only its type."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return repr(value)
    return type(value).__qualname__


def parse_settings(effort: str | None, settings: dict[str, Any]) -> TuneSettings:
    """The settings, checked; unknown keys raise `exc.InvalidConfig`."""
    unknown = sorted(set(settings) - set(KEYS))
    if unknown:
        known = [*KEYS, "static_shapes", "config", "configs", "ref_mode", "backend", "use_default_config",
                 "print_output_code", "collective_id", "autotune_effort"]
        hints = [f"{key!r}: did you mean {near[0]!r}?" for key in unknown
                 for near in [difflib.get_close_matches(key, known, n=1, cutoff=0.75)] if near]
        raise exc.InvalidConfig(f"Unknown kernel settings: {', '.join(unknown)} (neither pallasite's nor Helion's)"
                                + (f"; {'; '.join(hints)}" if hints else "."))
    asked = effort is not None or bool(os.environ.get(EFFORT_ENV))
    if effort is None:
        effort = os.environ.get(EFFORT_ENV) or "quick"
    if effort not in EFFORTS:
        raise exc.InvalidConfig(f"autotune_effort={effort!r}: expected one of {EFFORTS}.")
    seed = settings.get("autotune_random_seed", os.environ.get(SEED_ENV) or 0)
    try:
        seed = int(seed)
    except (TypeError, ValueError):
        raise exc.InvalidConfig(f"autotune_random_seed={seed!r}: expected an int.") from None
    check = settings.get("autotune_accuracy_check", True)
    if not isinstance(check, bool):
        raise exc.InvalidConfig(f"autotune_accuracy_check={check!r}: expected True or False.")
    baseline = settings.get("autotune_baseline_fn")
    if baseline is not None and not callable(baseline):
        raise exc.InvalidConfig(f"autotune_baseline_fn={baseline!r}: expected a callable.")
    tolerances = {}
    for name in ("autotune_baseline_atol", "autotune_baseline_rtol"):
        value = settings.get(name, 1e-2)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise exc.InvalidConfig(f"{name}={value!r}: expected a non-negative number.")
        tolerances[name] = float(value)
    overrides = settings.get("autotune_config_overrides") or {}
    if not isinstance(overrides, dict):
        raise exc.InvalidConfig(f"autotune_config_overrides={overrides!r}: expected a dict of config keys.")
    try:
        checked = Config(overrides)  # each key and value checked; GPU-only keys dropped (the kernel warns)
    except exc.InvalidConfig as err:
        raise exc.InvalidConfig(f"autotune_config_overrides={overrides!r}: {err.message}") from None
    flags = {}
    for name in ("autotune_progress_bar", "force_autotune"):
        flags[name] = settings.get(name, name == "autotune_progress_bar")
        if not isinstance(flags[name], bool):
            raise exc.InvalidConfig(f"{name}={flags[name]!r}: expected True or False.")
    level = settings.get("autotune_log_level", logging.INFO)
    if not isinstance(level, int) or isinstance(level, bool) or level < 0:
        raise exc.InvalidConfig(f"autotune_log_level={level!r}: expected a logging level (an int >= 0).")
    return TuneSettings(effort, seed, check, baseline, tolerances["autotune_baseline_atol"],
                        tolerances["autotune_baseline_rtol"], dict(checked), flags["autotune_progress_bar"],
                        level, flags["force_autotune"], _seed_configs(settings.get("autotune_seed_configs")),
                        _threshold(settings.get("autotune_rebenchmark_threshold")), _tuner(settings.get("autotuner_fn")),
                        asked)


def _threshold(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 1:
        raise exc.InvalidConfig(f"autotune_rebenchmark_threshold={value!r}: expected a factor >= 1 (e.g. 1.05: "
                                "re-measure every config within 5% of the best).")
    return float(value)


def _tuner(value: Any) -> Callable | None:
    if value is not None and not callable(value):
        raise exc.InvalidConfig(f"autotuner_fn={value!r}: expected a callable (bound_kernel, args) -> tuner, "
                                "whose autotune() returns a config.")
    return value


def _seed_configs(value: Any) -> tuple[Config, ...]:
    """`autotune_seed_configs`: None, a config (a `Config` or a dict) or a list of them."""
    if value is None:
        return ()
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    try:
        return tuple(as_config(item) for item in items)  # each key and value checked
    except exc.InvalidConfig as err:
        raise exc.InvalidConfig(f"autotune_seed_configs={value!r}: {err.message}") from None
