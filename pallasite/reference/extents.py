"""Reference mode's extent rule: operands of one op whose extents disagree along an axis.

In reference mode a tile has its actual extent (the last one is shorter), while a value
built from a block size (`hl.arange(tile.block_size)`) has the block's: the compiled
kernel sees one extent there, so the op computes on the shorter one. Any other
disagreement is torch's broadcast error, as compiling gives — also two values read at
different tiles (`x[tile_i] * y[tile_j]`, a full tile against a short one) or a tile and a
slice of a tensor (`x[tm, :64] + y[tm, tn]`), whose axes loads mark with their tiles or
`[n]` (`lanes.tiles_of`, carried through lane-by-lane ops: `tile_axes`), as plan/extents.py
refuses them compiled. A store cuts only an unmarked (block-sized) value to its target.
"""
from __future__ import annotations

import torch

from .. import exc
from .. import language as hl
from . import lanes, tiles


def agree(tensors: list[torch.Tensor], trailing: int = 0) -> tuple[list[torch.Tensor], set[int]]:
    """Slice `tensors` so every broadcast-aligned axis has one extent: the shortest.

    The last `trailing` axes of each tensor are left alone (a matmul's matrix
    axes). Returns the sliced tensors and the output axes that are lanes.
    """
    rank = max((t.ndim - trailing for t in tensors), default=0)
    targets: dict[int, int] = {}
    extents: dict[int, set[int]] = {}
    for tensor in tensors:
        shift = rank - (tensor.ndim - trailing)
        for axis in range(tensor.ndim - trailing):
            extent = lanes.real_extent(tensor, axis)
            if extent is not None:
                targets[axis + shift] = min(targets.get(axis + shift, extent), extent)
                extents.setdefault(axis + shift, set()).add(extent)
    _check_narrowing(tensors, extents, rank)
    _check_tiles(tensors, rank, trailing)
    sliced = []
    for tensor in tensors:
        shift = rank - (tensor.ndim - trailing)
        for axis in range(tensor.ndim - trailing):
            target = targets.get(axis + shift)
            if target is not None and tensor.shape[axis] > target:
                tensor = tensor.narrow(axis, 0, target)
        sliced.append(tensor)
    return sliced, {axis for axis, target in targets.items() if target == 1}


def _check_narrowing(tensors: list[torch.Tensor], extents: dict[int, set[int]], rank: int) -> None:
    """Extents of one aligned axis may differ only as the compiled kernel's would not: a
    partial tile's extent against its block size (a value built from the block size, such
    as hl.arange(tile.block_size), beside one read at the tile). Any other pair does not
    broadcast in torch nor in the kernel (`x[ta, tb] + m[None, ta]` with ta's 8 positions
    against tb's 128), and is torch's error here too, not a silently shortened axis."""
    partial = partial_tiles()
    for axis, found in extents.items():
        if len(found) < 2:
            continue
        short = min(found)
        if all((short, extent) in partial for extent in found if extent != short):
            continue
        shapes = ", ".join(str(list(t.shape)) for t in tensors)
        raise exc.ShapeMismatch(
            f"Operands of shapes {shapes} do not broadcast: their axis {axis - rank} has "
            f"{' and '.join(str(e) for e in sorted(found))} positions (only a size-1 axis broadcasts).")


def _check_tiles(tensors: list[torch.Tensor], rank: int, trailing: int) -> None:
    """Two tiles sizing one aligned axis with different extents: torch's broadcast error (a
    block-sized value, which no tile marks, is what may be cut to a tile's extent)."""
    seen: dict[int, tuple[str, int]] = {}
    for tensor in tensors:
        shift = rank - (tensor.ndim - trailing)
        for axis, name in lanes.tiles_of(tensor).items():
            if axis >= tensor.ndim - trailing or lanes.real_extent(tensor, axis) is None:
                continue
            other = seen.setdefault(axis + shift, (name, tensor.shape[axis]))
            if other[0] != name and other[1] != tensor.shape[axis]:
                raise exc.ShapeMismatch(
                    f"Operands of {describe_mark(other[0])} ({other[1]} positions) and {describe_mark(name)} ({tensor.shape[axis]}) "
                    f"meet on axis {axis + shift - rank}: they do not broadcast (eager PyTorch raises).")


def describe_mark(mark: str) -> str:
    """What a mark of `lanes.tiles_of` says: a tile's name, or `[n]`: a slice of a kernel tensor."""
    return "a slice of a tensor" if mark.startswith("[") else f"tile '{mark}'"


def tile_axes(tensors: list[torch.Tensor], result: torch.Tensor) -> torch.Tensor:
    """`result` of a lane-by-lane op on `tensors`, marked with the tiles sizing its axes."""
    tiles: dict[int, str] = {}
    for tensor in tensors:
        shift = result.ndim - tensor.ndim
        for axis, name in lanes.tiles_of(tensor).items():
            if lanes.real_extent(tensor, axis) is not None and axis + shift >= 0:
                tiles.setdefault(axis + shift, name)
    return lanes.mark_tiles(result, tiles) if tiles else result


def partial_tiles() -> set[tuple[int, int]]:
    """(extent, block size) of each partially filled tile of the loops around the statement."""
    runner = hl.active_tracer()
    return {(item.extent, int(item.block_size)) for item, _ in getattr(runner, "frames", ())
            if isinstance(item, tiles.RefTile) and item.extent < int(item.block_size)}
