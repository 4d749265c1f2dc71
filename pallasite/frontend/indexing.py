"""The one place a subscript of a tensor is recognized.

`normalize_subscript` turns a device-code subscript key into a tuple of IR
index items (`TileSlice`, `FullSlice`, `ScalarIndex`, `NewAxis`, `GatherIndex`)
covering every axis of the tensor. Planning and codegen consume these items
and never look at the user's key again. A host-code subscript indexes a whole
tensor with JAX's indexing, which agrees with torch's for the forms
`check_host_subscript` accepts, so it keeps the user's items.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from .. import exc
from ..ir import FullSlice, GatherIndex, IndexItem, NewAxis, ScalarIndex, TileSlice, Value
from .proxies import DeviceTensor, HostScalar, HostTensor, TileProxy


def normalize_subscript(
    key: Any,
    shape: tuple[int, ...],
    tensor_name: str,
    scalar_value: Callable[[Any], Value],
    store: bool = False,
) -> tuple[IndexItem, ...]:
    """Normalize `tensor[key]`; `scalar_value` turns a host scalar into a device Value.

    `store`: the subscript is the target of an assignment (an index vector there scatters)."""
    items = list(key) if isinstance(key, (tuple, list)) else [key]
    consumed = sum(1 for item in items if item is not None and item is not Ellipsis)
    if sum(1 for item in items if item is Ellipsis) > 1:
        raise exc.IndexingError(f"{tensor_name}[...]: only one Ellipsis is allowed.")
    if consumed > len(shape):
        raise exc.IndexingError(
            f"Too many indices for {tensor_name}: it has {len(shape)} dimensions, "
            f"the subscript indexes {consumed}."
        )
    out: list[IndexItem] = []
    axis = 0
    for item in items:
        if item is Ellipsis:
            for _ in range(len(shape) - consumed):
                out.append(FullSlice())
                axis += 1
            continue
        if item is None:
            out.append(NewAxis())
            continue
        out.append(_normalize_item(item, shape[axis], axis, tensor_name, scalar_value))
        axis += 1
    while axis < len(shape):
        out.append(FullSlice())
        axis += 1
    gathers = [item for item in out if isinstance(item, GatherIndex)]
    if len(gathers) > 1 and store:
        raise exc.IndexingError(
            f"{tensor_name}[...] = ...: a scatter may hold only one index vector; this one has "
            f"{len(gathers)}. Scatter into a flat view instead: `flat = {tensor_name}.view(-1)` in host "
            "code, then `flat[idx_a * size_b + idx_b] = v` in the loop.")
    if len(gathers) > 1:
        raise exc.IndexingError(
            f"{tensor_name}[...]: a subscript may hold only one index vector (a gather along one "
            f"axis); this one has {len(gathers)}. Gather one axis at a time.")
    return tuple(out)


def _normalize_item(item, size, axis, tensor_name, scalar_value) -> IndexItem:
    if isinstance(item, TileProxy):
        return TileSlice(item.dim)
    if isinstance(item, slice):
        if item == slice(None) or (
            item.start in (None, 0) and item.stop in (None, size) and item.step in (None, 1)
        ):
            return FullSlice()
        raise exc.IndexingError(
            f"{tensor_name}[...]: the slice {_slice_text(item)} on axis {axis} is not "
            "supported in device code; index with a tile, ':' or a scalar."
        )
    if isinstance(item, bool):
        raise exc.IndexingError(f"{tensor_name}[...]: boolean indices are not supported.")
    if isinstance(item, int):
        if not -size <= item < size:
            raise exc.IndexingError(
                f"Index {item} is out of bounds for axis {axis} of {tensor_name} (size {size})."
            )
        return ScalarIndex(item % size)
    if isinstance(item, HostScalar):
        if item.python_type is not int:
            raise exc.IndexingError(f"{tensor_name}[...]: a float scalar cannot index a tensor.")
        return ScalarIndex(scalar_value(item))
    if isinstance(item, DeviceTensor):
        value = item.value
        producer = value.producer
        if producer is not None and producer.op == "tile_index":
            return TileSlice(producer.args[0])
        if value.shape == () and not value.dtype.is_floating_point and value.dtype != torch.bool:
            return ScalarIndex(value)
        if value.shape == ():
            raise exc.IndexingError(f"{tensor_name}[...]: a {value.dtype} scalar cannot index a tensor.")
        if value.dtype.is_floating_point or value.dtype == torch.bool:
            raise exc.IndexingError(
                f"{tensor_name}[...]: a {value.dtype} vector cannot index a tensor (boolean masks "
                "are not supported); gather with an int32 index vector.")
        if len(value.shape) != 1:  # a load flattens an N-D index tile first (`is_index_tile`)
            raise exc.IndexingError(
                f"{tensor_name}[...] = ...: a scatter takes a 1-D index vector; this index is a "
                f"{len(value.shape)}-D tile of shape {list(value.shape)}. Scatter its flat vector "
                f"instead: `{tensor_name}[idx.reshape(-1), ...] = v.reshape(-1, ...)` (gathers take "
                "index tiles of any rank).")
        return GatherIndex(value)
    raise exc.IndexingError(
        f"{tensor_name}[...]: unsupported index {item!r} of type {type(item).__name__}."
    )


def is_index_tile(item: Any) -> bool:
    """An integer device value of rank >= 2 in a subscript: a gather through an index tile."""
    if not isinstance(item, DeviceTensor):
        return False
    dtype = item.value.dtype
    return len(item.value.shape) >= 2 and not dtype.is_floating_point and dtype != torch.bool


def gathered_axis(index: tuple[IndexItem, ...]) -> int:
    """The axis of `tensor[index]` that the index vector's lanes fill."""
    axis = 0
    for item in index:
        if isinstance(item, GatherIndex):
            return axis
        if not isinstance(item, ScalarIndex):
            axis += 1
    raise AssertionError("no index vector in the subscript")


def _slice_text(item: slice) -> str:
    parts = ["" if p is None else str(p) for p in (item.start, item.stop)]
    text = ":".join(parts)
    return text + (f":{item.step}" if item.step is not None else "")


def indexed_shape(index: tuple[IndexItem, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of `tensor[index]` as device code sees it (tiles are full blocks)."""
    out = []
    axis = 0
    for item in index:
        if isinstance(item, NewAxis):
            out.append(1)
            continue
        if isinstance(item, TileSlice):
            out.append(item.dim.block_size)
        elif isinstance(item, FullSlice):
            out.append(shape[axis])
        elif isinstance(item, GatherIndex):  # the index's axis replaces the tensor's
            out.append(item.value.shape[0])
        axis += 1
    return tuple(out)


def check_host_subscript(key: Any, tensor_name: str) -> None:
    """Reject host-code subscript items whose result shape only the data knows (boolean
    masks) or that torch reads differently from JAX (float indices)."""
    items = key if isinstance(key, tuple) else (key,)
    for item in items:
        if isinstance(item, list):
            flat = list(_flatten_list(item))
            if any(isinstance(i, bool) for i in flat):
                raise _mask_error(tensor_name)
            if not all(isinstance(i, int) for i in flat):
                raise exc.IndexingError(
                    f"{tensor_name}[...]: a list index must hold ints; use an int32 index tensor.")
        elif isinstance(item, HostTensor):
            dtype = item.symbol.dtype
            if dtype in (torch.bool, torch.uint8):
                raise _mask_error(tensor_name)
            if dtype.is_floating_point:
                raise exc.IndexingError(f"{tensor_name}[...]: a {dtype} tensor cannot index; cast it to int32.")
        elif isinstance(item, HostScalar) and item.python_type is not int:
            raise exc.IndexingError(f"{tensor_name}[...]: a float scalar cannot index a tensor.")


def _mask_error(tensor_name: str) -> exc.IndexingError:
    return exc.IndexingError(
        f"{tensor_name}[mask]: a boolean mask keeps a number of elements only the data knows, so "
        "the result has no shape when compiling; use torch.where(mask, value, other) to keep the "
        "shape, or an int32 index tensor.")


def _flatten_list(item: Any):
    for entry in item:
        if isinstance(entry, (list, tuple)):
            yield from _flatten_list(entry)
        else:
            yield entry
