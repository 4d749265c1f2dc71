"""`hl.rand` and `torch.rand_like` in reference mode: the compiled kernel's numbers, eagerly.

The same counter (an element's coordinates in mixed radix, after the begins
of the enclosing loops that size no axis) and the same hash as
`pallasite/runtime/prng.py`, written again in PyTorch on int64 tensors holding
32-bit words, so reference mode draws what the compiled kernel draws. One
difference: `torch.rand_like(v)` numbers positions in v's block, and a device
value here has its tile's extent, not the block size, so a partial tile's
numbers differ from the compiled kernel's (whole tiles agree).
"""
from __future__ import annotations

from typing import Any

import torch

from .. import exc
from . import lanes, tiles

_WORD = 0xFFFFFFFF
_MULTIPLIERS = (0x7FEB352D, 0x846CA68B)
_GOLDEN = 0x9E3779B9
_KEY_OFFSET = 0x6A09E667
_SIGNIFICAND_BITS = {torch.float32: 24, torch.bfloat16: 8, torch.float16: 11}

Frame = tuple[Any, int]  # an enclosing loop dim: (its RefTile or grid index, the loop's end)


def _mix(x: torch.Tensor) -> torch.Tensor:
    x = x ^ (x >> 16)
    x = (x * _MULTIPLIERS[0]) & _WORD
    x = x ^ (x >> 15)
    x = (x * _MULTIPLIERS[1]) & _WORD
    return x ^ (x >> 16)


def uniform(counter: torch.Tensor, seed: int, stream: int, dtype: torch.dtype) -> torch.Tensor:
    """Uniform numbers in [0, 1) of `dtype`, one per element of the int64 `counter`."""
    salt = (stream * _GOLDEN + _KEY_OFFSET) & _WORD
    key = _mix(torch.tensor((seed & _WORD) ^ salt, dtype=torch.int64))
    bits = _mix((_mix((counter & _WORD) ^ key) + key) & _WORD)
    width = _SIGNIFICAND_BITS[dtype]
    return ((bits >> (32 - width)).to(torch.float32) * (1.0 / (1 << width))).to(dtype)


def counter(frames: list[Frame], entries: list, sized_by_tiles: bool) -> tuple[torch.Tensor, set[int]]:
    """Each element's counter, and the result axes that are lanes (one-index tiles)."""
    shape_tiles = {id(e) for e in entries if isinstance(e, tiles.RefTile)} if sized_by_tiles else set()
    ends = {id(item): end for item, end in frames if isinstance(item, tiles.RefTile)}
    value: torch.Tensor | None = None
    for item, end in frames:
        if id(item) in shape_tiles:
            continue
        begin = torch.tensor(item.begin if isinstance(item, tiles.RefTile) else int(item), dtype=torch.int64)
        value = begin if value is None else value * end + begin
    lane_axes = set()
    for axis, entry in enumerate(entries):
        if isinstance(entry, tiles.RefTile) and sized_by_tiles:
            if id(entry) not in ends:
                raise exc.UnsupportedOperation(f"hl.rand: tile '{entry.name}' is not a loop around this call.")
            coordinate, extent = torch.arange(entry.begin, entry.end, dtype=torch.int64), ends[id(entry)]
            if entry.single_lane:
                lane_axes.add(axis)
        elif isinstance(entry, int) and not isinstance(entry, bool):
            coordinate, extent = torch.arange(entry, dtype=torch.int64), entry
        else:
            raise exc.UnsupportedOperation(f"Shapes of device values are tiles and ints, got {entry!r}.")
        view = [1] * len(entries)
        view[axis] = coordinate.numel()
        coordinate = coordinate.reshape(view)
        value = coordinate if value is None else value * extent + coordinate
    if value is None:
        raise exc.UnsupportedSyntax("Random numbers are drawn inside a device loop.")
    return value, lane_axes


def seed_of(seed: Any) -> int:
    """hl.rand's seed as a Python int (an int, or an integer scalar tensor)."""
    if isinstance(seed, torch.Tensor) and seed.numel() == 1 and not seed.dtype.is_floating_point \
            and seed.dtype != torch.bool:
        return int(seed.reshape(()).item())
    if isinstance(seed, int) and not isinstance(seed, bool):
        return seed
    raise exc.UnsupportedOperation(
        f"hl.rand(shape, seed) needs an int seed (a Python int, an int argument of the kernel or "
        f"an integer device scalar), got {seed!r}.")


def draw(frames: list[Frame], entries: list, seed: int, stream: int, dtype: torch.dtype,
         sized_by_tiles: bool = True, lane_axes: set[int] | None = None) -> torch.Tensor:
    value, axes = counter(frames, entries, sized_by_tiles)
    result = uniform(value, seed, stream, dtype)
    return lanes.mark(result, axes if lane_axes is None else lane_axes)


def whole_tensor(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """What `hl.rand` draws over a whole tensor of `shape` whose every axis is a tile (or a
    full int axis) inside loops over those tiles only: the counter is the row-major index."""
    counters = torch.arange(int(torch.Size(shape).numel()), dtype=torch.int64).reshape(shape)
    return uniform(counters, seed, 0, torch.float32)

