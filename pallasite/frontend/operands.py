"""Operands of recorded ops seen as torch would see them: meta stand-ins, the sizes a
view asks for, subscript keys with runtime scalars, and (with static_shapes=False)
the symbolic sizes a result keeps. Used by `op_recorder.py`."""
from __future__ import annotations

from typing import Any

import torch

from .. import exc
from ..ir import ops
from ..ir.sizes import keep_symbolic
from .proxies import DeviceTensor, HostScalar, HostTensor, TileProxy, _Traced


def _shape_key(key: Any) -> Any:
    """A meta subscript key with its 0-d integer tensors (runtime scalars, whose value torch
    would read) as 0: the result's shape is the same."""
    def item(entry: Any) -> Any:
        if isinstance(entry, torch.Tensor) and entry.ndim == 0 and not entry.dtype.is_floating_point \
                and entry.dtype != torch.bool:
            return 0
        return entry

    return tuple(item(e) for e in key) if isinstance(key, tuple) else item(key)



def _has_proxy(args: Any, kwargs: Any = None) -> bool:
    stack = list(args) + list((kwargs or {}).values())
    while stack:
        item = stack.pop()
        if isinstance(item, (_Traced, TileProxy)):
            return True
        if isinstance(item, (list, tuple)):
            stack.extend(item)
    return False



def _whole_host_tensor_error(tensor: HostTensor) -> exc.IndexingError:
    name = tensor.symbol.name
    return exc.IndexingError(
        f"Host tensor '{name}' is used whole inside a device loop; index it with tiles, "
        f"e.g. {name}[tile]."
    )



def _reject_whole_host_tensors(args: Any, kwargs: Any) -> None:
    stack = list(args) + list(kwargs.values())
    while stack:
        item = stack.pop()
        if isinstance(item, HostTensor):
            raise _whole_host_tensor_error(item)
        if isinstance(item, (list, tuple)):
            stack.extend(item)



def _size_of(item: Any) -> Any:
    """A size argument of a view: a tile stands for its block size (the shape of device
    values); a runtime scalar or device value raises its own 'not known when compiling'."""
    if isinstance(item, TileProxy):
        return item.dim.block_size
    if isinstance(item, (HostScalar, DeviceTensor)):
        return item.__index__()
    if isinstance(item, (list, tuple)) and not isinstance(item, torch.Size):
        return type(item)(_size_of(i) for i in item)
    return item



def _to_meta(item: Any) -> Any:
    if isinstance(item, _Traced):
        return item.meta
    if isinstance(item, (list, tuple)) and not isinstance(item, torch.Size):
        return type(item)(_to_meta(i) for i in item)
    return item



def _shape_entry(entry: Any) -> int:
    if isinstance(entry, TileProxy):
        return entry.dim.block_size
    if isinstance(entry, int) and not isinstance(entry, bool):
        return entry
    raise exc.UnsupportedOperation(f"Shapes of device values are tiles and ints, got {entry!r}.")



def _symbolic_result_shape(op: ops.OpDef, operands, shape: tuple, attrs: dict) -> tuple:
    """With static_shapes=False: an elementwise result keeps its operands' symbolic sizes, a
    view the sizes it was asked for (torch's meta tensors know only the values)."""
    if op.kind is ops.OpKind.VIEW and "shape" in attrs and len(attrs["shape"]) == len(shape):
        return keep_symbolic(shape, [tuple(attrs["shape"])])
    if op.kind is ops.OpKind.ELEMENTWISE:
        return keep_symbolic(shape, [getattr(o, "shape", None) for o in operands])
    return shape
