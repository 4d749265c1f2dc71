"""Tensors a kernel reads from its enclosing scope (module globals, closures).

A tensor the kernel names but does not take as a parameter is an implicit
argument: each call reads the name's current value, so a rebound global is
seen by the next call (a new shape or dtype compiles a new variant).
"""
from __future__ import annotations

import types

import jax
import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import check_tpu_lowering, run_ref
from plan_helpers import names, only_call, randn

WEIGHT = randn(256, seed=1)
BIAS = randn(16, 256, seed=2)
SCALE = randn(256, seed=3)


@pallasite.kernel
def scale_rows_by_global(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for t in hl.tile(m, block_size=8):
        out[t, :] = x[t, :] * WEIGHT[None, :]
    return out


def test_a_global_tensor_read_in_device_code_is_an_implicit_input():
    x = randn(16, 256, seed=4)
    torch.testing.assert_close(scale_rows_by_global(x), x * WEIGHT[None, :])
    call = only_call(scale_rows_by_global, (x,))
    assert names(call.inputs) == ["x", "WEIGHT"] and call.aliases == {}
    check_tpu_lowering(scale_rows_by_global, (x,))


def test_a_rebound_global_is_read_again_at_each_call(monkeypatch):
    x = randn(16, 256, seed=5)
    scale_rows_by_global.reset()
    scale_rows_by_global(x)
    other = randn(256, seed=6)
    monkeypatch.setitem(globals(), "WEIGHT", other)
    torch.testing.assert_close(scale_rows_by_global(x), x * other[None, :])
    assert len(scale_rows_by_global._bound) == 1  # same shape and dtype: same compiled kernel
    monkeypatch.setitem(globals(), "WEIGHT", randn(256, seed=7, dtype=torch.bfloat16))
    torch.testing.assert_close(scale_rows_by_global(x), x * WEIGHT[None, :])
    assert len(scale_rows_by_global._bound) == 2  # a new dtype is a new signature


def test_a_global_rebound_to_a_wrong_shape_gets_the_shape_error(monkeypatch):
    monkeypatch.setitem(globals(), "WEIGHT", randn(128))
    with pytest.raises(exc.ShapeMismatch):
        scale_rows_by_global(randn(16, 256))


def make_shifted_kernel(shift: torch.Tensor):
    @pallasite.kernel
    def add_shift(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for t in hl.tile(x.size(0), block_size=128):
            out[t] = x[t] + shift[t]
        return out

    return add_shift


def test_a_closure_tensor_is_an_implicit_input():
    shift = randn(384, seed=8)
    add_shift = make_shifted_kernel(shift)
    x = randn(384, seed=9)
    torch.testing.assert_close(add_shift(x), x + shift)
    torch.testing.assert_close(run_ref(add_shift, (x,)), x + shift)


@pallasite.kernel
def biased_then_scaled(x: torch.Tensor) -> torch.Tensor:
    y = x + BIAS  # host code before the loop
    out = torch.empty_like(x)
    for t in hl.tile(16, block_size=8):
        out[t, :] = torch.relu(y[t, :])
    return out * SCALE  # and after it


def test_captured_tensors_in_host_code():
    x = randn(16, 256, seed=10)
    torch.testing.assert_close(biased_then_scaled(x), torch.relu(x + BIAS) * SCALE)
    check_tpu_lowering(biased_then_scaled, (x,))


def test_captured_tensors_through_jax_fn():
    x = randn(16, 256, seed=11)
    result = jax.jit(biased_then_scaled.jax_fn)(jax.numpy.asarray(x.numpy()))
    torch.testing.assert_close(torch.from_numpy(jax.device_get(result).copy()), torch.relu(x + BIAS) * SCALE)


TOTALS = torch.zeros(256)


@pallasite.kernel
def accumulate_into_global(x: torch.Tensor) -> None:
    for t in hl.tile(256, block_size=128):
        TOTALS[t] = TOTALS[t] + x[t]


def test_a_captured_tensor_written_in_device_code_is_updated_in_place(monkeypatch):
    totals = torch.zeros(256)
    monkeypatch.setitem(globals(), "TOTALS", totals)
    a, b = randn(256, seed=12), randn(256, seed=13)
    accumulate_into_global(a)
    accumulate_into_global(b)
    torch.testing.assert_close(totals, a + b)


HOLDER = types.SimpleNamespace(weight=randn(256, seed=14))


@pallasite.kernel
def scaled_by_attribute(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] * HOLDER.weight[t]
    return out


@pallasite.kernel
def host_code_adds_attribute(x: torch.Tensor) -> torch.Tensor:
    y = x + HOLDER.weight
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = y[t]
    return out


@pytest.mark.parametrize("kernel, line", [
    (scaled_by_attribute, "out[t] = x[t] * HOLDER.weight[t]"),
    (host_code_adds_attribute, "y = x + HOLDER.weight"),
])
def test_a_tensor_reached_through_an_attribute_says_to_pass_it(kernel, line):
    with pytest.raises(exc.UnsupportedOperation, match="pass it to the kernel as an argument") as info:
        kernel(randn(256))
    assert line in str(info.value)
