"""The plan objects of loads and stores: how each access reads or writes its ref
(ref subscript items, gathers, scatters, masks, narrowing reads). plan/plans.py
re-exports them with the rest of the plan."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Union

from ..ir import FullSlice, ScalarIndex, TileDim


@dataclass(frozen=True)
class InnerTileSlice:
    """A ref subscript item: the run of an inner tile inside a resident block,
    `pl.ds(dim.begin_value, dim.block_size)` (the block starts at element 0)."""

    dim: TileDim


@dataclass(frozen=True)
class PrefixSlice:
    """A ref subscript item: the first `length` elements (the tensor's part of a
    resident block padded past its end), `:length`."""

    length: int


@dataclass(frozen=True)
class StreamSlot:
    """A ref subscript item: the double-buffer slot of inner loop `loop_id`'s current step."""

    loop_id: int


@dataclass(frozen=True)
class ReductionChunk:
    """A ref subscript item: the current chunk of looped reduction `node_id`,
    `pl.ds(c * chunk, chunk)` (`reduction_loops`; the block holds whole chunks)."""

    node_id: int
    chunk: int


# A ref subscript item: the whole axis, one position, a tile's run, a prefix, a stream slot,
# a looped reduction's chunk.
@dataclass(frozen=True)
class RefOffset:
    """A ref subscript item of a narrowing read (plan/subviews.py): the position `sum(terms)`
    (`size` None: the axis disappears) or the run `pl.ds(sum(terms), size)`."""

    terms: tuple  # ints and scalar Values, added
    size: int | None


@dataclass(frozen=True)
class AlignedRun:
    """A ref subscript item of a shifted tile's read (`TileShift`): the block-long run at
    `dim`'s begin - `lead` + `blocks` * block size, at 0 if that is negative (a run wholly
    before the tensor, whose lanes the read masks), `pl.ds(pl.multiple_of(start, block),
    block)`. `lead`: how far the loop's tiles start past a block multiple (`hl.tile(1, m)`: 1)."""

    dim: TileDim
    blocks: int
    lead: int = 0


@dataclass(frozen=True)
class GroupRow:
    """A ref subscript item: on a `BlockKind.ROW_GROUP` axis, the row `index` chose, at its
    position `index % rows` in the block of `rows` rows holding it (the axis disappears)."""

    index: Any  # int or a scalar Value (non-negative: data-chosen rows are checked first)
    rows: int


RefItem = Union[FullSlice, ScalarIndex, InnerTileSlice, PrefixSlice, StreamSlot, ReductionChunk, RefOffset,
                AlignedRun, GroupRow]


def keeps_axis(item) -> bool:
    """Whether a ref subscript item makes an axis of the window it reads: a position (a
    scalar, a group's row) or a stream's slot drops the ref axis it indexes."""
    return not isinstance(item, (ScalarIndex, StreamSlot, GroupRow))


@dataclass(frozen=True)
class TileShift:
    """A load or store at `tile + offset` (`ShiftedTile`) on a resident axis (ref axis `axis`
    of the window; the tensor's axis holds `size` positions). Tiles start `lead` past a block
    multiple (a static begin: `hl.tile(1, m)` has lead 1); with lead + offset = q * block + r
    (0 <= r < block) the lanes lie in the aligned runs q and q + 1 blocks past the block
    multiple the tile starts in (`AlignedRun`). A load reads both, selects `r` lanes of the later one and rotates by
    r with `pltpu.roll` (aligned reads and a static rotate, which every TPU lowers); lanes whose
    position lies outside [0, size) become 0. A store rotates the value the other way and
    rewrites each run where its lanes hold the tile's valid lanes inside [0, size): a lane
    shifted out of the tensor is dropped."""

    axis: int
    dim: TileDim
    offset: int
    size: int
    item: int  # its position in the access's `ref_index` (a scalar item drops an axis: not `axis`)

    @property
    def lead(self) -> int:
        return tile_lead(self.dim)

    @property
    def blocks(self) -> int:
        return (self.lead + self.offset) // self.dim.block_size

    @property
    def rotate(self) -> int:
        return (self.lead + self.offset) % self.dim.block_size

    def run(self, blocks: int) -> AlignedRun:
        """The aligned run `blocks` blocks past the block multiple its tile starts in."""
        return AlignedRun(self.dim, blocks, self.lead)


def tile_lead(dim: TileDim) -> int:
    """How far each tile of a loop with a static begin starts past a block multiple."""
    return dim.begin % dim.block_size


@dataclass(frozen=True)
class SubviewRead:
    """How one narrowing read (a `subview` node: `blk[tile.index]`, `blk[1:3]`) reads.

    Resident (`ref_name` set): straight out of the VMEM ref the block was loaded from (or
    its `BlockCopy`), `ref[ref_index]` with `pl.ds` runs, reshaped to `value_shape`. Else a
    static slice `source[static_key]` of a computed value, for constant items; a computed
    value (a carried state) narrowed at a moving position is written to VMEM scratch
    (`spill_from`) and read back like a block (Mosaic cannot slice a value at a dynamic
    offset)."""

    ref_name: str | None
    ref_index: tuple[RefItem, ...]
    ref_shape: tuple[int, ...]
    value_shape: tuple[int, ...]
    source: object = None  # the value a static slice reads
    spill_from: object = None  # a computed value written to `ref_name` (VMEM scratch) just before the read
    static_key: tuple = ()
    reason: str = ""


@dataclass(frozen=True)
class BlockCopy:
    """A loaded block whose tensor the loop also writes: its narrowing reads must not see
    those writes (eager PyTorch copies at the load), so the load copies its window into
    VMEM scratch `scratch` and the reads use that."""

    load_id: int
    scratch: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class TileRange:
    """The valid positions of `dim`'s current tile: [begin, min(end, begin + block)).
    Every mask of the dim (reductions, stores, carried values) and a masked mean's
    divisor read the range from here."""

    dim: TileDim


@dataclass(frozen=True)
class MergedPadding:
    """An axis a reshape merged from consecutive axes, some of them partially filled tiles
    (`x[tb, th, :].reshape(bb * bh, d)`): a lane is padding where any part's is.

    Pointwise ops, a matmul's free axes, permutes and subscripts carry it, and a reshape
    that splits it back into its parts' sizes restores their ranges. An op that would
    have to mask it (a reduction or contraction along it, a carried value keeping lanes)
    is rejected: one range per axis is what masks know how to apply. As the valid lanes of
    a gather's (or scatter's) flat index vector it is a rectangle, not a prefix: lane
    l is valid iff each part's position (l // stride) % size lies in its range
    (codegen's range condition; per-row DMA walks just those lanes).
    """

    parts: tuple[tuple[int, TileRange | None], ...]  # (size, range or None) per merged axis, outermost first

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(size for size, _ in self.parts)

    @property
    def names(self) -> str:
        return " x ".join(f"'{rng.dim.name}'" if rng is not None else str(size) for size, rng in self.parts)


# The valid lanes of an index vector: one tile's range, or a merge of several (an index tile's
# flat vector).
LaneRange = Union[TileRange, MergedPadding]


@dataclass(frozen=True)
class StoreMask:
    """A store keeps the old contents of ref axis `axis` outside `range`."""

    axis: int
    range: TileRange


class GatherMethod(str, enum.Enum):
    """How a gather is computed from the table's window (Mosaic has no vector gather)."""

    # (idx[:, None] == iota) as f32 @ the window at HIGHEST precision: exact, on the MXU
    # (a second product gathers inf/NaN entries, which 0 * inf would spread).
    ONE_HOT_MATMUL = "one_hot_matmul"
    # where(idx[:, None] == iota, window, 0) summed over the window's axis: exact for ints.
    SELECT_SUM = "select_sum"
    # The table stays in HBM (pl.ANY); each index's row is copied into VMEM scratch by its
    # own DMA, its row read as a scalar from an SMEM copy of the index tensor (`RowCopy`).
    ROW_DMA = "row_dma"


@dataclass(frozen=True)
class RowCopy:
    """How a `ROW_DMA` gather copies its rows: lane i of the index vector is
    `index_ref[index_items]` with the tile's item read at `begin + i` (several tiles: row-major
    over their block sizes, the flat vector of an index tile) (an SMEM
    copy of the tensor the index vector was loaded from); its row of `table_ref`
    (pl.ANY), or its `window` (the block of each tile indexing the other dims), goes to
    row i of `buffer` (VMEM scratch), all on `semaphore`. Only the
    lanes in `lanes` (None: all) are copied and waited for; the rest are padding (an index
    tile's flat vector: the lanes outside the rectangle of its tiles' ranges)."""

    table_ref: str
    index_ref: str
    index_items: tuple  # per axis of the index tensor: a ScalarIndex, or the TileSlice of the lanes
    lanes: LaneRange | None
    buffer: str
    semaphore: str
    staged: StagedIndex | None = None  # an index vector computed on the device: staged in SMEM
    window: tuple = ()  # per table dim after the first: FullSlice (whole) or TileSlice (its block)


@dataclass(frozen=True)
class StagedIndex:
    """An index vector computed on the device (`t.index * v + labels[t]`): a DMA's offset
    is a scalar and vector lanes cannot be read as scalars, so the vector is written to
    `vmem` (VMEM scratch) and copied by a local DMA (on `semaphore`, waited at once) to
    `smem`, where the row copies read lane i as `smem[i]` (`RowCopy.index_ref` is `smem`,
    its `index_items` empty)."""

    vmem: str
    smem: str
    semaphore: str


@dataclass(frozen=True)
class Gather:
    """A load that gathers: ref axis `axis` of the read window (all `rows` of the
    table's gathered axis) is replaced by one element per position of `index`
    (a 1-D int32 Value), as `method` computes it. A `ROW_DMA` gather reads no
    window: its rows arrive by DMA (`row_copy`), already in the index's order."""

    index: Any  # ir.Value
    axis: int
    rows: int
    method: GatherMethod
    reason: str = ""  # why this lowering (the table's size against the VMEM threshold, or the config)
    row_copy: RowCopy | None = None  # ROW_DMA only


@dataclass(frozen=True)
class Scatter:
    """A store through an index vector (`out[idx, :] = v`): ref axis `axis` of the written
    window (all `rows` of the tensor's scattered axis, resident in VMEM) takes, at each
    row some lane of `index` names, the value of the last (highest) such lane; other
    rows keep their contents. Lanes outside `valid_lanes` (a partial tile's padding)
    write nothing. `method` computes the picked rows as a gather does (Mosaic has
    neither a vector scatter nor a scalar index per lane): the one-hot of
    (row, last lane naming it) times the value, on the MXU for floats, by select-and-sum
    for int32."""

    index: Any  # ir.Value, 1-D int32
    axis: int
    rows: int
    method: GatherMethod
    valid_lanes: LaneRange | None = None
    lane_mask: Any = None  # ir.Value, 1-D bool: the lanes `hl.store(..., extra_mask=)` keeps


@dataclass(frozen=True)
class Access:
    """How one Load/Store reads or writes its ref inside the kernel.

    `ref_index` has one item per ref axis (empty: the whole ref); `store_masks`
    list the ranges a store must keep the old contents outside of.
    """

    ref_name: str
    ref_index: tuple[RefItem, ...]
    ref_shape: tuple[int, ...]  # the shape of ref[ref_index]
    value_shape: tuple[int, ...]  # the shape device code sees (NewAxis included)
    store_masks: tuple[StoreMask, ...] = ()
    write_back: Any = None  # a plans.Stream (plans.py imports this module)  # fori_loop store: start this stream's copy after it
    gather: Gather | None = None  # a load through an index vector: gather from the read window
    scatter: Scatter | None = None  # a store through an index vector: update the written window
    # per axis of the loaded value: the axis of ref[ref_index] it is (None: a NewAxis, or not
    # one axis of the ref, as a gather's) — how a narrowing read finds its axis in the ref
    value_axes: tuple[int | None, ...] | None = None
    note: str = ""  # what a static window reads, written above the access in the generated code
    # an access at moved tiles (`tile + c`), one per moved axis: the ref item at each
    # `shift.axis` is an AlignedRun
    shifts: tuple[TileShift, ...] = ()


@dataclass(frozen=True)
class Mask:
    """Replace the lanes of `axis` outside `range` by `fill` before an op reads them."""

    operand: int  # which operand of the node
    axis: int
    range: TileRange | MergedPadding  # merged: only on a contraction's contracted axis
    fill: object  # float | int | bool: the identity of the consuming op

    @property
    def dim(self) -> TileDim:
        return self.range.dim

    @property
    def names(self) -> str:
        """The tile dims whose padding the mask hides, as a message names them."""
        return self.range.names if isinstance(self.range, MergedPadding) else f"'{self.range.dim.name}'"


@dataclass(frozen=True)
class CarriedMask:
    """At the end of each iteration of an inner loop, the lanes of carried value
    `carried` (its position in `TileLoop.carried`) outside `range` keep their
    previous value: the loop's partial tile contributes nothing there.

    The range's dim is one of the loop's own dims, which do not exist after the
    loop, so the padding they cause must stop at the carried value; the value
    after the loop then has no padded lanes of its own.
    """

    carried: int
    axis: int
    range: TileRange

    @property
    def dim(self) -> TileDim:
        return self.range.dim
