"""A function argument the kernel calls in device code (Helion's epilogues, issue #22): the
tensors it closes over are implicit inputs (`epilogue__bias`), read at every call, so a new
closure over another tensor of the same shape reuses the compiled variant with the new data,
and the values it reads that are not tensors are part of the variant key."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref

GLOBAL_BIAS = torch.randn(128)


@pallasite.kernel
def matmul(x, y, epilogue=lambda acc, tile: acc):
    m, k = x.size()
    n = y.size(1)
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = epilogue(acc, (tile_m, tile_n))
    return out


X, Y = torch.randn(16, 256), torch.randn(256, 128)
CONFIG = {"block_sizes": [8, 128, 128]}


def _close(got, expected):
    torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_an_epilogue_reads_the_tensor_it_closes_over(loop_type):
    bias = torch.randn(128)
    epilogue = lambda acc, tile: torch.relu(acc + bias[tile[1]])  # noqa: E731
    config = {**CONFIG, "pallas_loop_type": loop_type}
    expected = torch.relu(X @ Y + bias)
    _, out = code_and_output(matmul, (X, Y, epilogue), **config)
    _close(out, expected)
    _close(run_ref(matmul, (X, Y, epilogue), **config), expected)
    bound = matmul.bind((X, Y, epilogue))
    assert list(bound.captured) == ["epilogue__bias"]
    assert "epilogue__bias" in bound.plan(config).ir.params
    check_tpu_lowering(matmul, (X, Y, epilogue), **config)


def _linear(x, y, bias):
    return matmul(x, y, lambda acc, tile: acc + bias[tile[1]])  # a new lambda at every call


def test_a_new_closure_over_another_tensor_reuses_the_variant_with_the_new_data():
    matmul.reset()
    first, second = torch.randn(128), torch.randn(128)
    _close(_linear(X, Y, first), X @ Y + first)
    _close(_linear(X, Y, second), X @ Y + second)  # not the first bias, baked in
    assert matmul.cache_size == 1
    first.add_(1.0)  # changed in place: read again at the next call
    _close(_linear(X, Y, first), X @ Y + first)
    assert matmul.cache_size == 1


def test_another_shape_or_dtype_of_the_closed_over_tensor_is_another_variant():
    matmul.reset()
    bias_row = torch.randn(1, 128)
    _close(matmul(X, Y, lambda acc, tile: acc + bias_row[0, tile[1]]), X @ Y + bias_row)
    half = torch.randn(128, dtype=torch.bfloat16)
    _close(_linear(X, Y, half), X @ Y + half.float())
    _close(_linear(X, Y, torch.ones(128)), X @ Y + 1.0)
    assert matmul.cache_size == 3  # the 1x128 row, the bf16 vector, the f32 vector


def _scaled(alpha):
    bias = torch.ones(128)
    return lambda acc, tile: alpha * acc + bias[tile[1]]


def test_the_values_an_epilogue_reads_that_are_not_tensors_are_part_of_the_key():
    matmul.reset()
    _close(matmul(X, Y, _scaled(2.0)), 2.0 * (X @ Y) + 1.0)
    _close(matmul(X, Y, _scaled(2.0)), 2.0 * (X @ Y) + 1.0)
    assert matmul.cache_size == 1
    _close(matmul(X, Y, _scaled(-0.5)), -0.5 * (X @ Y) + 1.0)
    assert matmul.cache_size == 2


def _global_epilogue(acc, tile):
    return acc - GLOBAL_BIAS[tile[1]]


def test_a_function_reading_a_global_tensor_and_the_default_epilogue(monkeypatch):
    _close(matmul(X, Y, _global_epilogue), X @ Y - GLOBAL_BIAS)
    other = torch.randn(128)
    monkeypatch.setitem(globals(), "GLOBAL_BIAS", other)
    _close(matmul(X, Y, _global_epilogue), X @ Y - other)
    _close(matmul(X, Y), X @ Y)
    assert list(matmul.bind((X, Y)).captured) == []


def test_a_bound_kernel_called_directly_passes_the_epilogues_tensors():
    bias = torch.randn(128)
    epilogue = lambda acc, tile: acc * bias[tile[1]]  # noqa: E731
    bound = matmul.bind((X, Y, epilogue))
    _close(bound(X, Y, epilogue), (X @ Y) * bias)
    _close(bound.compile_config(CONFIG)(X, Y, epilogue), (X @ Y) * bias)
