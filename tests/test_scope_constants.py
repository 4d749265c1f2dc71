"""Constants a kernel reads from its enclosing scope (module globals, closure variables).

The trace bakes a global or closure constant into the compiled code (`x * SCALE` becomes
`x * 2.0`), so its value is part of the compiled variant: each call reads the value again
and a changed value compiles a new variant, exactly as reference mode reads it afresh.
"""
from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import types

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.autotune import cache
from pallasite.autotune.tuner import cache_fields
from pallasite.runtime.scope import fingerprint, fingerprint_chain
from pallasite.testing import run_ref
from plan_helpers import randn

SCALE = 2.0
SHIFT = 1
USE_RELU = True
COEFFS = (1.0, 2.0)
WEIGHTS = [1.0, 0.5]
CFG = types.SimpleNamespace(norm=types.SimpleNamespace(eps=1e-5), bias=0.25)
ACTIVATION = torch.relu
DIVISOR = 0.0
X = randn(384, seed=1)


def _fresh(kernel):
    kernel.reset()
    return kernel


def _same_as_torch_and_ref(kernel, expected):
    torch.testing.assert_close(kernel(X), expected, equal_nan=True)
    torch.testing.assert_close(run_ref(kernel, (X,)), expected, equal_nan=True)


@pallasite.kernel
def scaled(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] * SCALE
    return out


def test_a_changed_float_global_compiles_a_new_variant(monkeypatch):
    _same_as_torch_and_ref(_fresh(scaled), X * 2.0)
    monkeypatch.setitem(globals(), "SCALE", 3.0)
    _same_as_torch_and_ref(scaled, X * 3.0)
    assert scaled.cache_size == 2
    monkeypatch.setitem(globals(), "SCALE", 2.0)  # back to a value seen before: its variant again
    _same_as_torch_and_ref(scaled, X * 2.0)
    assert scaled.cache_size == 2


@pallasite.kernel
def shifted(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] + SHIFT
    return out


def test_a_changed_int_global_compiles_a_new_variant(monkeypatch):
    _same_as_torch_and_ref(_fresh(shifted), X + 1)
    monkeypatch.setitem(globals(), "SHIFT", 5)
    _same_as_torch_and_ref(shifted, X + 5)
    assert shifted.cache_size == 2
    monkeypatch.setitem(globals(), "SHIFT", 5.0)  # equal to 5 but a float: another constant
    _same_as_torch_and_ref(shifted, X + 5.0)
    assert shifted.cache_size == 3


@pallasite.kernel
def maybe_relu(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        y = x[t] * 2.0
        if USE_RELU:
            y = torch.relu(y)
        out[t] = y
    return out


def test_a_changed_bool_flag_selects_the_other_branch(monkeypatch):
    _same_as_torch_and_ref(_fresh(maybe_relu), torch.relu(X * 2.0))
    monkeypatch.setitem(globals(), "USE_RELU", False)
    _same_as_torch_and_ref(maybe_relu, X * 2.0)
    assert maybe_relu.cache_size == 2


@pallasite.kernel
def affine_from_tuple(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] * COEFFS[1] + COEFFS[0]
    return out


def test_a_changed_tuple_global_compiles_a_new_variant(monkeypatch):
    _same_as_torch_and_ref(_fresh(affine_from_tuple), X * 2.0 + 1.0)
    monkeypatch.setitem(globals(), "COEFFS", (-1.0, 0.5))
    _same_as_torch_and_ref(affine_from_tuple, X * 0.5 - 1.0)
    assert affine_from_tuple.cache_size == 2


@pallasite.kernel
def weighted_from_list(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] * WEIGHTS[0] + WEIGHTS[1]
    return out


def test_a_list_global_changed_in_place_compiles_a_new_variant(monkeypatch):
    monkeypatch.setitem(globals(), "WEIGHTS", [1.0, 0.5])
    _same_as_torch_and_ref(_fresh(weighted_from_list), X + 0.5)
    WEIGHTS[0] = 4.0  # the same list object, new contents
    _same_as_torch_and_ref(weighted_from_list, X * 4.0 + 0.5)
    assert weighted_from_list.cache_size == 2


@pallasite.kernel
def normalized(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] / (x[t].abs() + CFG.norm.eps) + CFG.bias
    return out


def test_a_nested_attribute_changed_in_place_compiles_a_new_variant(monkeypatch):
    monkeypatch.setattr(CFG.norm, "eps", 1e-5)
    _same_as_torch_and_ref(_fresh(normalized), X / (X.abs() + 1e-5) + 0.25)
    monkeypatch.setattr(CFG.norm, "eps", 1.0)  # `CFG` and `CFG.norm` are the same objects
    _same_as_torch_and_ref(normalized, X / (X.abs() + 1.0) + 0.25)
    assert normalized.cache_size == 2
    monkeypatch.setattr(CFG, "bias", -3.0)
    _same_as_torch_and_ref(normalized, X / (X.abs() + 1.0) - 3.0)
    assert normalized.cache_size == 3


def make_scaler(factor: float):
    @pallasite.kernel
    def scale_by_closure(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for t in hl.tile(x.size(0)):
            out[t] = x[t] * factor
        return out

    def set_factor(value: float) -> None:
        nonlocal factor
        factor = value

    return scale_by_closure, set_factor


def test_a_changed_closure_constant_compiles_a_new_variant():
    kernel, set_factor = make_scaler(2.0)
    _same_as_torch_and_ref(kernel, X * 2.0)
    set_factor(-0.5)
    _same_as_torch_and_ref(kernel, X * -0.5)
    assert kernel.cache_size == 2


@pallasite.kernel
def activated(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = ACTIVATION(x[t])
    return out


def test_a_rebound_function_global_compiles_a_new_variant(monkeypatch):
    _same_as_torch_and_ref(_fresh(activated), torch.relu(X))
    monkeypatch.setitem(globals(), "ACTIVATION", torch.sigmoid)  # functions compare by identity
    _same_as_torch_and_ref(activated, torch.sigmoid(X))
    assert activated.cache_size == 2


def _times_scale(value):  # a helper of the user's: the trace runs it, reading SCALE
    return _plus_shift(value * SCALE)


def _plus_shift(value):  # called by a helper: its globals are baked in too
    return value + SHIFT if USE_RELU else value


@pallasite.kernel
def through_helpers(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = _times_scale(x[t])
    return out


def test_globals_read_by_helper_functions_are_part_of_the_variant(monkeypatch):
    """A helper function the kernel calls runs in the trace: the constants it (and the helpers
    it calls) reads are baked in like the kernel's own (a fresh-clone trial found them frozen)."""
    _same_as_torch_and_ref(_fresh(through_helpers), X * 2.0 + 1)
    monkeypatch.setitem(globals(), "SCALE", -1.0)
    _same_as_torch_and_ref(through_helpers, X * -1.0 + 1)
    monkeypatch.setitem(globals(), "USE_RELU", False)  # read two calls deep
    _same_as_torch_and_ref(through_helpers, X * -1.0)
    assert through_helpers.cache_size == 3


@pallasite.kernel
def divided(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t].abs() / DIVISOR
    return out


def test_floats_compare_by_exact_value_signed_zeros_and_nan_included(monkeypatch):
    _same_as_torch_and_ref(_fresh(divided), X.abs() / 0.0)  # +inf (or nan at 0)
    monkeypatch.setitem(globals(), "DIVISOR", -0.0)  # == 0.0, but x / -0.0 is -inf
    _same_as_torch_and_ref(divided, X.abs() / -0.0)
    assert divided.cache_size == 2
    monkeypatch.setitem(globals(), "DIVISOR", math.nan)
    _same_as_torch_and_ref(divided, X.abs() / math.nan)
    monkeypatch.setitem(globals(), "DIVISOR", float("nan"))  # another NaN object: the same constant
    _same_as_torch_and_ref(divided, X.abs() / math.nan)
    assert divided.cache_size == 3


@dataclasses.dataclass
class Settings:
    scale: float
    offset: float


SETTINGS = Settings(2.0, 1.0)


def _apply(value, settings: Settings):
    return value * settings.scale + settings.offset


@pallasite.kernel
def passes_settings_whole(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = _apply(x[t], SETTINGS)
    return out


def test_a_dataclass_passed_whole_compares_by_its_fields(monkeypatch):
    monkeypatch.setattr(SETTINGS, "scale", 2.0)
    _same_as_torch_and_ref(_fresh(passes_settings_whole), X * 2.0 + 1.0)
    monkeypatch.setattr(SETTINGS, "scale", 3.0)  # read by the helper, not by an attribute chain
    _same_as_torch_and_ref(passes_settings_whole, X * 3.0 + 1.0)
    assert passes_settings_whole.cache_size == 2


def test_an_unchanged_constant_reuses_the_variant():
    kernel = _fresh(normalized)
    for _ in range(3):
        kernel(X)
    assert kernel.cache_size == 1 and len(kernel._bound) == 1


def _autotune_key(kernel) -> str:
    return cache.cache_key(cache_fields(kernel.bind((X,))))[0]


def test_the_constants_are_part_of_the_autotune_cache_key(monkeypatch):
    first = _autotune_key(scaled)
    monkeypatch.setitem(globals(), "SCALE", 3.0)
    assert _autotune_key(scaled) != first
    monkeypatch.setitem(globals(), "SCALE", 2.0)
    assert _autotune_key(scaled) == first
    monkeypatch.setattr(CFG.norm, "eps", 1e-5)
    eps = _autotune_key(normalized)
    monkeypatch.setattr(CFG.norm, "eps", 1e-3)
    assert _autotune_key(normalized) != eps
    relu = _autotune_key(activated)
    monkeypatch.setitem(globals(), "ACTIVATION", torch.sigmoid)
    assert _autotune_key(activated) != relu


_KEYS_IN_A_SECOND_PROCESS = """
import test_scope_constants as module
from pallasite.autotune import cache
from pallasite.autotune.tuner import cache_fields
from pallasite.runtime.scope import fingerprint, fingerprint_chain
for kernel in (module.scaled, module.activated, module.passes_settings_whole, module.normalized):
    print(cache.cache_key(cache_fields(kernel.bind((module.X,))))[0])
"""


def test_the_autotune_key_of_constants_is_the_same_in_a_second_process():
    """On disk, modules, functions and classes are named (module, qualified name, source hash),
    never by a memory address, so a second process computes the same key."""
    kernels = (scaled, activated, passes_settings_whole, normalized)
    recorded = [cache_fields(kernel.bind((X,)))["constants"] for kernel in kernels]
    assert all(" at 0x" not in text for text in recorded)
    assert "relu:" in recorded[1] and "Settings:" in recorded[2] and "'eps'" in recorded[3]
    here = os.path.dirname(__file__)
    done = subprocess.run([sys.executable, "-c", _KEYS_IN_A_SECOND_PROCESS], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(here, ".."), here])},
                          cwd=here, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [cache.cache_key(cache_fields(kernel.bind((X,))))[0] for kernel in kernels]


@pallasite.kernel
def divided_by_argument(x: torch.Tensor, divisor: hl.constexpr) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t].abs() / divisor
    return out


def test_a_constexpr_argument_compares_floats_by_exact_value_too():
    kernel = _fresh(divided_by_argument)
    torch.testing.assert_close(kernel(X, 0.0), X.abs() / 0.0)
    torch.testing.assert_close(kernel(X, -0.0), X.abs() / -0.0)
    torch.testing.assert_close(kernel(X, math.nan), X.abs() / math.nan, equal_nan=True)
    torch.testing.assert_close(kernel(X, float("nan")), X.abs() / math.nan, equal_nan=True)
    assert kernel.cache_size == 3


class Opaque:
    """A class with neither fields nor its own `__eq__`: compared by identity."""

    def __init__(self, scale: float):
        self.scale = scale


def test_the_fingerprint_rules():
    assert fingerprint(0.0) != fingerprint(-0.0) and fingerprint(math.nan) == fingerprint(float("nan"))
    assert fingerprint(5) != fingerprint(5.0) and fingerprint(True) != fingerprint(1)
    looped: list = [1.0]
    looped.append(looped)  # a list holding itself
    assert fingerprint(looped) == fingerprint(looped) != fingerprint([1.0, []])
    one = Opaque(2.0)
    assert fingerprint(one) == fingerprint(one) != fingerprint(Opaque(2.0))  # identity
    assert fingerprint(torch.device("cpu")) == fingerprint(torch.device("cpu"))  # its own __eq__
    assert fingerprint(Settings(1.0, 0.0)) == fingerprint(Settings(1.0, 0.0)) != fingerprint(Settings(1.0, -0.0))
    weights = [1.0, 2.0]  # a builtin method is a new object at each read, yet the same constant
    assert fingerprint_chain(weights, ("count",)) == fingerprint_chain(weights, ("count",))
    assert fingerprint_chain(CFG, ("missing",)) == ("unreadable", "AttributeError")
    held = torch.zeros(3)
    before = fingerprint(("table", held))
    held.add_(1.0)  # a tensor inside a constant, changed in place
    assert fingerprint(("table", held)) != before


def test_a_bound_kernel_called_after_a_constant_changed_says_to_call_the_kernel(monkeypatch):
    """A BoundKernel (or one of its compiled variants) has the old value baked in: calling it
    after the value changed is an error, not a stale result."""
    bound = _fresh(scaled).bind((X,))
    torch.testing.assert_close(bound(X), X * 2.0)
    compiled = bound.compile_config()
    monkeypatch.setitem(globals(), "SCALE", 3.0)
    for stale in (bound, compiled):
        with pytest.raises(exc.KernelArgumentError, match=r"SCALE.*changed.*call the kernel itself"):
            stale(X)
    _same_as_torch_and_ref(scaled, X * 3.0)  # the kernel itself compiles the new variant
