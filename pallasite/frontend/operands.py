"""Operands of recorded ops seen as torch would see them: meta stand-ins, the sizes a
view asks for, subscript keys with runtime scalars, and (with static_shapes=False)
the symbolic sizes a result keeps. Used by `op_recorder.py`; a kernel argument's dtype check
and a NumPy scalar argument as its Python number, by both modes' binding."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .. import exc
from ..ir import ScalarSymbol, TensorSymbol, ops
from ..ir.sizes import keep_symbolic
from .proxies import DeviceTensor, HostScalar, HostTensor, TileProxy, Traced, static_int
from .tile_sizes import TileExtent, as_meta


# The dtype the kernel sees of a caller's tensor whose own dtype a TPU cannot hold: an
# int64 tensor (torch's default integer type: offsets, labels, indices) is narrowed to
# int32 on the host, with its range checked, when the plan finds it read only as indices,
# offsets or loop bounds (plan/narrowed_arguments.py); otherwise the plan refuses it.
NARROWED_ARGUMENT_DTYPES = {torch.int64: torch.int32}


def kernel_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a kernel argument of the caller's `dtype` has inside the kernel."""
    return NARROWED_ARGUMENT_DTYPES.get(dtype, dtype)


def check_argument_dtype(dtype: torch.dtype, what: str) -> None:
    """Reject the dtypes of tensor arguments a TPU cannot hold (int64 ones are narrowed)."""
    check_dtype(kernel_dtype(dtype), what)


def check_dtype(dtype: torch.dtype, what: str) -> None:
    """Reject dtypes a TPU cannot hold in vectors."""
    if dtype.is_complex:
        raise exc.UnsupportedDtype(
            f"{what} has dtype {dtype}: TPU kernels have no complex vectors; pass the real and "
            "imaginary parts as separate float32 tensors (torch.view_as_real)."
        )
    if dtype in (torch.int64, torch.float64, torch.uint64):
        narrow = "float32" if dtype.is_floating_point else "int32"
        raise exc.UnsupportedDtype(
            f"{what} has dtype {dtype}: TPU has no 64-bit vectors; cast to {narrow}."
        )


def shape_key(key: Any) -> Any:
    """A meta subscript key with its 0-d integer tensors (runtime scalars, whose value torch
    would read) as 0: the result's shape is the same."""
    def item(entry: Any) -> Any:
        if isinstance(entry, torch.Tensor) and entry.ndim == 0 and not entry.dtype.is_floating_point \
                and entry.dtype != torch.bool:
            return 0
        return entry

    return tuple(item(e) for e in key) if isinstance(key, tuple) else item(key)



def has_proxy(args: Any, kwargs: Any = None) -> bool:
    stack = list(args) + list((kwargs or {}).values())
    while stack:
        item = stack.pop()
        if isinstance(item, (Traced, TileProxy, TileExtent)):  # a partial tile's size is a device scalar
            return True
        if isinstance(item, (list, tuple)):
            stack.extend(item)
    return False



def whole_host_tensor_error(tensor: HostTensor | str) -> exc.IndexingError:
    """A kernel tensor (or its name: reference mode's) used whole in device code."""
    name = tensor if isinstance(tensor, str) else tensor.symbol.name
    return exc.IndexingError(
        f"Host tensor '{name}' is used whole inside a device loop; index it with tiles, "
        f"e.g. {name}[tile], or read all of it as a block with {name}[:] (a layer norm's weight)."
    )



def reject_whole_host_tensors(args: Any, kwargs: Any) -> None:
    stack = list(args) + list(kwargs.values())
    while stack:
        item = stack.pop()
        if isinstance(item, HostTensor) and item.symbol.shape:  # a 0-d one is its value (`t[()]`)
            raise whole_host_tensor_error(item)
        if isinstance(item, (list, tuple)):
            stack.extend(item)



def size_of(item: Any) -> Any:
    """A size argument of a view: a tile stands for its block size (the shape of device
    values); a runtime scalar or device value raises its own 'not known when compiling'."""
    if isinstance(item, (TileProxy, TileExtent)):  # `v.size(0)` of a partial tile: its axis too
        return item.dim.block_size
    if isinstance(item, (HostScalar, DeviceTensor)):
        return item.__index__()
    if isinstance(item, (list, tuple)) and not isinstance(item, torch.Size):
        return type(item)(size_of(i) for i in item)
    return item



def to_meta(item: Any) -> Any:
    if isinstance(item, Traced):
        return item.meta
    if isinstance(item, TileExtent):
        return as_meta(item)
    if isinstance(item, (list, tuple)) and not isinstance(item, torch.Size):
        return type(item)(to_meta(i) for i in item)
    return item



def shape_entry(entry: Any) -> int:
    entry = static_int(entry)  # an int argument: a constant of the variant
    if isinstance(entry, (TileProxy, TileExtent)):
        return entry.dim.block_size
    if isinstance(entry, int) and not isinstance(entry, bool):
        return entry
    raise exc.UnsupportedOperation(f"Shapes of device values are tiles and ints, got {entry!r}.")



def symbolic_result_shape(op: ops.OpDef, operands, shape: tuple, attrs: dict) -> tuple:
    """With static_shapes=False: an elementwise result keeps its operands' symbolic sizes, a
    view the sizes it was asked for (torch's meta tensors know only the values)."""
    if op.kind is ops.OpKind.VIEW and "shape" in attrs and len(attrs["shape"]) == len(shape):
        return keep_symbolic(shape, [tuple(attrs["shape"])])
    if op.kind is ops.OpKind.ELEMENTWISE:
        return keep_symbolic(shape, [getattr(o, "shape", None) for o in operands])
    if op.view is ops.ViewRule.SUBSCRIPT and operands and isinstance(operands[0], TensorSymbol):
        symbolic = _subscript_shape(tuple(operands[0].shape), attrs["key"])
        if symbolic is not None and len(symbolic) == len(shape) and all(
                int(a) == int(b) for a, b in zip(symbolic, shape)):
            return symbolic
    return shape


def _subscript_shape(shape: tuple, key: Any) -> tuple | None:
    """A host subscript's result shape from the tensor's (symbolic) sizes and the key's:
    `x[idx]` is `idx`'s sizes then the rest of `x`'s, `x[:, i]` drops an axis, `None` adds
    one. None (torch's meta shape stands) for forms where torch moves the index's axes
    (a tensor index with an int), boolean masks and partial slices."""
    items = list(key) if isinstance(key, tuple) else [key]
    if items.count(Ellipsis) > 1:
        return None
    if Ellipsis in items:
        at = items.index(Ellipsis)
        consumed = sum(1 for item in items if item is not None and item is not Ellipsis)
        items[at:at + 1] = [slice(None)] * (len(shape) - consumed)
    tensors = [item for item in items if isinstance(item, TensorSymbol)]
    singles = [item for item in items if isinstance(item, (int, ScalarSymbol)) and not isinstance(item, bool)]
    if len(tensors) > 1 or (tensors and singles) or any(t.dtype == torch.bool for t in tensors):
        return None
    out: list = []
    axis = 0
    for item in items:
        if item is None:
            out.append(1)
            continue
        if axis >= len(shape):
            return None
        if isinstance(item, TensorSymbol):
            out.extend(item.shape)
        elif isinstance(item, slice):
            if item != slice(None):
                return None
            out.append(shape[axis])
        elif not isinstance(item, (int, ScalarSymbol)) or isinstance(item, bool):
            return None
        axis += 1
    return tuple(out) + tuple(shape[axis:])


def python_number(value: Any) -> Any:
    """A NumPy scalar argument (`np.int64(3)`, `np.float32(0.5)`) is the Python number it holds,
    as torch takes it; anything else as given."""
    if isinstance(value, np.generic) and not isinstance(value, np.bool_) and np.ndim(value) == 0:
        if np.issubdtype(type(value), np.integer):
            return int(value)
        if np.issubdtype(type(value), np.floating):
            return float(value)
    return value
