"""Tensor properties and dtype questions in kernels (trial LL): `x.is_cuda` is answered (False:
a kernel's tensors are dense and on no CUDA device), `x.is_floating_point()` / `is_complex()` /
`is_signed()` from the dtype as torch does, an argument's `requires_grad` from the caller's
tensor; a property pallasite does not know (a host-computed tensor's `requires_grad`) is refused
with the line. Each used to be a truthy function object, so
`1.0 if x.requires_grad else 2.0` silently took the wrong branch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def by_device(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    on_gpu = x.is_cuda or x.layout != torch.strided
    for t in hl.tile(x.size(0)):
        v = x[t]
        out[t] = (v * 2 if v.is_cuda else v) + (1.0 if on_gpu else 2.0)
    return out


def test_is_cuda_is_false_in_host_and_device_code_as_torch_says():
    x = torch.randn(50)
    _, result = code_and_output(by_device, (x,), block_sizes=[16])
    torch.testing.assert_close(result, x + 2.0)
    torch.testing.assert_close(run_ref(by_device, (x,), block_sizes=[16]), x + 2.0)


@pallasite.kernel
def by_dtype(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    scale = 2.0 if x.is_floating_point() and not x.is_complex() else 3.0
    for t in hl.tile(x.size(0)):
        v = i[t]
        shift = 1 if v.is_signed() and not v.is_floating_point() else 5
        out[t] = x[t] * scale + shift
    return out


def test_dtype_questions_are_answered_from_the_dtype():
    x, i = torch.randn(40), torch.arange(40, dtype=torch.int32)
    _, result = code_and_output(by_dtype, (x, i), block_sizes=[8])
    torch.testing.assert_close(result, x * 2.0 + 1)
    torch.testing.assert_close(run_ref(by_dtype, (x, i), block_sizes=[8]), x * 2.0 + 1)


@pallasite.kernel
def by_grad(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    q = x.requires_grad
    for t in hl.tile(x.size(0)):
        out[t] = x[t] + (1.0 if q else 2.0)
    return out


@pallasite.kernel
def by_typo(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    q = x.is_cudaa
    for t in hl.tile(x.size(0)):
        out[t] = x[t] + (1.0 if q else 2.0)
    return out


def test_an_arguments_requires_grad_is_the_callers_and_part_of_the_variant_key():
    x = torch.randn(8)
    torch.testing.assert_close(by_grad(x), x + 2.0)
    torch.testing.assert_close(by_grad(x.clone().requires_grad_()), x + 1.0)
    torch.testing.assert_close(by_grad(x), x + 2.0)


@pallasite.kernel
def by_computed_grad(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    q = (x * 2).requires_grad
    for t in hl.tile(x.size(0)):
        out[t] = x[t] + (1.0 if q else 2.0)
    return out


def test_a_property_pallasite_does_not_know_is_refused_never_guessed():
    x = torch.randn(8)
    with pytest.raises(exc.UnsupportedOperation, match=r"Tensor.requires_grad is not supported by pallasite in "
                                                       r"host code(.|\n)*q = \(x \* 2\).requires_grad"):
        by_computed_grad(x)
    with pytest.raises(exc.UnknownAttribute, match=r"has no attribute 'is_cudaa'(.|\n)*q = x.is_cudaa"):
        by_typo(x)


@pallasite.kernel
def numpy_on_a_tile(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = np.exp(x[t])
    return out


@pallasite.kernel
def numpy_on_a_tensor(x: torch.Tensor) -> torch.Tensor:
    total = np.sum(x)
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] + total
    return out


def test_numpy_on_a_traced_tensor_says_to_write_the_torch_op():
    """Trial LL: np.exp(x[t]) said 'Iterating over a traced tensor is not supported'."""
    x = torch.randn(8)
    with pytest.raises(exc.UnsupportedOperation, match=r"numpy.exp on a traced tensor(.|\n)*write torch.exp"
                                                       r"(.|\n)*out\[t\] = np.exp\(x\[t\]\)"):
        numpy_on_a_tile(x)
    with pytest.raises(exc.UnsupportedOperation, match=r"numpy.sum on a traced tensor(.|\n)*write torch.sum"):
        numpy_on_a_tensor(x)


@pallasite.kernel
def scalar_method(x: torch.Tensor, n: int) -> torch.Tensor:
    bits = n.bit_length()
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] + bits
    return out


def test_a_python_method_of_a_runtime_scalar_says_to_specialize_it():
    with pytest.raises(exc.UnsupportedOperation, match=r"int.bit_length of a runtime scalar argument(.|\n)*"
                                                       r"hl.specialize(.|\n)*bits = n.bit_length\(\)"):
        scalar_method(torch.randn(8), 5)


@pallasite.kernel
def numpy_scalars(x: torch.Tensor) -> torch.Tensor:
    scale = 1 / np.sqrt(x.size(0))  # a NumPy float64 of host code
    shift = np.int64(3)
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = (x[t] * scale + shift) * np.float32(2.0)
    return out


def test_numpy_scalars_are_the_python_numbers_torch_takes_them_as():
    """Trial MM: the generated code named np.float64(0.25) without importing numpy (a NameError
    inside JAX's trace), and np.float32(2.0) in device code was refused without a line."""
    x = torch.randn(16)
    expected = (x * 0.25 + 3) * 2.0
    for dtype in (torch.float32, torch.bfloat16):
        xd = x.to(dtype)
        _, result = code_and_output(numpy_scalars, (xd,), block_sizes=[8])
        assert result.dtype == dtype  # a NumPy scalar does not promote, as a Python number does not
        torch.testing.assert_close(result, ((xd * 0.25 + 3) * 2.0), atol=1e-2, rtol=1e-2)
        torch.testing.assert_close(run_ref(numpy_scalars, (xd,), block_sizes=[8]), result)
    torch.testing.assert_close(numpy_scalars(x), expected)


@pallasite.kernel
def by_dtype_function(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        v = x[t]
        out[t] = v * 2 if torch.is_floating_point(v) and not torch.is_complex(x) else v
    return out


def test_torch_is_floating_point_is_answered_as_the_method_is():
    x = torch.randn(16)
    torch.testing.assert_close(by_dtype_function(x), x * 2)
    torch.testing.assert_close(run_ref(by_dtype_function, (x,), block_sizes=[8]), x * 2)
