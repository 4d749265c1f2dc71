"""Which tensors are device values, and which of their unit axes are lanes.

In reference mode every value computed inside a device loop carries one
attribute: the set of its axes that have extent 1 because a tile has one index
there (the last tile of a range, with a wider block) — a *lane*, which must
never broadcast. Every other unit axis is a broadcast axis, as in PyTorch.
Tensors without the attribute are host tensors.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterable, Iterator

import torch

ATTRIBUTE = "_pallasite_lanes"


def mark(tensor: torch.Tensor, axes: Iterable[int] = ()) -> torch.Tensor:
    """Record `tensor` as a device value whose unit `axes` are lanes; returns it."""
    setattr(tensor, ATTRIBUTE, frozenset(a for a in axes if 0 <= a < tensor.ndim and tensor.shape[a] == 1))
    return tensor


def of(tensor: Any) -> frozenset[int]:
    return getattr(tensor, ATTRIBUTE, frozenset())


def leaves(item: Any) -> Iterator[Any]:
    """The items of nested lists, tuples and dicts (an op's arguments, a kernel's result)."""
    if isinstance(item, (list, tuple)):
        for sub in item:
            yield from leaves(sub)
    elif isinstance(item, dict):
        for sub in item.values():
            yield from leaves(sub)
    else:
        yield item


def is_device(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and hasattr(value, ATTRIBUTE)


def real_extent(tensor: torch.Tensor, axis: int) -> int | None:
    """The axis's extent, or None for a broadcast axis."""
    size = tensor.shape[axis]
    return None if size == 1 and axis not in of(tensor) else size


_KEEP_INT64: list[bool] = []


@contextlib.contextmanager
def keeping_int64() -> Iterator[None]:
    """`finish` keeps int64 results in the block (reference/int64.py checks and narrows them)."""
    _KEEP_INT64.append(True)
    try:
        yield
    finally:
        _KEEP_INT64.pop()


def finish(result: Any, axes: Iterable[int] = ()) -> Any:
    """Mark a device result (each tensor of a tuple result), narrowing int64 to int32.

    Device code computes indices in int32, as the compiled kernel does.
    """
    if isinstance(result, torch.Tensor):
        if result.dtype == torch.int64 and not _KEEP_INT64:
            result = result.to(torch.int32)
        return mark(result, axes)
    if isinstance(result, tuple) and any(isinstance(r, torch.Tensor) for r in result):
        items = tuple(finish(r, axes) for r in result)
        return items if type(result) is tuple else type(result)(items)
    return result


def marked_as(tensor: torch.Tensor, model: torch.Tensor) -> torch.Tensor:
    """`tensor` with `model`'s lane and tile marks (a cast or a store's conversion of it)."""
    return mark_tiles(mark(tensor, of(model)), tiles_of(model))


def saturated(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Float `values` cast to the integer `dtype` as the compiled kernel casts them: NaN is 0,
    a value past the device dtype's range (int32 for int64) its nearest end, others round
    toward 0 (torch calls an out-of-range value undefined; its CPU wraps)."""
    bounds = torch.iinfo(torch.int32 if dtype == torch.int64 else dtype)
    with torch._C.DisableTorchFunction():
        return values.double().nan_to_num(0.0).clamp(bounds.min, bounds.max).trunc().to(dtype)


TILE_ATTRIBUTE = "_pallasite_tile_axes"


def mark_tiles(tensor: torch.Tensor, tiles: dict[int, str]) -> torch.Tensor:
    """Record which axes of `tensor` a loop's tile sizes (axis -> the tile's name): read at a
    tile, or computed from such values lane by lane (reference/extents.py)."""
    setattr(tensor, TILE_ATTRIBUTE, dict(tiles))
    return tensor


def tiles_of(tensor: Any) -> dict[int, str]:
    """The axes of `tensor` a loop's tile sizes (none known: a value built from a block size,
    or one an op other than a lane-by-lane one made)."""
    return getattr(tensor, TILE_ATTRIBUTE, {}) if isinstance(tensor, torch.Tensor) else {}


RUN_ATTRIBUTE = "tile_shift"  # the attribute the tracer's DeviceTensor has too (hl.load reads it)


def mark_run(tensor: torch.Tensor, offset: int) -> torch.Tensor:
    """Record `tensor` as a tile's positions shifted by the constant `offset` (`tile.index + c`):
    an index that reads 0 outside the tensor, as the compiled kernel's shifted tile does."""
    setattr(tensor, RUN_ATTRIBUTE, offset)
    return tensor


def run_offset(value: Any) -> int | None:
    """The shift of a tile's positions (0: `tile.index` itself), or None for any other value."""
    return getattr(value, RUN_ATTRIBUTE, None) if isinstance(value, torch.Tensor) else None


def is_run(value: Any) -> bool:
    return run_offset(value) is not None
