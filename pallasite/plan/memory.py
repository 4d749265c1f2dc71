"""Where each tensor of a device loop lives, and how each access reads it.

Decides, per tensor: SMEM (small, read only at scalar indices) or a VMEM
block per grid step (BlockSpec), the block shape and index map per axis, and
whether the tensor is an input, a pure output, or updated in place (aliased).
Decides, per Load/Store, the subscript of the kernel ref.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch

from .. import exc
from ..ir import (
    DeviceLoopCall, FullSlice, GatherIndex, Load, NewAxis, RemoteCopy, ScalarIndex, ShiftedTile, StaticSlice, Store,
    TensorSymbol, TileSlice,
    Value, cdiv, guarded_node_ids, walk_nodes,
)
from .bounds import proven_inside
from .remote_copies import synthetic_accesses
from ..ir.sizes import SymbolicSize
from .gathers import plan_gather
from .scatters import is_scatter, plan_scatter, widened_for_scatter
from .grid_exprs import NotAGridExpression, clamped_tile_block, distinguishing_axes, grid_expression
from .index_expr import (
    ZERO, BinaryOp, Const, GridIndex, IndexExpr, binary, distinct_per_step, evaluate_grid, grid_axes, prefetched,
)
from .plans import (
    Access, AxisBlock, BlockKind, InnerTileSlice, Memory, Operand, PrefixSlice, RefOffset, StoreMask, TileRange,
)
from .access_plans import GroupRow, TileShift, tile_lead
from .tpu_tiling import SMEM_MAX_ELEMENTS, AxisRule, sublane_tile

_SMEM_DTYPES = (torch.int32, torch.float32)


@dataclass
class TensorUse:
    """Every access of one tensor in one device loop."""

    symbol: TensorSymbol
    loads: list[Load]
    stores: list[Store]
    guarded: frozenset[int] = frozenset()  # the accesses a device `if` encloses (ir guarded_node_ids)

    @property
    def nodes(self) -> list:
        return [*self.loads, *self.stores]


def collect_uses(call: DeviceLoopCall) -> list[TensorUse]:
    uses: dict[int, TensorUse] = {}
    guarded = guarded_node_ids(call.loop.body)
    for node in walk_nodes(call.loop.body):
        # a remote copy reads its whole source and writes its whole destination (plan/remote_copies.py)
        for access in synthetic_accesses(node) if isinstance(node, RemoteCopy) else (node,):
            if isinstance(access, (Load, Store)):
                use = uses.setdefault(access.tensor.id, TensorUse(access.tensor, [], []))
                (use.loads if isinstance(access, Load) else use.stores).append(access)
                if node.id in guarded:
                    use.guarded |= {access.id}
    return list(uses.values())


def _tensor_items(index) -> list:
    """The index items that consume a tensor axis (NewAxis does not)."""
    return [item for item in index if not isinstance(item, NewAxis)]


def plan_operand(use: TensorUse, grid_axis_of: dict[int, int], grid_trips: dict[int, int | None]
                 ) -> tuple[Operand, frozenset[int]]:
    """The operand (memory, block per axis) of one tensor, and the grid axes its index map uses
    (`grid_trips`: each grid axis's step count, None where it is not known when planning)."""
    symbol = use.symbol
    rank = len(symbol.shape)
    per_axis = [[_tensor_items(n.index)[axis] for n in use.nodes] for axis in range(rank)]
    scalar_only = all(isinstance(i, ScalarIndex) for items in per_axis for i in items)
    numel = 1
    for s in symbol.shape:
        numel *= s
    # An empty tensor goes to the call as one padding element per empty dim, so no
    # block is empty; nothing reads it (every loop over its elements runs zero times).
    array_shape = tuple(max(d, 1) for d in symbol.shape)
    padded = array_shape if array_shape != tuple(symbol.shape) else None
    if scalar_only and numel <= SMEM_MAX_ELEMENTS and symbol.dtype in _SMEM_DTYPES:
        return Operand(symbol, f"{symbol.name}_ref", Memory.SMEM, padded_shape=padded), frozenset()
    if rank == 0:  # a 0-d block: interpret mode runs it, Mosaic takes blocks of rank >= 1 only
        dtype = str(symbol.dtype).removeprefix("torch.")
        raise exc.UnsupportedDtype(
            f"'{symbol.name}' is a 0-d {dtype} tensor: a TPU kernel reads a 0-d tensor as a scalar, which "
            f"must be 32-bit (int32 or float32). Pass {symbol.name}.float() (or .int()) and cast it back "
            f"where it is used ({symbol.name}.to(torch.{dtype})).", use.nodes[0].location if use.nodes else None)
    axes = []
    used: set[int] = set()
    view_shape = None
    blocks = [_axis_block(symbol, axis, array_shape[axis], items, grid_axis_of, written=bool(use.stores),
                          guarded=_guarded_outside(use, axis, symbol.shape[axis]))
              for axis, items in enumerate(per_axis)]
    if use.stores:
        blocks = _distinct_written_rows(use, blocks, array_shape, grid_axis_of, grid_trips)
        blocks = _resident_inside_revisits(symbol, blocks, array_shape, grid_axis_of)
    if any(is_scatter(node) or node.kwargs.get("atomic") for node in use.stores):
        blocks = widened_for_scatter(symbol, blocks, grid_axis_of, lambda dim, size, axis: _resident_length(
            dim, size, AxisRule(symbol.name, axis, rank, size, symbol.dtype)))
    for axis, block in enumerate(blocks):
        axes.append(block)
        used |= distinguishing_axes(block, grid_axis_of)
        if block.kind is BlockKind.SQUEEZED and axis == rank - 2:
            # Each program owns one row: a unit axis after it makes the row a leading
            # axis of the call's view, which Mosaic can squeeze (of the padded array,
            # for an empty tensor). The unit axis is the view's second-to-last dim and
            # the array's dim there is 1, so it is squeezed as well (AxisBlock.squeezed):
            # the kernel ref is the row, with no (1, n) block to broadcast into.
            axes.append(AxisBlock(BlockKind.UNIT, 1, ZERO))
            view_shape = (*array_shape[:axis + 1], 1, *array_shape[axis + 1:])
    operand = Operand(symbol, f"{symbol.name}_ref", Memory.VMEM_BLOCK, tuple(axes), padded, view_shape)
    return operand, frozenset(used)


def _guarded_outside(use: TensorUse, axis: int, size) -> bool:
    """Whether an access a device `if` encloses indexes `axis` by a scalar not known to lie in
    [0, size) (read from data, or `g - 1` under `if g > 0`): at a step whose condition is
    false it may lie outside the tensor, where no block may be chosen."""
    for node in use.nodes:
        if node.id in use.guarded:
            item = _tensor_items(node.index)[axis]
            if isinstance(item, ScalarIndex) and isinstance(item.index, Value) and not proven_inside(item.index, size):
                return True
    return False


def _inside(expr, size) -> IndexExpr:
    """`expr` clamped into [0, size): the block a guarded access's index map chooses at a step
    whose `if` is false (nothing reads it there) must still lie in the tensor."""
    return binary(BinaryOp.MIN, binary(BinaryOp.MAX, expr, ZERO), Const(size - 1))


def _axis_block(symbol: TensorSymbol, axis: int, size: int, items: list, grid_axis_of, written: bool,
                guarded: bool = False) -> AxisBlock:
    """The block of one axis of `symbol` from the index items of its accesses; `guarded`: a
    scalar index of an access under a device `if` may lie outside the axis (_guarded_outside)."""
    rank = len(symbol.shape)
    first = items[0]
    if any(isinstance(i, GatherIndex) for i in items):
        return _gathered_axis_block(symbol, axis, size, items)
    if any(isinstance(i, ShiftedTile) for i in items):
        return _shifted_axis_block(symbol, axis, size, items)
    inner = [i.dim for i in items if isinstance(i, TileSlice) and i.dim.id not in grid_axis_of]
    if len(inner) == len(items):  # only inner tiles (possibly of sibling loops) read this axis
        rule = AxisRule(symbol.name, axis, rank, size, symbol.dtype)
        length = max(_resident_length(dim, size, rule) for dim in inner)
        return AxisBlock(BlockKind.RESIDENT, length, ZERO, first.dim)
    if isinstance(first, TileSlice) and all(
        isinstance(i, TileSlice) and i.dim is first.dim for i in items
    ):
        dim = first.dim
        rule = AxisRule(symbol.name, axis, rank, size, symbol.dtype)
        if dim.begin_aligned and rule.allows(dim.block_size):
            if isinstance(dim.begin, Value) or isinstance(dim.end, Value):  # a folded range of the outer tiles
                index = clamped_tile_block(dim, grid_axis_of, cdiv(size, dim.block_size))
            else:
                index = binary(BinaryOp.ADD, GridIndex(grid_axis_of[dim.id]), Const(dim.begin // dim.block_size))
            return AxisBlock(BlockKind.TILE, dim.block_size, index, dim)
        why = (f"its begin {dim.begin} is not a multiple of its block size {dim.block_size}"
               if not dim.begin_aligned else
               f"a block of {dim.block_size} is not a legal TPU block here ({rule.describe()})")
        return AxisBlock(BlockKind.RESIDENT, _resident_length(dim, size, rule), ZERO, dim,
                         reason=f"tile '{dim.name}': {why}; the axis stays resident and each tile "
                                "is read and written at its offset")
    reason = ""
    windows = sorted({(i.start, i.stop) for i in items if isinstance(i, StaticSlice)})
    if windows and not any(isinstance(i, TileSlice) for i in items):
        # a static window is read out of the whole axis (a static sub-view of the block): a
        # block of just the window would have to be a legal TPU block at a block-multiple start
        spans = ", ".join(f"[{a}, {b})" for a, b in windows)
        return AxisBlock(BlockKind.FULL, size, ZERO,
                         reason=f"the static slice{'s' if len(windows) > 1 else ''} {spans} of it "
                                f"{'are' if len(windows) > 1 else 'is'} read from the whole axis")
    if isinstance(first, ScalarIndex) and all(isinstance(i, ScalarIndex) for i in items):
        try:
            exprs = {grid_expression(i.index, grid_axis_of) for i in items}
        except NotAGridExpression as err:
            exprs, reason = set(), f"its index ({err}) is not computed from grid indices"
        if len(exprs) > 1:
            reason = "it is indexed at several scalar positions"
        elif exprs and axis == rank - 1:
            reason = "a TPU block cannot select one position of a tensor's last dim"
        elif exprs and guarded and written:
            reason = ("a row written under a device `if` may lie outside the tensor where the condition is "
                      "false, and a block per step would be written back there too")
        elif exprs and axis == rank - 2 and not written:
            return _row_group_block(symbol, axis, size, _inside(exprs.pop(), size) if guarded else exprs.pop())
        elif exprs:  # one block per step, chosen by the index map (prefetching data it reads)
            return AxisBlock(BlockKind.SQUEEZED, 1, _inside(exprs.pop(), size) if guarded else exprs.pop())
    tiles = [item.dim for item in items if isinstance(item, TileSlice)]
    if tiles:  # several forms: one block from element 0 holds every access's part
        rule = AxisRule(symbol.name, axis, rank, size, symbol.dtype)
        length = max(_resident_length(dim, size, rule) for dim in tiles)
        return AxisBlock(BlockKind.RESIDENT, length, ZERO, tiles[0],
                         reason=f"it is indexed several ways ({_forms(items)}) in one loop")
    return AxisBlock(BlockKind.FULL, size, ZERO, reason=reason)


def _row_group_block(symbol: TensorSymbol, axis: int, size: int, row) -> AxisBlock:
    """A read-only row chosen by the index map on the second-to-last axis: Mosaic cannot
    squeeze that axis (and a view with a unit axis after the row would make XLA copy the
    whole tensor into that layout), so the block is the group of rows of the dtype's
    sublane tile holding the row, and the kernel reads the row out of it (`GroupRow`).
    A tensor no longer than one group stays whole."""
    group = sublane_tile(symbol.dtype)
    if isinstance(size, SymbolicSize):
        return AxisBlock(BlockKind.FULL, size, ZERO,
                         reason="a read-only row stays in the whole-axis block under static_shapes=False (a group "
                                f"of {group} rows is a block only where the axis is known to be longer)")
    if size <= group:
        return AxisBlock(BlockKind.FULL, size, ZERO,
                         reason=f"a read-only row of an axis no longer than a group of {group} rows stays whole")
    return AxisBlock(BlockKind.ROW_GROUP, group, binary(BinaryOp.FLOORDIV, row, Const(group)), row=row)


def _shifted_axis_block(symbol: TensorSymbol, axis: int, size: int, items: list) -> AxisBlock:
    """An axis read at `tile + c` is resident from element 0, long enough for the aligned runs
    every shifted read takes (`TileShift`) and every tile's run: a shifted tile's lanes straddle
    two blocks of the tensor, which no BlockSpec index map names."""
    rule = AxisRule(symbol.name, axis, len(symbol.shape), size, symbol.dtype)
    needed = 1
    for item in items:
        if isinstance(item, ShiftedTile):
            dim, block = item.dim, item.dim.block_size
            lead = tile_lead(dim)
            last_run = dim.begin - lead + (dim.static_trips - 1) * block  # the block multiple it starts in
            runs = 1 if (lead + item.offset) % block == 0 else 2
            needed = max(needed, last_run + ((lead + item.offset) // block + runs) * block, block)
        elif isinstance(item, TileSlice):
            needed = max(needed, _resident_length(item.dim, size, rule))
    length = size if needed <= size else rule.round_up(needed)
    tiles = [item for item in items if isinstance(item, (TileSlice, ShiftedTile))]
    return AxisBlock(BlockKind.RESIDENT, length, ZERO, tiles[0].dim,
                     reason=f"it is read at shifted tiles ({_forms(items)}), whose lanes straddle two blocks")


def _gathered_axis_block(symbol: TensorSymbol, axis: int, size: int, items: list) -> AxisBlock:
    """An axis an index vector gathers is whole in VMEM (any row may be picked); when
    tiles index it too, it is resident, long enough for every tile's run."""
    reason = "an index vector gathers or scatters along it, so the whole axis stays in VMEM"
    tiles = [item.dim for item in items if isinstance(item, TileSlice)]
    if not tiles:
        return AxisBlock(BlockKind.FULL, size, ZERO, reason=reason)
    rule = AxisRule(symbol.name, axis, len(symbol.shape), size, symbol.dtype)
    length = max(_resident_length(dim, size, rule) for dim in tiles)
    return AxisBlock(BlockKind.RESIDENT, length, ZERO, tiles[0], reason=f"{reason} ({_forms(items)})")


def _distinct_written_rows(use: TensorUse, blocks: list[AxisBlock], shape, grid_axis_of,
                           grid_trips: dict[int, int | None]) -> list[AxisBlock]:
    """A written tensor's rows chosen by the index map should tell apart the steps of the grid
    axes they read (`out[bh // h, bh % h]` does, jointly): the block is then revisited only
    along the axes it does not read, which plan/grid_order.py walks innermost. `out[g % 3]`,
    `out[tile.id % 2]` or `out[seg[g]]` choose one block at steps that need not be
    consecutive. Where every visit writes the whole block (plain stores of grid tiles and
    whole axes), the block stays one per step and `repeats`: the steps run in order and the
    last writer wins. Where a visit reads the block or writes part of it (an update, an
    atomic, a masked or inner-tile store), the block written back between visits would lose
    the earlier visit's writes, so that axis stays whole in VMEM."""
    repeating = [block.kind is BlockKind.SQUEEZED and not distinct_per_step(block.index) for block in blocks]
    if not any(repeating) or _jointly_distinct(blocks, grid_trips):
        return blocks
    if _whole_block_writes(use, grid_axis_of):
        return [dataclasses.replace(block, repeats=True) if repeats else block
                for block, repeats in zip(blocks, repeating)]
    reason = ("a row is read or partly written at steps that need not be consecutive (its index may choose it "
              "again later), so the whole axis stays in VMEM and those steps run in order")
    return [AxisBlock(BlockKind.FULL, shape[axis], ZERO, reason=reason) if repeats else block
            for axis, (block, repeats) in enumerate(zip(blocks, repeating))]


def _whole_block_writes(use: TensorUse, grid_axis_of) -> bool:
    """Whether each step only stores, plainly, whole blocks: no load of the tensor, no scatter,
    atomic, masked store or store under a device `if` (a step that stores nothing would write
    its block back too), every index item a scalar, ':' or a grid tile."""
    return not use.loads and all(
        node.id not in use.guarded and len(node.args) < 2 and not is_scatter(node)
        and not node.kwargs.get("atomic") and all(
            isinstance(item, (ScalarIndex, FullSlice)) or (isinstance(item, TileSlice) and item.dim.id in grid_axis_of)
            for item in _tensor_items(node.index))
        for node in use.stores)


def _jointly_distinct(blocks: list[AxisBlock], grid_trips: dict[int, int | None], limit: int = 1 << 20) -> bool:
    """Whether the block indices together take a different value at every step of the grid axes
    they read, evaluated over those axes (a grid known when planning, no data read)."""
    indices = [block.index for block in blocks if grid_axes(block.index)]
    axes = frozenset().union(*(grid_axes(index) for index in indices))
    if not axes:  # one block for every step (a row no grid index chooses): revisited by each in turn
        return True
    trips = [grid_trips.get(axis) for axis in sorted(axes)]
    if any(prefetched(index) for index in indices) or any(
            not isinstance(t, int) or isinstance(t, SymbolicSize) for t in trips) or math.prod(trips) > limit:
        return False
    grid = tuple(grid_trips[axis] if axis in axes else 1 for axis in range(max(axes) + 1))
    values = np.stack([evaluate_grid(index, grid).reshape(-1) for index in indices], axis=1)
    return len(np.unique(values, axis=0)) == math.prod(trips)


def _resident_inside_revisits(symbol: TensorSymbol, blocks: list[AxisBlock], shape, grid_axis_of) -> list[AxisBlock]:
    """A written tensor whose block stays the same along grid axis g (a tile of g kept
    resident) is revisited by every step of g; its block must not change along the
    grid axes inside g between visits, so their tiles stay resident too."""
    kept = [grid_axis_of[b.dim.id] for b in blocks
            if b.kind is BlockKind.RESIDENT and b.dim is not None and b.dim.id in grid_axis_of]
    if not kept:
        return blocks
    outer = min(kept)
    widened = []
    for axis, block in enumerate(blocks):
        if block.kind is BlockKind.TILE and grid_axis_of[block.dim.id] > outer:
            rule = AxisRule(symbol.name, axis, len(shape), shape[axis], symbol.dtype)
            block = AxisBlock(BlockKind.RESIDENT, _resident_length(block.dim, shape[axis], rule), ZERO,
                              block.dim, reason=f"'{symbol.name}' is written and stays one block along "
                              f"grid axis {outer} (an outer tile kept resident), so tile "
                              f"'{block.dim.name}' inside it stays resident too")
        widened.append(block)
    return widened


def _forms(items: list) -> str:
    forms = []
    for item in items:
        form = f"tile '{item.dim.name}'" if isinstance(item, TileSlice) else (
            item.text() if isinstance(item, ShiftedTile) else
            "':'" if isinstance(item, FullSlice) else
            "an index vector" if isinstance(item, GatherIndex) else
            f"the static slice {item.start}:{item.stop}" if isinstance(item, StaticSlice) else "a scalar")
        if form not in forms:
            forms.append(form)
    return ", ".join(forms)


def _resident_length(dim, array_dim: int, rule: AxisRule) -> int:
    """The block length that holds every inner tile of `dim` read as `pl.ds(begin, block)`.

    It starts at element 0 and must reach the end of the last tile, which may
    lie past the array (Pallas pads that part of the block; masks hide it).
    """
    block = dim.block_size
    if isinstance(dim.begin, int) and isinstance(dim.end, int):
        needed = max(dim.begin + dim.static_trips * block, 1)
    else:  # a data-dependent range may start anywhere in the array
        needed = array_dim + block - 1
    # A dynamic size (static_shapes=False) keeps the block that reaches past the last tile:
    # asking whether it fits the array would tie the variant to sizes on one side.
    if not isinstance(needed, SymbolicSize) and needed <= array_dim:
        return array_dim
    return rule.round_up(needed)


def tiling_rules(operand: Operand) -> list[tuple[AxisBlock, AxisRule]]:
    symbol = operand.symbol
    shape = operand.call_shape
    return [(block, AxisRule(symbol.name, axis, len(shape), shape[axis], symbol.dtype))
            for axis, block in enumerate(operand.axes)]


def check_block_legality(operand: Operand) -> None:
    if operand.memory is not Memory.VMEM_BLOCK:
        return
    for block, rule in tiling_rules(operand):
        size = 1 if block.kind is BlockKind.SQUEEZED else block.size
        if block.kind is BlockKind.SQUEEZED and rule.kind == "free":
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
    """The ref subscript of one Load/Store of `operand`: one `RefItem` per ref axis."""
    items = _tensor_items(node.index)
    if operand.memory is Memory.SMEM:
        value_shape = node.outputs[0].shape if isinstance(node, Load) else ()
        return Access(operand.ref_name, tuple(ScalarIndex(item.index) for item in items), (), tuple(value_shape))
    ref_index: list = []
    ref_shape: list[int] = []
    store_masks = []
    notes: list[str] = []
    gather = scatter = None
    shifts = []
    remaining = iter(enumerate(items))
    result_axis: dict[int, int] = {}  # tensor axis -> its axis of ref[ref_index]
    for block in operand.axes:
        if block.kind is BlockKind.UNIT:  # exists only in the call's view, squeezed from the ref
            continue
        axis, item = next(remaining)
        if block.squeezed:
            continue
        if block.kind is BlockKind.ROW_GROUP:  # the chosen row of its group; the axis disappears
            ref_index.append(GroupRow(item.index, block.size))
            continue
        if not isinstance(item, ScalarIndex):
            result_axis[axis] = len(ref_shape)
        if isinstance(item, GatherIndex):  # every row; the gather picks them, the scatter rewrites them
            # an empty axis reads its one padding row (Mosaic has no empty vectors): every
            # index into it is out of range, so no valid lane picks it
            size = max(operand.symbol.shape[axis], 1)
            ref_index.append(FullSlice() if block.size == size else PrefixSlice(size))
            if isinstance(node, Store):
                scatter = plan_scatter(node, len(ref_shape), size)
            else:
                gather = plan_gather(node, len(ref_shape), size)
            ref_shape.append(size)
            continue
        if isinstance(item, ShiftedTile):  # two aligned runs, lane-selected and rotated (TileShift)
            shift = TileShift(len(ref_shape), item.dim, item.offset, operand.symbol.shape[axis], len(ref_index))
            ref_index.append(shift.run(shift.blocks))
            ref_shape.append(item.dim.block_size)
            shifts.append(shift)
            continue
        if isinstance(item, StaticSlice):  # its window of the whole (or resident) axis: a static sub-view
            ref_index.append(RefOffset((item.start,), item.size))
            ref_shape.append(item.size)
            notes.append(f"axis {axis} of '{operand.symbol.name}': the static window [{item.start}, {item.stop}) "
                         f"of its {block.size}-long block")
            continue
        if block.kind is BlockKind.RESIDENT and not isinstance(item, TileSlice):
            if isinstance(item, FullSlice):  # the tensor's part of a block that may be longer
                size = operand.symbol.shape[axis]
                ref_index.append(FullSlice() if block.size == size else PrefixSlice(size))
                ref_shape.append(size)
            else:
                ref_index.append(ScalarIndex(item.index))
            continue
        if block.kind in (BlockKind.TILE, BlockKind.RESIDENT):
            dim = item.dim
            ref_index.append(FullSlice() if block.kind is BlockKind.TILE else InnerTileSlice(dim))
            ref_shape.append(dim.block_size)
            if isinstance(node, Store) and dim.has_partial_tail and _ends_inside(dim, operand.symbol.shape[axis]):
                store_masks.append(StoreMask(len(ref_shape) - 1, TileRange(dim)))
        elif isinstance(item, FullSlice):
            ref_index.append(FullSlice())
            ref_shape.append(block.size)
        else:
            ref_index.append(ScalarIndex(item.index))
    if isinstance(node, Store) and not ref_shape and ref_index and isinstance(ref_index[-1], ScalarIndex):
        # Mosaic stores only vectors to VMEM: one element is a run of 1 at that position
        ref_index[-1] = RefOffset((ref_index[-1].index,), 1)
        ref_shape.append(1)
    value_shape = node.outputs[0].shape if isinstance(node, Load) else ref_shape
    if all(isinstance(i, FullSlice) for i in ref_index):
        ref_index = []  # the whole block
    # a gathered, scattered or shifted value is computed, not a view of the ref: narrowing
    # reads of it slice the value (plan/subviews.py)
    value_axes = (None if gather is not None or scatter is not None or shifts
                  else loaded_value_axes(node.index, result_axis))
    return Access(operand.ref_name, tuple(ref_index), tuple(ref_shape), tuple(value_shape), tuple(store_masks),
                  gather=gather, scatter=scatter, value_axes=value_axes, note="; ".join(notes), shifts=tuple(shifts))


def loaded_value_axes(index, result_axis: dict[int, int]) -> tuple[int | None, ...]:
    """Per axis of a loaded value, its axis of the read window (`Access.value_axes`), given
    each kept tensor axis's window axis."""
    out, axis = [], 0
    for item in index:
        if isinstance(item, NewAxis):
            out.append(None)
            continue
        if not isinstance(item, ScalarIndex):
            out.append(result_axis[axis])
        axis += 1
    return tuple(out)


def _ends_inside(dim, axis_size: int) -> bool:
    return not isinstance(dim.end, int) or dim.end < axis_size


__all__ = [
    "TensorUse", "collect_uses", "plan_operand", "plan_access", "check_block_legality",
    "tiling_rules", "Value",
]
