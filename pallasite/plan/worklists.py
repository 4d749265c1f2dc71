"""Flattened worklists: a grid over jagged segments becomes a grid over (segment, q-tile) items.

`for seq in hl.grid(n): for tile_q in hl.tile(offsets[seq], offsets[seq + 1])`
runs each segment's q tiles in one program: a long segment serializes, short
ones idle. `WorklistStrategy` (the mould of `plan/loops` strategies: an object
that decides whether it applies and plans its own frozen record) recognizes
that shape and plans a `Worklist`:

- the host function builds, inside the same jit, three int32 tables of
  `max_items` entries — the item's owner segment, its first q row and its row
  extent (at most `grouping` q tiles) — passed by scalar prefetch;
- the grid walks `max_items` items, a static bound (`cdiv(rows, grouping *
  block) + n`, `rows` the q tensor's length: every segment's last item is the
  only one that can be partial); items past the real count have extent 0, so
  their q loop runs no tile (and they keep the last item's owner, so no block
  index changes for them);
- the device loop is rewritten (`flatten_call`): the segment index is
  `owner[item]`, the q loop runs from `start[item]` to `start[item] +
  extent[item]`. Everything downstream (masks, strategies, bounds checks,
  codegen) sees an ordinary data-dependent q loop, so every `pallas_loop_type`
  and every dependent inner bound (`min(k_end, tile_q.end)`) works unchanged:
  `tile_q.begin`/`tile_q.end` are the real tiles' (items start at a segment's
  begin plus whole groups of tiles).

A kernel that reads `tile_q.id`/`tile_q.count` (which count from the
segment's begin, not the item's), carries values across q tiles (a
per-segment sum), stores outside the q loop, has several
loops, or bounds the q loop by something an index expression cannot rebuild
keeps the per-segment grid, and the plan records why (`Worklist` is None and
`WorklistDecision.reason` says so).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from .. import exc
from ..config import COMPACT_WORKLIST, ResolvedConfig
from ..ir import DeviceLoopCall, IfBlock, Load, Node, ScalarIndex, Store, TensorSymbol, TileDim, TileLoop, Value
from ..ir import TileSlice, cdiv, guarded_node_ids, walk_loops, walk_nodes
from .grid_exprs import NotAGridExpression, grid_expression
from .loops import loop_type_names
from .index_expr import BinaryOp, Const, IndexExpr, TableRead, binary, evaluate, prefetched
from .plans import RangeCheck
from .tpu_tiling import SMEM_MAX_ELEMENTS
from .worklist_isolation import Isolation, ItemWriteBack, decide_isolation, scratch_offset, write_backs



@dataclass(frozen=True)
class Worklist:
    """How one device loop over segments runs as a flat list of (segment, q-tile) items."""

    segments: int  # n: the hl.grid extent of the original loop
    segment_name: str  # the user's grid variable (`seq`)
    tile_dim: TileDim  # the q loop's dim (its bounds are rewritten to the item's rows)
    begin: IndexExpr  # the q range's begin per segment (GridIndex(0) = the segment)
    end: IndexExpr  # its end per segment
    rows: int  # the length of the tensors the q tiles index: items cover at most these rows
    grouping: int  # q tiles per item (`pallas_worklist_grouping`)
    max_items: int  # the grid's static bound on the item count
    owner: TensorSymbol  # owner[item]: the item's segment
    start: TensorSymbol  # start[item]: its first q row
    extent: TensorSymbol  # extent[item]: its q rows (0 for items past the real count)
    # the bounds read consecutive entries of one table, so segments are disjoint when the table
    # is non-decreasing (interpret mode checks the item count fits `max_items`)
    disjoint: bool = False
    # how stores of different items stay apart, and why (set once the grid is planned)
    store_isolation: str = ""
    # the grid's other axes (`for seq, h in hl.grid([n, H])`: heads), kept as grid axes before
    # the items (heads are `parallel` when their output blocks differ, or when each program
    # writes its head's rows by DMA), and the item axis's position after them
    heads: tuple[str, ...] = ()
    item_axis: int = 0
    # an inner static `hl.grid` around the q loop (`for h in hl.grid(H)`): every item runs it
    per_item_grid: str = ""
    # outputs each item writes by DMA of its own rows (plan/worklist_isolation.py), or why not
    isolation: Isolation = Isolation()
    write_backs: tuple[ItemWriteBack, ...] = ()
    # set by `flatten_call`: the item's first row and row count, and a q tile's row in the
    # item's scratch (`tile.begin - start`, only with write-backs)
    item_start: Any = None
    item_extent: Any = None
    row_offset: Any = None

    @property
    def rows_per_item(self) -> int:
        return self.grouping * self.tile_dim.block_size

    @property
    def tables(self) -> tuple[TensorSymbol, ...]:
        return (self.owner, self.start, self.extent)

    @property
    def end_checked(self) -> bool:
        """Whether data decides the q ranges' end, so interpret mode checks it against the rows
        (`hl.tile(g, n)` ends at n, inside them: nothing to check)."""
        return not (isinstance(self.end, Const) and 0 <= self.end.value <= self.rows)


@dataclass(frozen=True)
class WorklistDecision:
    """Whether a device loop is flattened: the `Worklist`, or why not (`reason`)."""

    worklist: Worklist | None
    reason: str = ""


FLATTEN_OFF = "pallas_flatten_worklist=False"  # the reason when only the config flag said no


def check_compact_worklist(kernel: Any, call: DeviceLoopCall, decision: WorklistDecision) -> None:
    """`pallas_loop_type="compact_worklist"` (Helion's name) asks for a loop of `call` to be
    the q loop of a flattened worklist: `exc.InvalidConfig` saying why where it is not."""
    names = loop_type_names(kernel.ir, kernel.knobs.pallas_loop_type)
    asked = [loop for loop in walk_loops(call.loop.body) if names.get(loop.id) == COMPACT_WORKLIST]
    if not asked:
        return
    flattened = decision.worklist.tile_dim.id if decision.worklist is not None else None
    if isinstance(kernel.knobs.pallas_loop_type, str) and flattened is not None:
        return  # one name for every inner loop: the q loop flattens, the loops inside it run as the default
    for loop in asked:
        if loop.dims[0].id != flattened:
            why = decision.reason if decision.worklist is None else "it is not the segment's q loop"
            raise exc.InvalidConfig(
                f"pallas_loop_type='{COMPACT_WORKLIST}' for the loop over {loop.dims[0].name}: it does not run as a "
                f"flattened worklist ({why}). A compact worklist needs `for g in hl.grid(n):` around one "
                "`for tile_q in hl.tile(offsets[g], offsets[g + 1]):` (plan/worklists.py); give this loop "
                "another loop type.", loop.location)


def check_compact_worklist_named(ir: Any, value: Any) -> None:
    """`compact_worklist` given where the kernel has no inner loop to flatten."""
    given = [value] if isinstance(value, str) else list(value or ())
    if COMPACT_WORKLIST in given and COMPACT_WORKLIST not in loop_type_names(ir, value).values():
        raise exc.InvalidConfig(f"pallas_loop_type='{COMPACT_WORKLIST}': the kernel has no q loop inside a grid "
                                "over segments to run as a flattened worklist.")


class WorklistStrategy:
    """Recognizes a grid over segments with a data-dependent q-tile loop inside, and
    plans its worklist (config: `pallas_flatten_worklist`, `pallas_worklist_grouping`)."""

    name = "flattened_worklist"

    def decide(self, call: DeviceLoopCall, config: ResolvedConfig) -> WorklistDecision:
        # The structure is checked first and the config flag last, so the reason says
        # whether flattening would have applied ("pallas_flatten_worklist=False" only then;
        # plan/knobs.py reads that to tell a used knob from an unused one).
        loop = call.loop
        if call.folded_dims:  # its grid's last axes are a folded loop's steps, whose order is fixed
            return WorklistDecision(None, "an inner loop is folded into the grid (outer_pipeline)")
        if not loop.dims or not all(dim.is_grid for dim in loop.dims):
            return WorklistDecision(None, "the device loop is not an hl.grid over segments")
        grid, heads = loop.dims[0], loop.dims[1:]
        if grid.begin != 0 or not isinstance(grid.end, int) or type(grid.end) is not int or grid.end < 1:
            return WorklistDecision(None, "the segment count is not a static positive int")
        if grid.block_size != 1:  # an item's segment number would stand for g (0, 1, 2 for g = 0, 4, 8)
            return WorklistDecision(None, f"the grid steps by {grid.block_size}: its index is no segment number")
        found = _q_loop(loop)
        if isinstance(found, str):
            return WorklistDecision(None, found)
        tile_loop, per_item, outside = found
        if len(tile_loop.dims) != 1:
            return WorklistDecision(None, "the q loop has several dims")
        tile_dim = tile_loop.dims[0]
        if tile_loop.carried:
            return WorklistDecision(None, "the q loop carries values from tile to tile (items would split them)")
        if outside:
            return WorklistDecision(None, outside)
        guarded = guarded_node_ids(tile_loop.body)
        if any(isinstance(node, Store) and node.id in guarded for node in walk_nodes(tile_loop.body)):
            return WorklistDecision(None, "a store in the q loop is under a device `if` (an item's rows are "
                                          "written back whole: rows it skips would lose their contents)")
        if not (isinstance(tile_dim.begin, Value) or isinstance(tile_dim.end, Value)):
            return WorklistDecision(None, "the q loop's bounds do not depend on the segment")
        begin_node = grid.begin_value.producer if grid.begin_value is not None else None
        for node in walk_nodes(loop.body):
            if node is not begin_node and _mentions(node, grid):
                return WorklistDecision(None, f"'{grid.name}' is used other than as a segment index")
            if node.op in ("tile_id", "tile_count") and node.args and node.args[0] is tile_dim:
                return WorklistDecision(None, f"the kernel reads {tile_dim.name}.{node.op[5:]}, which counts "
                                              "from the segment's begin")
        try:
            begin = grid_expression(tile_dim.begin, {grid.id: 0})
            end = grid_expression(tile_dim.end, {grid.id: 0})
        except NotAGridExpression as err:
            return WorklistDecision(None, f"the q loop's bounds cannot be computed on the host ({err})")
        rows = _indexed_rows(tile_loop.body, tile_dim)
        if rows is None:
            return WorklistDecision(None, f"no tensor is indexed by {tile_dim.name}")
        grouping = config.pallas_worklist_grouping
        per_segment = cdiv(rows, grouping * tile_dim.block_size)
        # Consecutive entries of one table (`offsets[g]`, `offsets[g + 1]`) cut the rows into
        # disjoint segments: at most one partial item each. Other ranges may overlap (each
        # `hl.tile(0, lengths[g])` can cover every row), so each may need `per_segment` items.
        disjoint = _consecutive_reads(begin, end)
        max_items = per_segment + grid.end if disjoint else per_segment * grid.end
        if max_items > SMEM_MAX_ELEMENTS:
            return WorklistDecision(None, f"{max_items} items do not fit a scalar-prefetch table")
        if not config.pallas_flatten_worklist:
            return WorklistDecision(None, FLATTEN_OFF)
        isolation = decide_isolation(loop.body, tile_dim, disjoint, tuple(heads))
        rows_per_item = grouping * tile_dim.block_size
        table = lambda name: TensorSymbol(name, (max_items,), torch.int32, "host_op")  # noqa: E731
        return WorklistDecision(Worklist(
            segments=grid.end, segment_name=grid.name, tile_dim=tile_dim, begin=begin, end=end, rows=rows,
            grouping=grouping, max_items=max_items, owner=table("work_owner"), start=table("work_start"),
            extent=table("work_extent"), disjoint=disjoint, heads=tuple(dim.name for dim in heads),
            item_axis=len(heads), per_item_grid=per_item, isolation=isolation,
            write_backs=write_backs(isolation, rows_per_item),
        ))


WORKLISTS = WorklistStrategy()


def _q_loop(loop: TileLoop) -> tuple[TileLoop, str, str] | str:
    """The segment body's q loop, the name of a static inner `hl.grid` (heads) it sits in
    ("" if none) and why what runs around it cannot repeat per item ("" if it can); or why
    the body is not one. Around the loops only nodes that are safe
    to repeat in every item may run: no store, no read of a tensor the loop writes (a later
    item would see an earlier one's writes), no `if`."""
    written = {id(node.tensor) for node in walk_nodes(loop.body) if isinstance(node, Store)}
    body, per_item, outside = loop.body, "", ""
    while True:
        inner = [item for item in body if isinstance(item, TileLoop)]
        if len(inner) != 1 or any(isinstance(item, IfBlock) for item in body):
            return "the segment body is not exactly one q-tile loop"
        for item in body:
            if isinstance(item, Store) and not outside:
                outside = "the segment body stores outside the q loop (it would run once per item)"
            if isinstance(item, Load) and id(item.tensor) in written and not outside:
                outside = (f"the segment body reads '{item.tensor.name}', which the loop writes, outside the "
                           "q loop (a later item would see an earlier one's writes)")
        (entry,) = inner
        dims = entry.dims
        static = all(type(dim.begin) is int and type(dim.end) is int for dim in dims)
        if per_item or not all(dim.is_grid for dim in dims):
            return entry, per_item, outside
        if not static:
            return "an inner hl.grid around the q loop has a data-dependent extent"
        if entry.carried:
            return "an inner hl.grid around the q loop carries values"
        # `for h in hl.grid(H)` around the q loop: every item runs all its heads
        body, per_item = entry.body, ", ".join(dim.name for dim in dims)


def _consecutive_reads(begin: IndexExpr, end: IndexExpr) -> bool:
    """`table[x]` and `table[x + 1]`: the q ranges of a cumulative offsets table."""
    if not (isinstance(begin, TableRead) and isinstance(end, TableRead)) or begin.symbol is not end.symbol:
        return False
    if len(begin.index) != 1 or len(end.index) != 1:
        return False
    return end.index[0] == binary(BinaryOp.ADD, begin.index[0], Const(1))


def worklist_check(worklist: Worklist, check_id: int, location) -> RangeCheck:
    """The interpret-mode check that the real items fit the grid's static bound (offsets
    that decrease, or pass the q tensor's end, would need more)."""
    return RangeCheck(
        check_id, worklist.max_items + 1,
        f"the q ranges of '{worklist.segment_name}' need {{lo}} work items, over the bound of "
        f"{worklist.max_items} the grid was planned for ({worklist.rows} rows"
        f"{', offsets non-decreasing' if worklist.disjoint else ''}): the ranges "
        f"{'overlap (decreasing offsets) or ' if worklist.disjoint else ''}pass the tensor's end; "
        "set pallas_flatten_worklist=False to run such ranges.",
        location, worklist_items=True)


def worklist_end_check(worklist: Worklist, check_id: int, location) -> RangeCheck:
    """The interpret-mode check that no segment's q range ends past the rows its tiles
    index (checked before the item count, which such offsets inflate)."""
    return RangeCheck(
        check_id, worklist.rows + 1,
        f"a q range of '{worklist.segment_name}' ends at {{lo}}, past the {worklist.rows} rows its "
        f"'{worklist.tile_dim.name}' tiles index: the offsets must not pass the tensor's end.",
        location, worklist_ends=True)


def worklist_overlap_check(worklist: Worklist, check_id: int, location) -> RangeCheck:
    """The interpret-mode check that a parallel worklist's segments are disjoint rows."""
    return RangeCheck(
        check_id, 1,
        f"{{lo}} segment(s) of '{worklist.segment_name}' end before they begin (decreasing offsets): "
        "rows of two work items would overlap, and the items write their own rows in parallel; make the "
        "offsets non-decreasing, or set pallas_flatten_worklist=False to run such ranges in order.",
        location, worklist_overlaps=True)


def _mentions(node: Node, dim: TileDim) -> bool:
    items = [*node.args, *node.kwargs.values(), *getattr(node, "index", ())]
    return any(item is dim or (isinstance(item, TileSlice) and item.dim is dim) for item in items)


def _indexed_rows(body: list, dim: TileDim) -> int | None:
    """The shortest length of a tensor axis the q tiles index (the rows items may cover)."""
    rows = None
    for node in walk_nodes(body):
        if not isinstance(node, (Load, Store)):
            continue
        axes = [item for item in node.index if not type(item).__name__ == "NewAxis"]
        for axis, item in enumerate(axes):
            if isinstance(item, TileSlice) and item.dim is dim:
                size = node.tensor.shape[axis]
                if type(size) is int:  # not a SymbolicSize (static_shapes=False): no static bound
                    rows = size if rows is None else min(rows, size)
    return rows


def flatten_call(call: DeviceLoopCall, worklist: Worklist) -> tuple[DeviceLoopCall, Worklist]:
    """The device loop as a loop over work items.

    The new grid dim walks items; the user's segment value becomes `owner[item]`
    (the same Value, now loaded); the q loop's dim runs `[start[item], start[item] +
    extent[item])`. The q dim is edited in place: its nodes refer to it, and the
    plan owns this trace (every plan traces afresh)."""
    loop = call.loop
    location = loop.location
    item_dim = TileDim("work_item", 0, worklist.max_items, 1, None, True)
    item = Value((), torch.int32, "work_item")
    begin_node = Node("tile_begin", (item_dim,), {}, [item], location)
    item.producer = begin_node
    item_dim.begin_value = item
    segment = loop.dims[0].begin_value
    old_begin = segment.producer
    owner_load = _scalar_load(worklist.owner, item, segment, location)
    body: list = [begin_node, owner_load]
    outer = next(entry for entry in loop.body if isinstance(entry, TileLoop))  # the q loop, or heads around it
    for entry in loop.body:
        if entry is old_begin:
            continue
        if entry is outer:
            tile_loop = entry
            start = Value((), torch.int32, "item_start")
            extent = Value((), torch.int32, "item_extent")
            end = Value((), torch.int32, "item_end")
            body.append(_scalar_load(worklist.start, item, start, tile_loop.location))
            body.append(_scalar_load(worklist.extent, item, extent, tile_loop.location))
            add = Node("add", (start, extent), {"alpha": 1}, [end], tile_loop.location)
            end.producer = add
            body.append(add)
            worklist.tile_dim.begin, worklist.tile_dim.end = start, end
            offset = None
            if worklist.write_backs:  # stores go to the item's scratch, at tile.begin - start
                q_loop = next(e for e in walk_loops([entry]) if worklist.tile_dim in e.dims)
                at = 1 + next(i for i, node in enumerate(q_loop.body)  # after the tile's begin is bound
                              if getattr(node, "outputs", None) == [worklist.tile_dim.begin_value])
                q_loop.body.insert(at, scratch_offset(worklist.tile_dim.begin_value, start, q_loop.location))
                offset = q_loop.body[at].outputs[0]
            worklist = dataclasses.replace(worklist, item_start=start, item_extent=extent, row_offset=offset)
        body.append(entry)
    segment.producer = owner_load
    # other grid axes (heads) first: each walks the items in order, so the item axis is innermost
    new_loop = TileLoop([*loop.dims[1:], item_dim], body, location, list(loop.carried))
    return DeviceLoopCall(new_loop, call.index, call.scalars), worklist


def _scalar_load(table: TensorSymbol, item: Value, result: Value, location) -> Load:
    node = Load("load", (), {}, [result], location, tensor=table, index=(ScalarIndex(item),))
    result.producer = node
    return node


# ---------------------------------------------------------------- the items --


def build_items(begins: list[int], ends: list[int], rows_per_item: int,
                max_items: int) -> tuple[list[int], list[int], list[int], int]:
    """The worklist of segments `[begins[s], ends[s])`, in Python: (owner, start, extent,
    count). The host function builds the same tables with `runtime/worklists.py`; the
    schedule report counts programs with these."""
    owner, start, extent = [], [], []
    for segment, (lo, hi) in enumerate(zip(begins, ends)):
        for first in range(lo, hi, rows_per_item):
            owner.append(segment)
            start.append(first)
            extent.append(min(rows_per_item, hi - first))
    count = len(owner)
    if count > max_items:
        raise ValueError(f"the segments need {count} work items, over the bound of {max_items}; "
                         "their ranges overlap or pass the tensor's end")
    last = (owner[-1], start[-1]) if owner else (0, begins[0] if begins else 0)
    for _ in range(count, max_items):
        owner.append(last[0])
        start.append(last[1])
        extent.append(0)
    return owner, start, extent, count


def worklist_tables(worklist: Worklist, tables: Mapping[Any, Any]) -> dict:
    """The worklist's tables for concrete arguments (`tables`: argument values by symbol)."""
    from .schedule import ScalarValues  # the schedule's own checks of the tables the bounds read
    values = ScalarValues(tables)
    tables = {symbol: values.table(symbol) for symbol in prefetched(worklist.begin) | prefetched(worklist.end)}
    begins = [evaluate(worklist.begin, (s,), tables) for s in range(worklist.segments)]
    ends = [evaluate(worklist.end, (s,), tables) for s in range(worklist.segments)]
    owner, start, extent, _ = build_items(begins, ends, worklist.rows_per_item, worklist.max_items)
    return {worklist.owner: owner, worklist.start: start, worklist.extent: extent}


def with_isolation(worklist: Worklist, semantics: str, reason: str) -> Worklist:
    """Record how the planned grid keeps items' stores apart."""
    if semantics == "parallel":
        names = ", ".join(f"'{w.symbol.name}'" for w in worklist.write_backs)
        heads = sorted({dim.name for w in worklist.write_backs for dim in w.head_axes if dim is not None})
        of_heads = f" of its head ({', '.join(repr(name) for name in heads)})" if heads else ""
        text = (f"parallel: {names} stay in HBM; an item stores its tiles into a VMEM scratch of "
                f"{worklist.rows_per_item} rows and copies only its rows [start, start + extent){of_heads} back "
                f"by DMA (one copy per set bit of the extent), so no two {'programs' if heads else 'items'} "
                "write one row")
    elif worklist.write_backs:
        text = (f"arbitrary ({reason}): the items' rows are written back by DMA, but the axis stays ordered")
    else:
        text = (f"arbitrary ({reason}): items share that resident output block, written back once after "
                "the last item; each store is masked to the item's rows [start, start + extent), which "
                "end at its segment's end, so an unaligned segment start never touches another "
                "segment's rows (tiles start at the segment's begin, never aligned down); not parallel: "
                f"{worklist.isolation.reason}")
    return dataclasses.replace(worklist, store_isolation=text)
