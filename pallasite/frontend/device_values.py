"""Device values that `hl` functions and torch factories make while tracing.

`hl.full`/`hl.zeros` record a `full` node (with the tiles sizing each axis),
`hl.arange` an `iota`, `hl.dot` a `dot` with its accumulator and out dtype,
and device code's `torch.zeros_like(v)` / `x.new_zeros([tile, n])` are
`hl.full`s (uninitialized is zeros). The functions take the recorder and use
its public interface (`device`, `record`, `device_operand`, `run_on_meta`).
"""
from __future__ import annotations

from typing import Any

import torch

from .. import exc
from ..ir import Node, Value, ops
from .operands import check_dtype, shape_entry
from .proxies import DeviceTensor, TileProxy, static_int
from .tile_sizes import TileExtent


def full(recorder: Any, shape: Any, value: Any, dtype: torch.dtype, like: DeviceTensor | None = None) -> DeviceTensor:
    """`hl.full(shape, value, dtype)`: `shape`'s entries are tiles and ints; `like`: the value a
    `torch.*_like` copies the shape of, whose partial tiles' padding the result has too (a
    reduction of `torch.ones_like(v)` counts only v's valid elements, as torch does)."""
    if recorder.device is None:
        raise exc.UnsupportedSyntax("hl.zeros/hl.full create device values; use torch.zeros in host code.")
    wide = dtype == torch.int64  # an int64 accumulator: torch's int64 numbers, held in int32 and checked
    if wide:
        check_int64_fill(value)
        dtype = torch.int32
    check_dtype(dtype, "hl.full")
    entries = shape if isinstance(shape, (list, tuple)) else [shape]
    dims = tuple(shape_entry(s) for s in entries)
    # Which tile sizes each axis, so a reduction over a partial tile sees only its valid part.
    tiles = tuple(s.dim if isinstance(s, (TileProxy, TileExtent)) else None for s in entries)
    operand = recorder.device_operand(value)
    attrs = {"shape": dims, "dtype": dtype, "tiles": tiles}
    operands = (operand,) if like is None else (operand, like.value)
    result = recorder.record("full", operands, attrs, dims, dtype)
    result.int64 = wide  # plan/int64_values.py follows it
    return DeviceTensor(recorder, result)


def check_int64_fill(value: Any) -> None:
    """An int64 device value is held in int32 (TPU has no 64-bit vectors): its fill must fit."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not -2**31 <= value < 2**31:
        raise exc.UnsupportedDtype(
            f"an int64 fill of {value!r}: device code holds int64 values in int32 (TPU has no 64-bit vectors), "
            "checking that torch's numbers fit; this one does not.")


def _check_fill(value: Any, dtype: torch.dtype) -> None:
    refusal = ops.number_refusal("full_like", value, dtype)
    if refusal is not None:
        raise exc.UnsupportedDtype(
            f"torch.full_like of {value!r} in {str(dtype).removeprefix('torch.')}: torch refuses the number "
            f"({refusal}); use one the dtype holds, or a wider dtype.")


def arange(recorder: Any, args: tuple, dtype: torch.dtype) -> DeviceTensor:
    """`hl.arange(end)` / `hl.arange(begin, end[, step])` of compile-time ints."""
    if recorder.device is None:
        raise exc.UnsupportedSyntax("hl.arange creates device values; use torch.arange in host code.")
    if len(args) == 1 and isinstance(args[0], TileExtent):  # `hl.arange(v.size(1))` of a partial tile:
        dim = args[0].dim  # its lanes' positions in it, padded where the tile is
        positions = recorder.tile_attribute(dim, "index") - recorder.tile_attribute(dim, "begin")
        return positions if dtype == torch.int32 else positions.to(dtype)
    args = tuple(static_int(a) for a in args)  # int arguments: constants of the variant
    if not all(isinstance(a, int) for a in args):
        raise exc.UnsupportedOperation("hl.arange bounds must be compile-time ints (ints, int arguments, "
                                       "or values hl.specialize makes constant).")
    rng = range(*args)
    check_dtype(dtype, "hl.arange")
    attrs = {"start": rng.start, "step": rng.step, "dtype": dtype}
    return DeviceTensor(recorder, recorder.record("iota", (), attrs, (len(rng),), dtype))


def dot(recorder: Any, a: Any, b: Any, acc: Any, out_dtype: torch.dtype | None) -> DeviceTensor:
    """`hl.dot(a, b, acc, out_dtype)`: out_dtype defaults to acc's, else float32 (int32 for ints)."""
    if recorder.device is None:
        raise exc.UnsupportedSyntax("hl.dot is for device code; use torch.matmul in host code.")
    meta = recorder.run_on_meta(ops.matmul_rule, (a, b), {}, "hl.dot")
    ops.check_dot_accumulator(a.dtype, b.dtype, None if acc is None else acc.dtype)
    if out_dtype is None:
        if acc is not None:
            out_dtype = acc.dtype
        elif meta.dtype in (torch.bfloat16, torch.float16, torch.float32):
            out_dtype = torch.float32
        else:
            out_dtype = torch.int32
    if acc is not None and tuple(acc.shape) != tuple(meta.shape):
        raise exc.ShapeMismatch(f"hl.dot: acc has shape {list(acc.shape)}, the product {list(meta.shape)}.")
    operands = [recorder.device_operand(x) for x in (a, b, acc)]
    value = recorder.record("dot", operands, {"out_dtype": out_dtype}, meta.shape, out_dtype)
    return DeviceTensor(recorder, value)


def factory_value(recorder: Any, factory: ops.Factory, args: tuple, kwargs: dict) -> Any:
    """`torch.zeros_like(v)` and friends of a device value, and `x.new_zeros([tile, n])` of
    any tensor, are `hl.full`s; uninitialized is zeros."""
    if factory.form == "new":
        return _new_tensor(recorder, factory, args, kwargs)
    if factory.form == "like":
        like = args[0]
        if not isinstance(like, DeviceTensor):
            raise exc.UnsupportedOperation(f"torch.{factory.name} in device code needs a device value.")
        fill = 0 if factory.fill is None else factory.fill
        given = fill is ops.FILL_ARGUMENT
        if given:
            fill = args[1] if len(args) > 1 else kwargs["fill_value"]
        dtype = kwargs.get("dtype") or like.dtype
        if given and isinstance(fill, (int, float)):  # torch.full_like refuses a fill the dtype cannot hold
            _check_fill(fill, dtype)  # (torch.full does not)
        return full(recorder, tuple(like.meta.shape), fill, dtype, like=like)
    raise exc.UnsupportedOperation(
        f"torch.{factory.name} is not supported in device code; use hl.zeros / hl.full with tiles."
    )


def _new_tensor(recorder: Any, factory: ops.Factory, args: tuple, kwargs: dict) -> DeviceTensor:
    """`x.new_zeros(size)`, `x.new_full(size, fill)`: a device value shaped by tiles and
    ints, of x's dtype unless `dtype=` says otherwise."""
    source, rest = args[0], args[1:]
    unknown = set(kwargs) - {"size", "fill_value", "dtype", "device"}
    if unknown:
        raise exc.UnsupportedOperation(
            f"Tensor.{factory.name}() got an unsupported argument {sorted(unknown)[0]!r} in device code.")
    size, fill = ops.new_tensor_size_and_fill(rest, kwargs, 0 if factory.fill is None else factory.fill)
    if size is None or fill is None:
        raise exc.UnsupportedOperation(f"Tensor.{factory.name} needs a size (and new_full a fill value).")
    return full(recorder, tuple(size) if isinstance(size, (list, tuple, torch.Size)) else (size,), fill,
                kwargs.get("dtype") or source.dtype)


def device_print(recorder: Any, prefix: str, values: tuple) -> None:
    """`hl.device_print(prefix, *values)`: a `device_print` node (no result) of device values;
    a constant becomes a device scalar (int32 or float32), a tile attribute is already one."""
    if recorder.device is None:
        raise exc.UnsupportedSyntax("hl.device_print prints device values; call it inside a device loop "
                                    "(host code may print with print()).")
    operands = []
    for value in values:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            dtype = torch.int32 if isinstance(value, int) else torch.float32
            value = full(recorder, [], value, dtype)
        operand = recorder.device_operand(value)
        if not isinstance(operand, Value):
            raise exc.UnsupportedOperation(f"hl.device_print prints device values and numbers, got {value!r}.",
                                           recorder.location)
        operands.append(operand)
    recorder.append_node(Node("device_print", tuple(operands), {"prefix": prefix}, [], recorder.location))
