"""Scatters: how a store through an index vector (`out[idx, :] = v`) runs on a TPU.

Mosaic has no vector scatter, and the lanes' indices are vector values (not
scalars a `pl.ds` could take), so the scattered axis of the output stays
whole in VMEM (a FULL block, or a resident one when tiles also index that
axis) and each scatter rewrites that window: for every destination row, the
value of the last lane that names it (the highest lane), else the old row.
The rows are picked as a gather picks them — a one-hot matmul for float
outputs (exact at HIGHEST precision), a select-and-sum for int32 — from the
one-hot of (row, last lane naming it). This is what `Scatter` records.

Duplicates across programs: the window is the same block for every program
of the grid axes that do not choose it, so those axes are `arbitrary`
(sequential, in grid order) and the last program to write a row wins. Grid
tiles of the output inside such an axis stay resident too (the block must not
change between its visits); see `widened_for_scatter`.
"""
from __future__ import annotations

import dataclasses

import torch

from .. import exc
from ..ir import SCATTER_DTYPES, GatherIndex, NewAxis, Store
from .gathers import moved_tile_hint
from .grid_exprs import distinguishing_axes
from .index_expr import ZERO
from .plans import Access, AxisBlock, BlockKind, GatherMethod, LaneRange, Memory, Operand, Scatter
from .vmem import padded_bytes

# A scattered output's window may hold at most this fraction of the chip's VMEM: the
# rest is for the other blocks and the one-hot operand.
SCATTER_WINDOW_VMEM_FRACTION = 0.25

# floats picked by a one-hot matmul (float16 in float32, which holds every float16), int32 by a select-sum
_METHODS = {dtype: GatherMethod.ONE_HOT_MATMUL if dtype.is_floating_point else GatherMethod.SELECT_SUM
            for dtype in SCATTER_DTYPES}


def is_scatter(node) -> bool:
    return isinstance(node, Store) and any(isinstance(item, GatherIndex) for item in node.index)


def plan_scatter(node: Store, axis: int, rows: int) -> Scatter:
    """The scatter of `node`, which rewrites all `rows` of ref axis `axis` of its window."""
    (item,) = [item for item in node.index if isinstance(item, GatherIndex)]
    method = _METHODS.get(node.tensor.dtype)
    if method is None:
        supported = ", ".join(str(dtype).replace("torch.", "") for dtype in _METHODS)
        raise exc.UnsupportedOperation(
            f"Scattering into '{node.tensor.name}' ({node.tensor.dtype}) is not supported; "
            f"scatters write {supported} tensors. Convert it on the host.", node.location)
    lane_mask = node.args[1] if len(node.args) > 1 else None
    return Scatter(item.value, axis, rows, method, lane_mask=lane_mask)


def widened_for_scatter(symbol, blocks: list[AxisBlock], grid_axis_of: dict[int, int],
                        resident_length) -> list[AxisBlock]:
    """A scattered tensor's block does not change along the grid axes that choose none
    of its blocks (the rows come from the data), so it is revisited across them; a
    grid tile of the tensor inside the outermost such axis would change the block
    between two visits, so it stays resident (one block for the whole range). So
    does the target of an `hl.atomic_add` that accumulates across programs
    (`hl.atomic_add(out, [tile_n], v)` in a loop over [m, n]).

    `resident_length(dim, size, axis)` is the block length that holds every tile of dim."""
    used = set()
    for block in blocks:
        used |= distinguishing_axes(block, grid_axis_of)
    unused = [axis for axis in sorted(set(grid_axis_of.values())) if axis not in used]
    if not unused:
        return blocks
    outer = unused[0]
    widened = []
    for axis, block in enumerate(blocks):
        if block.kind is BlockKind.TILE and grid_axis_of[block.dim.id] > outer:
            block = AxisBlock(
                BlockKind.RESIDENT, resident_length(block.dim, symbol.shape[axis], axis), ZERO, block.dim,
                reason=f"'{symbol.name}' is scattered or atomically added to, so its block stays the same "
                       f"along grid axis "
                       f"{outer}, and tile '{block.dim.name}' inside it stays resident")
        widened.append(block)
    return widened


def scatter_grid_reason(name: str) -> str:
    return (f"an index vector chooses which rows of output '{name}' a program writes (a scatter), "
            "so programs run in order and the last one to write a row wins")


def with_scatter_lanes(accesses: dict[int, Access], valid_lanes: dict[int, LaneRange]) -> dict[int, Access]:
    """Attach to each scatter the range of its index vector's valid lanes (a partial
    tile's padding holds no index and writes nothing)."""
    out = {}
    for node_id, access in accesses.items():
        if access.scatter is not None and node_id in valid_lanes:
            scatter = dataclasses.replace(access.scatter, valid_lanes=valid_lanes[node_id])
            access = dataclasses.replace(access, scatter=scatter)
        out[node_id] = access
    return out


def check_scattered_output(operand: Operand, stores: list, vmem_capacity: int) -> None:
    """Reject a scattered output whose VMEM-resident window is too large for VMEM."""
    scatters = [node for node in stores if is_scatter(node)]
    if not scatters or operand.memory is not Memory.VMEM_BLOCK:
        return
    size = padded_bytes(operand.block_shape, operand.symbol.dtype)
    threshold = int(vmem_capacity * SCATTER_WINDOW_VMEM_FRACTION)
    if size > threshold:
        raise exc.VmemOverflow(
            f"'{operand.symbol.name}' is scattered into, so its scattered axis stays whole in VMEM: "
            f"{size / 2**20:.1f} MiB, which exceeds the {threshold / 2**20:.1f} MiB VMEM threshold "
            f"for scattered outputs ({SCATTER_WINDOW_VMEM_FRACTION:.0%} of the chip's "
            f"{vmem_capacity / 2**20:.0f} MiB). Scatter into a smaller tensor or split it."
            + moved_tile_hint(next(i.value for i in scatters[0].index if isinstance(i, GatherIndex))),
            scatters[0].location)
    for node in scatters:  # int32 picks by select-and-sum over a (rows, lanes, rest) array
        if _METHODS.get(node.tensor.dtype) is not GatherMethod.SELECT_SUM:
            continue
        items = [item for item in node.index if not isinstance(item, NewAxis)]
        (axis,) = [axis for axis, item in enumerate(items) if isinstance(item, GatherIndex)]
        lanes = items[axis].value.shape[0]
        block = tuple(operand.block_shape)  # the lanes sit after the scattered axis (codegen/scatters.py)
        select = padded_bytes((*block[:axis + 1], lanes, *block[axis + 1:]), operand.symbol.dtype)
        if select > threshold:
            raise exc.VmemOverflow(
                f"Scattering {lanes} lanes into int32 '{operand.symbol.name}' selects from a "
                f"{select / 2**20:.1f} MiB array (rows x lanes x the rest of the window), which exceeds "
                f"the {threshold / 2**20:.1f} MiB VMEM threshold for scatters; use a smaller block size "
                "for the index tile or tile the other axes.", node.location)


__all__ = ["is_scatter", "plan_scatter", "widened_for_scatter", "with_scatter_lanes", "check_scattered_output"]
