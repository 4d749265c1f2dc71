"""Where each tensor of a device loop lives, and how each access reads it.

Decides, per tensor: SMEM (small, read only at scalar indices) or a VMEM
block per grid step (BlockSpec), the block shape and index map per axis, and
whether the tensor is an input, a pure output, or updated in place (aliased).
Decides, per Load/Store, the subscript of the kernel ref.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import exc
from ..ir import (
    DeviceLoopCall, FullSlice, Load, NewAxis, ScalarIndex, Store, TensorSymbol, TileSlice,
    Value, walk_nodes,
)
from .grid_exprs import NotAGridExpression, grid_expression
from .plans import Access, AxisBlock, InnerTileSlice, Operand
from .tpu_tiling import AxisRule

SMEM_MAX_ELEMENTS = 16384
_SMEM_DTYPES = (torch.int32, torch.float32)


@dataclass
class TensorUse:
    """Every access of one tensor in one device loop."""

    symbol: TensorSymbol
    loads: list[Load]
    stores: list[Store]

    @property
    def nodes(self) -> list:
        return [*self.loads, *self.stores]


def collect_uses(call: DeviceLoopCall) -> list[TensorUse]:
    uses: dict[int, TensorUse] = {}
    for node in walk_nodes(call.loop.body):
        if isinstance(node, (Load, Store)):
            use = uses.setdefault(node.tensor.id, TensorUse(node.tensor, [], []))
            (use.loads if isinstance(node, Load) else use.stores).append(node)
    return list(uses.values())


def _tensor_items(index) -> list:
    """The index items that consume a tensor axis (NewAxis does not)."""
    return [item for item in index if not isinstance(item, NewAxis)]


def plan_operand(use: TensorUse, grid_axis_of: dict[int, int]) -> tuple[Operand, frozenset[int]]:
    """The operand (memory, block per axis) of one tensor, and the grid axes its index map uses."""
    symbol = use.symbol
    rank = len(symbol.shape)
    per_axis = [[_tensor_items(n.index)[axis] for n in use.nodes] for axis in range(rank)]
    scalar_only = all(isinstance(i, ScalarIndex) for items in per_axis for i in items)
    numel = 1
    for s in symbol.shape:
        numel *= s
    if scalar_only and numel <= SMEM_MAX_ELEMENTS and symbol.dtype in _SMEM_DTYPES:
        return Operand(symbol, f"{symbol.name}_ref", "smem"), frozenset()
    axes = []
    used: set[int] = set()
    view_shape = None
    for axis, items in enumerate(per_axis):
        block = _axis_block(symbol, axis, items, grid_axis_of, written=bool(use.stores))
        axes.append(block)
        if block.kind in ("tile", "squeezed"):
            used |= _expr_axes(block, grid_axis_of, items)
        if block.kind == "squeezed" and axis == rank - 2:
            # Each program owns one row: a unit axis after it makes the row a leading
            # axis of the call's view, which Mosaic can squeeze.
            axes.append(AxisBlock("unit", 1, "0"))
            view_shape = (*symbol.shape[:axis + 1], 1, *symbol.shape[axis + 1:])
    operand = Operand(symbol, f"{symbol.name}_ref", "vmem_block", tuple(axes), view_shape=view_shape)
    return operand, frozenset(used)


def _expr_axes(block: AxisBlock, grid_axis_of, items) -> set[int]:
    if block.kind == "tile":
        return {grid_axis_of[block.dim.id]}
    return set(grid_expression(items[0].index, grid_axis_of).axes)


def _axis_block(symbol: TensorSymbol, axis: int, items: list, grid_axis_of, written: bool) -> AxisBlock:
    size = symbol.shape[axis]
    rank = len(symbol.shape)
    first = items[0]
    inner = [i.dim for i in items if isinstance(i, TileSlice) and i.dim.id not in grid_axis_of]
    if len(inner) == len(items):  # only inner tiles (possibly of sibling loops) read this axis
        rule = AxisRule(symbol.name, axis, rank, size, symbol.dtype)
        length = max(_resident_length(dim, size, rule) for dim in inner)
        return AxisBlock("resident", length, "0", first.dim)
    if isinstance(first, TileSlice) and all(
        isinstance(i, TileSlice) and i.dim is first.dim for i in items
    ):
        dim = first.dim
        if dim.id in grid_axis_of and isinstance(dim.begin, int) and dim.begin % dim.block_size == 0:
            offset = dim.begin // dim.block_size
            grid_axis = grid_axis_of[dim.id]
            expr = f"i{grid_axis}" if offset == 0 else f"i{grid_axis} + {offset}"
            return AxisBlock("tile", dim.block_size, expr, dim)
        raise exc.IndexingError(
            f"'{symbol.name}' axis {axis} is indexed by tile '{dim.name}' whose begin "
            f"{dim.begin} is not a multiple of its block size {dim.block_size}; "
            "use a block size that divides the begin."
        )
    reason = ""
    if isinstance(first, ScalarIndex) and all(isinstance(i, ScalarIndex) for i in items):
        try:
            exprs = {grid_expression(i.index, grid_axis_of) for i in items}
        except NotAGridExpression as err:
            exprs, reason = set(), f"its index ({err}) is not computed from grid indices"
        if len(exprs) > 1:
            reason = "it is indexed at several scalar positions"
        elif exprs and axis == rank - 1:
            reason = "a TPU block cannot select one position of a tensor's last dim"
        elif exprs and axis == rank - 2 and not written:
            reason = "a read-only row stays in the whole-axis block"
        elif exprs:  # one block per step, chosen by the index map (prefetching data it reads)
            expr = exprs.pop()
            return AxisBlock("squeezed", 1, expr.text, prefetch=expr.prefetch)
    for item in items:
        if isinstance(item, TileSlice):
            raise exc.IndexingError(
                f"'{symbol.name}' axis {axis} is indexed both by tile '{item.dim.name}' and "
                "by ':' / a scalar / another tile in the same loop; index it one way."
            )
    return AxisBlock("full", size, "0", reason=reason)


def _resident_length(dim, array_dim: int, rule: AxisRule) -> int:
    """The block length that holds every inner tile of `dim` read as `pl.ds(begin, block)`.

    It starts at element 0 and must reach the end of the last tile, which may
    lie past the array (Pallas pads that part of the block; masks hide it).
    """
    block = dim.block_size
    if isinstance(dim.begin, int) and isinstance(dim.end, int):
        trips = -(-(dim.end - dim.begin) // block)
        needed = max(dim.begin + trips * block, 1)
    else:  # a data-dependent range may start anywhere in the array
        needed = array_dim + block - 1
    if needed <= array_dim:
        return array_dim
    length = needed
    while not rule.allows(length):
        length += 1
    return length


def tiling_rules(operand: Operand) -> list[tuple[AxisBlock, AxisRule]]:
    symbol = operand.symbol
    shape = operand.call_shape
    return [(block, AxisRule(symbol.name, axis, len(shape), shape[axis], symbol.dtype))
            for axis, block in enumerate(operand.axes)]


def check_block_legality(operand: Operand) -> None:
    if operand.memory != "vmem_block":
        return
    for block, rule in tiling_rules(operand):
        size = 1 if block.kind == "squeezed" else block.size
        if block.kind == "squeezed" and rule.kind in ("free",):
            continue
        if not rule.allows(size):
            which = f"tile '{block.dim.name}'" if block.dim is not None else "this axis"
            slot = (
                f" (block_sizes[{block.dim.block_id}])" if block.dim is not None and block.dim.block_id is not None else ""
            )
            raise exc.IllegalBlockSize(
                f"Block size {size} for {which}{slot} is not legal on TPU: {rule.describe()}."
            )


def plan_access(node, operand: Operand) -> Access:
    """The ref subscript of one Load/Store of `operand`."""
    ref_index: list = []
    items = _tensor_items(node.index)
    store_masks = []
    if operand.memory == "smem":
        ref_index = [item.index for item in items]
    else:
        remaining = iter(enumerate(items))
        for block in operand.axes:
            if block.kind == "unit":  # exists only in the call's view
                ref_index.append(":")
                continue
            axis, item = next(remaining)
            if block.kind == "squeezed":
                continue
            if block.kind in ("tile", "resident"):
                dim = item.dim
                ref_index.append(":" if block.kind == "tile" else InnerTileSlice(dim))
                if isinstance(node, Store) and dim.has_partial_tail and _ends_inside(dim, operand.symbol.shape[axis]):
                    store_masks.append((_kept_axes(ref_index) - 1, dim))
            elif isinstance(item, FullSlice):
                ref_index.append(":")
            else:
                ref_index.append(item.index)
    ref_shape = _ref_shape(operand, ref_index)
    value_shape = node.outputs[0].shape if isinstance(node, Load) else ref_shape
    if all(isinstance(i, str) and i == ":" for i in ref_index):
        ref_index = ["..."]
    return Access(operand.ref_name, tuple(ref_index), ref_shape, tuple(value_shape), tuple(store_masks))


def _ref_shape(operand: Operand, ref_index: list) -> tuple[int, ...]:
    if operand.memory == "smem":
        return ()
    block = [a.size for a in operand.axes if a.kind != "squeezed"]
    shape = []
    for size, item in zip(block, ref_index):
        if isinstance(item, InnerTileSlice):
            shape.append(item.dim.block_size)
        elif item == ":":
            shape.append(size)
    return tuple(shape)


def _kept_axes(ref_index: list) -> int:
    return sum(1 for r in ref_index if isinstance(r, InnerTileSlice) or r == ":")


def _ends_inside(dim, axis_size: int) -> bool:
    return not isinstance(dim.end, int) or dim.end < axis_size


__all__ = [
    "TensorUse", "collect_uses", "plan_operand", "plan_access", "check_block_legality",
    "tiling_rules", "Value",
]
