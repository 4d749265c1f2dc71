"""The kernel settings Helion documents (`helion.kernel(**settings)`) and what each means here.

A Helion program passes its settings unchanged, so `pallasite.kernel` knows every one:

- With a TPU meaning, it has it: `dot_precision` is the precision of the kernel's matmuls
  (`lax.Precision`; Mosaic contracts f32 operands in one bf16 pass, DEFAULT, or in full
  fp32, HIGHEST, and has nothing between, so Helion's "tf32" is DEFAULT and both "tf32x3"
  and "ieee" are HIGHEST); `index_dtype` may only be int32 (TPU indices are 32-bit) or None;
  `ignore_warnings=[...]` lists warning classes pallasite does not say for this kernel (e.g.
  `exc.TensorOperationInWrapper`; `exc.ignoring` applies them while the kernel works);
  `static_shapes`, `autotune_effort`, `print_output_code`, `ref_mode`, `backend` and the
  tuning settings of `autotune/settings.py` (`autotune_random_seed`, the baseline ones,
  `autotune_config_overrides`, `autotune_seed_configs`, `autotune_rebenchmark_threshold`,
  `autotuner_fn`, `autotune_cache` ("LocalAutotuneCache", the on-disk cache), `autotune_progress_bar`, `autotune_log_level`,
  `force_autotune`) are the decorator's own parameters.
- GPU-only (`GPU_ONLY_SETTINGS`: persistent kernels' SMs, warp specialization, PTXAS
  control files, Triton's compile processes and timeout): ignored, named in the kernel's
  one `exc.IgnoredConfigKeys` warning with the GPU-only config keys.
- With a TPU meaning pallasite does not implement yet (`NOT_SUPPORTED`): an
  `exc.InvalidConfig` saying so, unless given its default value (which changes nothing).
- Any other name is an `exc.InvalidConfig`, as a misspelled setting should be.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from . import exc

# Helion's `dot_precision` -> the `lax.Precision` a TPU matmul of f32 operands runs at.
DOT_PRECISIONS = {"tf32": "DEFAULT", "tf32x3": "HIGHEST", "ieee": "HIGHEST"}

GPU_ONLY_SETTINGS = frozenset({
    "persistent_reserved_sms", "autotune_force_persistent", "allow_warp_specialize", "autotune_search_acf",
    "autotune_precompile", "autotune_precompile_jobs", "autotune_compile_timeout",
})

# Settings whose TPU meaning is not implemented, with the value that means "off".
NOT_SUPPORTED = {
    "fast_math": False, "autotune_log": None,
    "autotune_max_generations": None, "autotune_ignore_errors": False,
    "autotune_adaptive_timeout": True, "print_repro": False, "output_origin_lines": True,
    "debug_dtype_asserts": False, "autotune_cache": "LocalAutotuneCache",
    "autotune_benchmark_fn": None, "autotune_best_available_max_configs": None,
    "autotune_best_available_max_cache_scan": None,
}


@dataclass(frozen=True)
class KernelSettings:
    """The settings with a meaning beyond tuning: `dot_precision` as a `lax.Precision` name
    (planning reads it) and the warning classes `ignore_warnings` silences (the runtime)."""

    dot_precision: str = "DEFAULT"
    ignore_warnings: tuple[type[Warning], ...] = ()


def split_settings(settings: dict[str, Any]) -> tuple[KernelSettings, tuple[str, ...], dict[str, Any]]:
    """`helion.kernel`'s keyword settings: (what planning reads, the GPU-only settings given —
    ignored —, the rest for the autotuner, which checks them)."""
    rest = dict(settings)
    precision = rest.pop("dot_precision", None)
    if precision is not None and precision not in DOT_PRECISIONS:
        raise exc.InvalidConfig(f"dot_precision={precision!r}: expected one of "
                                f"{', '.join(repr(p) for p in DOT_PRECISIONS)}.")
    index_dtype = rest.pop("index_dtype", None)
    if index_dtype not in (None, torch.int32):
        raise exc.InvalidConfig(f"index_dtype={index_dtype}: TPU kernels index with int32 (torch.int32, or None "
                                "for the compiler's choice, which is int32).")
    ignore_warnings = _warning_classes(rest.pop("ignore_warnings", None))
    ignored = tuple(sorted(name for name in rest if name in GPU_ONLY_SETTINGS))
    for name in ignored:
        del rest[name]
    for name, off in NOT_SUPPORTED.items():
        if name in rest and rest.pop(name) != off:
            raise exc.InvalidConfig(f"{name}={settings[name]!r}: Helion's setting {name!r} has no implementation "
                                    f"in pallasite yet; leave it at {off!r}.")
    return (KernelSettings(DOT_PRECISIONS[precision] if precision else "DEFAULT", ignore_warnings),
            ignored, rest)


def _warning_classes(value: Any) -> tuple[type[Warning], ...]:
    """`ignore_warnings`: None, or a list or tuple of warning classes."""
    if value is None:
        return ()
    items = list(value) if isinstance(value, (list, tuple)) else None
    if items is None or not all(isinstance(c, type) and issubclass(c, Warning) for c in items):
        raise exc.InvalidConfig(f"ignore_warnings={value!r}: expected a list of warning classes, e.g. "
                                "[pallasite.exc.TensorOperationInWrapper].")
    return tuple(items)
