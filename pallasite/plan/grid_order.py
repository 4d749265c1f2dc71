"""The grid's order when the user gave none: revisited blocks walk innermost.

A written tensor whose block stays the same along grid axis g is revisited by
every step of g; the visits must be consecutive steps, so g must be inside every
axis that chooses its block (else the block is written back between visits and
the next visit starts from a stale buffer). The plan builds each call in the
user's order (`loop_orders`) or the source order; when a written block breaks
the rule and the user gave no order, it plans again with the axes that block
keeps moved innermost (their order among themselves kept), and
`PallasCallPlan.grid_order_reason` says why: a per-segment `hl.grid([n, H])`
storing `out[tile_q, h, :]` walks heads outer and segments inner.

Reordering changes which program runs when, never which one writes an element
last: every written block's index map moves with each axis it uses (distinct
steps choose distinct blocks: `moves_with_its_axes`), so programs writing one
element share those axes and differ only along the moved ones, whose order is
kept. A store whose elements do not depend on a moved axis at all (`out[tn]` in
a loop over `[tm, tn]`: every row tile overwrites the same columns) is left to
the error: that kernel keeps only its last tile's values, which is rarely what
its author meant. An atomic is meant so (`hl.atomic_add(out, [j, :], v)` over
`[i, j]` adds every i into row j): its block's kept axes move innermost.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from .. import exc
from ..ir import DeviceLoopCall, GatherIndex, Load, ScalarIndex, ShiftedTile, TileDim, TileSlice, Value
from .index_expr import Binary, BinaryOp, Const, GridIndex
from .plans import Memory, Operand, PallasCallPlan


class RevisitedBlock(exc.UnsupportedOperation):
    """A written block stays the same along grid axes that are not innermost."""

    def __init__(self, message: str, location, operand: Operand, unused: list[int], stores: list,
                 reorderable: bool):
        super().__init__(message, location)
        self.operand, self.unused, self.stores, self.reorderable = operand, unused, stores, reorderable


def plan_in_order(call: DeviceLoopCall, user_order, plan_with: Callable[[tuple[int, ...]], PallasCallPlan]
                  ) -> PallasCallPlan:
    """`plan_with(order)` in the user's order, else the source order, else (a revisited
    block, no user order) with the block's kept axes innermost."""
    source = tuple(range(len(call.loop.dims)))
    try:
        return plan_with(tuple(user_order) if user_order is not None else source)
    except RevisitedBlock as err:
        first = err
    dims = call.loop.dims
    moved = [dims[axis] for axis in first.unused]  # source order: grid axis a walks dim a
    if user_order is not None or not first.reorderable or not all(
            _keeps_last_writer(store, moved, dims) for store in first.stores if not store.kwargs.get("atomic")):
        raise first
    order = tuple([axis for axis in source if axis not in first.unused] + first.unused)
    try:
        plan = plan_with(order)
    except RevisitedBlock:
        raise first from None
    if plan.worklist is not None or not all(moves_with_its_axes(op) for op in plan.outputs):
        raise first
    names = ", ".join(f"'{dims[axis].name}'" for axis in first.unused)
    return dataclasses.replace(plan, grid_order_reason=(
        f"'{first.operand.symbol.name}' is written and keeps one block along {names}: its revisits "
        f"must be consecutive steps, so the grid walks {names} innermost "
        f"(order: {', '.join(dims[axis].name for axis in order)})"))


def moves_with_its_axes(operand: Operand) -> bool:
    """Each block index of a VMEM operand is a constant, or one grid index plus a constant
    (distinct steps of that axis choose distinct blocks)."""
    if operand.memory is not Memory.VMEM_BLOCK:
        return True
    for block in operand.axes:
        index = block.index
        if isinstance(index, Binary) and index.op is BinaryOp.ADD and isinstance(index.right, Const):
            index = index.left
        if not isinstance(index, (Const, GridIndex)) or block.prefetch:
            return False
    return True


def _keeps_last_writer(store, moved: list, dims) -> bool:
    """Whether each element `store` writes keeps its last writer when the grid walks `moved`
    innermost: the store varies along each moved dim (no element is written twice along it),
    or each of its index items depends on one grid dim at most, so the steps writing an element
    form a box, whose last step is the same in every order (`out[0, tn] = x[tm.end - 1, tn]`:
    the last tm's row, as torch leaves it)."""
    if all(_varies_along(store, dim) for dim in moved):
        return True
    return all(sum(_item_depends(item, dim, set()) for dim in dims) <= 1 for item in store.index)


def _varies_along(store, dim: TileDim) -> bool:
    """Whether some index item of `store` depends on the grid dim `dim` (the store's
    elements move with it): the tile itself, a scalar computed from it, or an inner
    tile whose bounds are (`hl.tile(offsets[seq], offsets[seq + 1])`)."""
    return any(_item_depends(item, dim, set()) for item in store.index)


def _item_depends(item, dim: TileDim, seen: set[int]) -> bool:
    if isinstance(item, (TileSlice, ShiftedTile)):
        return item.dim is dim or _depends(item.dim.begin, dim, seen) or _depends(item.dim.end, dim, seen)
    if isinstance(item, ScalarIndex):
        return _depends(item.index, dim, seen)
    if isinstance(item, GatherIndex):  # a scatter's rows (`c * chunk + tile_m.index`) move with its tiles
        return _depends(item.value, dim, seen)
    return False


def _depends(operand, dim: TileDim, seen: set[int]) -> bool:
    if isinstance(operand, (tuple, list)):
        return any(_depends(item, dim, seen) for item in operand)
    if not isinstance(operand, Value) or operand.producer is None or operand.id in seen:
        return False
    seen.add(operand.id)
    node = operand.producer
    if isinstance(node, Load):
        return any(_item_depends(item, dim, seen) for item in node.index)
    if any(arg is dim for arg in node.args):
        return True
    return any(_depends(arg, dim, seen) for arg in (*node.args, *node.kwargs.values()))
