"""Moving tensors between torch and JAX (zero-copy through DLPack where possible)."""
from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .. import exc

_TORCH_OF_JAX = {
    np.dtype("float32"): torch.float32, np.dtype("int32"): torch.int32,
    np.dtype("bool"): torch.bool, np.dtype("float16"): torch.float16,
    np.dtype("int8"): torch.int8, np.dtype("uint8"): torch.uint8,
    np.dtype("int16"): torch.int16, np.dtype("float64"): torch.float64,
    np.dtype("int64"): torch.int64,
}


def torch_dtype_of(array: Any) -> torch.dtype:
    dtype = np.dtype(array.dtype)
    if dtype == jnp.bfloat16:
        return torch.bfloat16
    return _TORCH_OF_JAX.get(dtype, torch.float32)


def to_jax(tensor: torch.Tensor) -> jax.Array:
    tensor = tensor.detach()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    try:
        return jnp.from_dlpack(tensor)
    except Exception:  # noqa: BLE001 - some dtypes/layouts have no DLPack path
        if tensor.dtype == torch.bfloat16:
            return jnp.asarray(tensor.view(torch.int16).numpy()).view(jnp.bfloat16)
        return jnp.asarray(tensor.numpy())


def to_torch(array: jax.Array) -> torch.Tensor:
    try:
        return torch.from_dlpack(array)
    except Exception:  # noqa: BLE001
        host = np.asarray(array)
        if host.dtype == jnp.bfloat16:
            return torch.from_numpy(host.view(np.int16).copy()).view(torch.bfloat16)
        return torch.from_numpy(host.copy())


def tree_to_torch(value: Any) -> Any:
    if isinstance(value, jax.Array):
        return to_torch(value)
    if isinstance(value, (list, tuple)):
        return type(value)(tree_to_torch(v) for v in value)
    if isinstance(value, dict):
        return {k: tree_to_torch(v) for k, v in value.items()}
    return value


def narrow_argument(value: Any, argument: Any, scalars: Mapping[str, int] | None = None) -> Any:
    """A tensor argument the plan narrows (`plan/narrowed_arguments.py`: an int64 tensor read
    only as indices) in its kernel dtype; when the kernel reads its values, each must fit
    that dtype, else `exc.KernelArgumentError` names the argument and the value. `scalars`:
    the call's runtime int arguments, by name (a step's other operand may depend on them)."""
    if isinstance(value, jax.core.Tracer):  # inside the user's jit: no values to check
        return value.astype(jnp.int32)
    tensor = value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))
    if argument.values_read and tensor.numel() and tensor.device.type != "meta":
        info = torch.iinfo(argument.kernel_dtype)
        outside = (tensor < info.min) | (tensor > info.max)
        if bool(outside.any()):
            position = tuple(int(i) for i in outside.nonzero()[0])
            raise exc.KernelArgumentError(
                f"Argument '{argument.name}' holds {int(tensor[position])} at {list(position)}, outside "
                f"{str(argument.kernel_dtype).removeprefix('torch.')}'s range [{info.min}, {info.max}]: the kernel "
                f"reads this {str(argument.caller_dtype).removeprefix('torch.')} tensor as "
                f"{str(argument.kernel_dtype).removeprefix('torch.')} (TPU has no 64-bit vectors).")
    if argument.computed and tensor.numel() and tensor.device.type != "meta":
        lo, hi = (int(v) for v in torch.aminmax(tensor))
        past = argument.step_past_int32(lo, hi, scalars)
        if past is not None:
            step, (low, high) = past
            where = f" at {step.location}" if step.location is not None else ""
            raise exc.KernelArgumentError(
                f"Argument '{argument.name}' holds values in [{lo}, {hi}]: the kernel computes {step.text}{where} "
                f"from them in int32 (the kernel reads this {str(argument.caller_dtype).removeprefix('torch.')} "
                f"tensor as int32), and the result could reach [{low}, {high}], past int32's range, where torch's "
                "int64 result would differ.")
    narrowed = tensor.to(argument.kernel_dtype)
    return narrowed if isinstance(value, torch.Tensor) else jnp.asarray(narrowed.numpy())
