"""What a kernel's tensors answer about themselves while tracing: properties (`x.is_cuda`,
`x.requires_grad`), dtype questions (`torch.is_floating_point(x)`), and NumPy scalars as the
Python numbers torch takes them as. A property no rule here answers is refused, never guessed
(a truthy stand-in once took the wrong branch of `1.0 if x.requires_grad else 2.0`)."""
from __future__ import annotations

from typing import Any

import torch

from .. import exc
from .operands import python_number
from .proxies import HostTensor

# torch functions answered from a tensor's dtype, as its methods are (`OpRecorder.call_method`)
DTYPE_QUESTIONS = (torch.is_floating_point, torch.is_complex)

# properties every tensor a kernel takes answers False: dense, on no CUDA or other device
_FALSE_PROPERTIES = ("is_cuda", "is_sparse", "is_quantized", "is_mps", "is_xpu", "is_mkldnn", "is_nested")


def tensor_property(obj: Any, name: str, in_device: bool) -> Any:
    """`x.is_cuda`, `x.itemsize`: a property the kernel's tensors answer alike (dense tensors the
    runtime hands to JAX); an argument's `requires_grad` is the caller's tensor's (part of the
    variant key); any other (a computed tensor's `requires_grad`, `x.grad`) is refused."""
    if name in _FALSE_PROPERTIES:
        return False
    if name == "itemsize":
        return obj.dtype.itemsize
    if name == "layout":
        return torch.strided
    if name == "requires_grad" and isinstance(obj, HostTensor) and obj.symbol.origin == "arg":
        return obj.symbol.requires_grad
    raise exc.UnsupportedOperation(
        f"Tensor.{name} is not supported by pallasite" + (" in device code." if in_device else " in host code.")
        + " A kernel's tensors answer shape, dtype, device, ndim, itemsize, layout and is_cuda (False), its "
        "arguments requires_grad; pass anything else the kernel needs as an argument.")


def python_numbers(operand: Any) -> Any:
    """`operand` with each NumPy scalar in it (in tuples and lists too) its Python number."""
    if isinstance(operand, (tuple, list)):
        return type(operand)(python_numbers(item) for item in operand)
    return python_number(operand)
