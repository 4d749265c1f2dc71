"""View ops on device values in reference mode (permute, transpose, reshape, squeeze,
expand, ...): torch's views, with the lanes (`lanes.py`) moved to the axes they land on and a
size written for a block taking the extent of the axis it stands for."""
from __future__ import annotations

from typing import Any, Callable

import torch

from . import lanes, tiles
from .operands import check_operands, generic


def _dims(args: tuple, kwargs: dict, key: str) -> list[int]:
    dims = args[1:] if len(args) > 1 else kwargs.get(key, ())
    if len(dims) == 1 and isinstance(dims[0], (list, tuple, torch.Size)):
        dims = dims[0]
    # a tile, or a product of tiles' block sizes, stands for its extent
    return [d.extent if isinstance(d, (tiles.RefTile, tiles.BlockSize)) else int(d) for d in dims]


def _permuted(func: Callable, args: tuple, kwargs: dict, perm: list[int]) -> Any:
    check_operands((args, kwargs))
    source = args[0]
    kept = lanes.of(source)
    return lanes.finish(func(*args, **kwargs), {j for j, p in enumerate(perm) if p in kept})


def _permute(func, args, kwargs):
    rank = args[0].ndim
    return _permuted(func, args, kwargs, [d % rank for d in _dims(args, kwargs, "dims")])


def _transpose(func, args, kwargs):
    rank = args[0].ndim
    d0 = args[1] if len(args) > 1 else kwargs["dim0"]
    d1 = args[2] if len(args) > 2 else kwargs["dim1"]
    perm = list(range(rank))
    perm[d0 % rank], perm[d1 % rank] = perm[d1 % rank], perm[d0 % rank]
    return _permuted(func, args, kwargs, perm)


def _t(func, args, kwargs):
    rank = args[0].ndim
    return _permuted(func, args, kwargs, [1, 0] if rank == 2 else list(range(rank)))


def property_of(func: Callable, args: tuple) -> Any:
    """`x.T`, `x.mT`, ... are permutations; other properties pass through."""
    owner = getattr(func, "__self__", None)
    source = args[0]
    rank = source.ndim if isinstance(source, torch.Tensor) else 0
    if owner is torch.Tensor.T or owner is torch.Tensor.H:
        return _permuted(func, args, {}, list(reversed(range(rank))))
    if (owner is torch.Tensor.mT or owner is torch.Tensor.mH) and rank >= 2:
        return _permuted(func, args, {}, list(range(rank - 2)) + [rank - 1, rank - 2])
    return generic(func, args, {})


def _unsqueeze(func, args, kwargs):
    check_operands((args, kwargs))
    source = args[0]
    dim = args[1] if len(args) > 1 else kwargs["dim"]
    dim = dim % (source.ndim + 1)
    return lanes.finish(func(*args, **kwargs), {a + (a >= dim) for a in lanes.of(source)})


def _squeeze(func, args, kwargs):
    """Squeezes broadcast axes only: a lane is a real axis of its block."""
    check_operands((args, kwargs))
    source = args[0]
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    if dims is None:
        dims = range(source.ndim)
    elif not isinstance(dims, (list, tuple)):
        dims = (dims,)
    kept = lanes.of(source)
    removed = {d % source.ndim for d in dims if source.shape[d] == 1 and d % source.ndim not in kept}
    shape = [s for axis, s in enumerate(source.shape) if axis not in removed]
    axes = {a - sum(1 for r in removed if r < a) for a in kept}
    return lanes.finish(source.reshape(shape), axes)


def _reshape(func, args, kwargs):
    """`reshape`/`view` with the extent rule: a size written for a block (`v.reshape(8, 128)`
    of a 4-row tile) takes the extent of the axis it stands for."""
    if "dtype" in kwargs or any(isinstance(d, torch.dtype) for d in args[1:]):
        return generic(func, args, kwargs)  # a bitcast view
    check_operands((args, kwargs))
    source = args[0]
    shape = _dims(args, kwargs, "shape")
    try:
        result = source.reshape(shape)
    except RuntimeError:
        fitted = _fit_to_extents(source, shape)
        if fitted is None:
            raise
        result = source.reshape(fitted)
    return lanes.finish(result, _reshaped_lanes(source, result))


def _unflatten(func, args, kwargs):
    """`x.unflatten(dim, sizes)`: the reshape that splits `dim` (a tile among the sizes
    stands for its extent)."""
    source = args[0]
    dim = (args[1] if len(args) > 1 else kwargs["dim"]) % source.ndim
    sizes = _dims((None, args[2] if len(args) > 2 else kwargs["sizes"]), {}, "sizes")
    return _reshape(torch.Tensor.reshape, (source, [*source.shape[:dim], *sizes, *source.shape[dim + 1:]]), {})


def _fit_to_extents(source: torch.Tensor, shape: list[int]) -> list[int] | None:
    """`shape` with its non-unit sizes replaced by the source's real extents, one for one."""
    real = [lanes.real_extent(source, axis) for axis in range(source.ndim)]
    real = [extent for extent in real if extent is not None]
    positions = [j for j, size in enumerate(shape) if size != 1]
    if -1 in shape or len(positions) != len(real) or any(shape[j] < e for j, e in zip(positions, real)):
        return None
    fitted = list(shape)
    for j, extent in zip(positions, real):
        fitted[j] = extent
    return fitted


def _reshaped_lanes(source: torch.Tensor, result: torch.Tensor) -> set[int]:
    """A lane goes to the unit axis of the result with as many elements before it."""
    axes: set[int] = set()
    for axis in sorted(lanes.of(source)):
        before = source.shape[:axis].numel()
        for j, size in enumerate(result.shape):
            if size == 1 and j not in axes and result.shape[:j].numel() == before:
                axes.add(j)
                break
    return axes


def _expand(func, args, kwargs):
    """Expanding changes broadcast axes only: an axis with an extent keeps it (a size written
    for the block stands for the tile's extent), and a lane never widens."""
    check_operands((args, kwargs))
    source = args[0]
    if func is torch.Tensor.expand_as:
        sizes = list(args[1].shape)
    else:
        sizes = _dims(args, kwargs, "size")
    shift = len(sizes) - source.ndim
    for axis in range(source.ndim):
        if lanes.real_extent(source, axis) is not None:
            sizes[axis + shift] = -1
    return lanes.finish(source.expand(sizes), {a + shift for a in lanes.of(source)})


VIEWS: dict[str, Callable] = {
    "permute": _permute, "transpose": _transpose, "swapaxes": _transpose, "swapdims": _transpose,
    "t": _t, "unsqueeze": _unsqueeze, "squeeze": _squeeze, "reshape": _reshape, "view": _reshape,
    "unflatten": _unflatten,
    "expand": _expand, "expand_as": _expand, "broadcast_to": _expand,
}
