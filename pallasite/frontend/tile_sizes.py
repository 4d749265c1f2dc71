"""Sizes of device values along partial tiles: `v.size(d)`, `v.shape`, `v.numel()`.

A tile's block holds `block_size` lanes, but the last tile of a dim the block does not
divide holds fewer valid ones (72 of 128 where a dim of 200 ends). torch, and reference
mode, answer `v.size(d)` with the valid count, so a size that a tile with a partial tail
gives is a `TileExtent`, which stands for the tile:

- as a size of a device value (`hl.zeros([v.size(0)])`, `v.new_ones(v.shape)`,
  `v.reshape(v.size(0), -1)`) it is the tile's axis: block_size lanes carrying the tile's
  padding, which reductions mask as they mask the tile's own;
- in arithmetic (`v.sum(1) / v.size(1)`, `count + chunk.size(-1)`) it is the tile's extent,
  `tile.end - tile.begin`, a device scalar;
- as a Python number (`math.sqrt(v.size(1))`, `range(v.size(0))`) it has no compile-time
  value, and is refused; compared, it is the extent too (`if v.size(0) == 8:` is a device
  if), except that a tile's sizes equal each other (`v.shape == w.shape`).

Only the user's code sees them (`user_frame`): pallasite's own code (composites, `hl`
functions) reasons in whole blocks, whose padding the mask planner handles.

An axis that no tile with a partial tail indexes gives its plain int, as before. Which
tile indexes an axis is the padding analysis's own propagation (`plan/masks.py:tile_axes`)
over the nodes recorded so far, so sizes and masks agree.
"""
from __future__ import annotations

import operator
import os
from types import FrameType
from typing import Any

import torch

from .. import exc
from ..ir import TileDim
from ..plan.masks import tile_axes


class TileExtent:
    """`v.size(d)` where a tile with a partial tail indexes axis d of v."""

    def __init__(self, recorder: Any, dim: TileDim):
        self._recorder = recorder
        self.dim = dim

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        """A torch call with such a size among its arguments (`torch.where(c, v.size(1), 0)`) is
        traced as device code: torch's argument parser takes the size as a tensor-like."""
        extent = next(item for item in _flatten((args, kwargs or {})) if isinstance(item, TileExtent))
        return extent._recorder.torch_function(func, args, kwargs or {})

    @property
    def block_size(self) -> int:
        return self.dim.block_size

    def extent(self) -> Any:
        """The tile's valid length, `tile.end - tile.begin`: a device scalar."""
        return self._recorder.tile_attribute(self.dim, "end") - self._recorder.tile_attribute(self.dim, "begin")

    def _no_number(self, *_: Any) -> Any:
        name = self.dim.name
        extent = self.dim.static_extent
        last = (f"the last tile of {extent} holds {extent % self.block_size} of its {self.block_size} lanes"
                if isinstance(extent, int) and extent % self.block_size else
                f"a partial tile holds fewer than its {self.block_size} lanes")
        raise exc.UnsupportedOperation(
            f"This size is the extent of tile '{name}', which differs between tiles ({last}), so it has no "
            "compile-time value as a Python number. Use it as a size of a device value (hl.zeros([v.size(0)])) or "
            f"in device arithmetic (v.sum(1) / v.size(1)), or write {name}.block_size for the block size.",
            forms_anchor="tile-attributes")

    __index__ = __int__ = __float__ = __complex__ = _no_number

    # The same tile's sizes are equal (`v.shape == w.shape`); any other comparison is of the
    # extent, a device bool (`if v.size(0) == 8:` is a device if).
    def __eq__(self, other: Any) -> Any:
        if isinstance(other, TileExtent) and other.dim.id == self.dim.id:
            return True
        return self.extent() == (other.extent() if isinstance(other, TileExtent) else other)

    def __ne__(self, other: Any) -> Any:
        if isinstance(other, TileExtent) and other.dim.id == self.dim.id:
            return False
        return self.extent() != (other.extent() if isinstance(other, TileExtent) else other)

    def __hash__(self) -> int:
        return hash(("tile extent", self.dim.id))

    def __repr__(self) -> str:
        return f"{self.dim.name}.size"

    def __neg__(self) -> Any:
        return -self.extent()

    def __pos__(self) -> Any:
        return self.extent()

    def __abs__(self) -> Any:
        return self.extent()

    def __round__(self, digits: Any = None) -> Any:
        return self.extent()  # an integer already

    def __divmod__(self, other: Any) -> tuple:
        return self // other, self % other

    def __rdivmod__(self, other: Any) -> tuple:
        return other // self, other % self


def _flatten(value: Any):
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _flatten(item)
    else:
        yield value


def _arithmetic(function: Any, reflected: bool):
    def op(self: TileExtent, other: Any) -> Any:
        other = other.extent() if isinstance(other, TileExtent) else other
        return function(other, self.extent()) if reflected else function(self.extent(), other)

    return op


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "lshift", "rshift", "and", "or", "xor",
              "lt", "le", "gt", "ge"):
    _function = getattr(operator, f"{_name}_" if _name in ("and", "or") else _name)
    setattr(TileExtent, f"__{_name}__", _arithmetic(_function, False))
    if _name not in ("lt", "le", "gt", "ge"):
        setattr(TileExtent, f"__r{_name}__", _arithmetic(_function, True))


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def user_frame(frame: FrameType) -> bool:
    """Whether `frame` runs the user's code (a kernel body, a helper it calls), not pallasite's
    own: only the user's code sees `TileExtent`s."""
    return not os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE)


def sizes(tensor: Any) -> tuple:
    """`tensor.shape` for user code: a `TileExtent` on each axis a tile with a partial tail
    indexes, the int elsewhere (the meta shape itself where no such tile is open)."""
    recorder = tensor._tracer
    shape = tensor.meta.shape
    partial = {dim.id: dim for dim in recorder.active_dims() if dim.has_partial_tail}
    if not partial or not shape:
        return shape
    recorded = [node for body in recorder.open_bodies() for node in body]
    axes = tile_axes(recorded, set(partial)).get(tensor.value.id, {})
    if not axes:
        return shape
    return tuple(TileExtent(recorder, partial[axes[axis]]) if axis in axes else size
                 for axis, size in enumerate(shape))


def fewest_valid(tensor: Any, axis: int) -> int | None:
    """The fewest valid elements a tile of device value `tensor` may hold along `axis`: the
    last tile's count where a tile with a partial tail pads it (1 where its range is read from
    data or its size is dynamic), None where the axis is whole."""
    if not hasattr(tensor, "_tracer") or not hasattr(tensor, "meta"):
        return None
    size = sizes(tensor)[axis]
    if not isinstance(size, TileExtent):
        return None
    dim = size.dim
    extent = dim.static_extent
    if not isinstance(extent, int):
        return 1
    return extent % dim.block_size or dim.block_size


def numel(tensor: Any) -> Any:
    """`tensor.numel()` for user code: the product of `sizes` (a device scalar along a partial tile)."""
    total = 1
    for size in sizes(tensor):
        total = total * size
    return total


def as_meta(extent: TileExtent) -> torch.Tensor:
    """What shape rules see for a size in arithmetic: the int32 device scalar it is."""
    return torch.empty((), dtype=torch.int32, device="meta")


__all__ = ["TileExtent", "as_meta", "numel", "sizes", "user_frame"]
