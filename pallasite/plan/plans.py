"""The plan objects: every decision codegen consumes, as frozen dataclasses."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from ..config import Config, ResolvedConfig, resolve
from ..ir import DeviceLoopCall, FullSlice, KernelIR, ScalarSymbol, TensorSymbol, TileDim, TileSlice
from .index_expr import IndexExpr, prefetched
from .narrowed_arguments import NarrowedArgument
from .access_plans import (  # noqa: F401  (re-exported: the plan's access objects)
    Access, BlockCopy, CarriedMask, Gather, GatherMethod, InnerTileSlice, LaneRange, Mask, MergedPadding,
    PrefixSlice, RefItem, RefOffset, ReductionChunk, RowCopy, Scatter, StoreMask, StreamSlot, SubviewRead, TileRange,
)


class Semantics(str, enum.Enum):
    """A grid axis's dimension semantics (megacore chips split `parallel` axes)."""

    PARALLEL = "parallel"
    ARBITRARY = "arbitrary"


class BlockKind(str, enum.Enum):
    """How one tensor axis is carved into the block a grid step sees."""

    TILE = "tile"  # blocked by a grid tile dim
    FULL = "full"  # the whole axis
    SQUEEZED = "squeezed"  # one element chosen by the index map; the axis leaves the ref
    RESIDENT = "resident"  # from element 0, every tile's run (pl.ds at the tile's begin) and any ':'/scalar
    UNIT = "unit"  # a size-1 axis that exists only in the operand's `view_shape`; squeezed too
    # the group of rows (the dtype's sublane tile) holding one row the index map chooses, on a
    # read-only tensor's second-to-last axis, which Mosaic cannot squeeze; the kernel reads
    # that row of the group (`GroupRow`)
    ROW_GROUP = "row_group"


class Memory(str, enum.Enum):
    """Where an operand lives while the kernel runs."""

    VMEM_BLOCK = "vmem_block"  # a BlockSpec block, copied in/out by the grid pipeline
    SMEM = "smem"  # the whole (small) tensor or scalar in SMEM
    HBM = "hbm"  # pl.ANY: stays in HBM, copied by explicit DMA


class Direction(str, enum.Enum):
    IN = "in"
    OUT = "out"
    IN_OUT = "in and out"  # read and written at the same windows: copied in, updated, written back

    @property
    def reads(self) -> bool:
        return self is not Direction.OUT

    @property
    def writes(self) -> bool:
        return self is not Direction.IN


@dataclass(frozen=True)
class GridAxis:
    """One axis of the pallas_call grid, driven by one top-level tile dim."""

    dim: TileDim
    num_blocks: int
    semantics: Semantics
    reason: str  # why arbitrary (empty when parallel)


@dataclass(frozen=True)
class AxisBlock:
    """One axis of an operand's block: its kind, length and block index."""

    kind: BlockKind
    size: int | None
    index: IndexExpr  # the block index, a function of the grid indices (and prefetched tables)
    dim: TileDim | None = None
    reason: str = ""  # why a scalar-indexed axis is FULL rather than SQUEEZED
    row: IndexExpr | None = None  # ROW_GROUP: the row chosen (`index` is its group, row // size)
    # SQUEEZED, written: the index may choose one block at steps that are not consecutive
    # (`g % 3`); each visit writes the whole block, so the steps run in order, the last wins
    repeats: bool = False

    @property
    def chosen_row(self) -> IndexExpr | None:
        """The position the index map chooses on a scalar-indexed axis (SQUEEZED, ROW_GROUP)."""
        return {BlockKind.SQUEEZED: self.index, BlockKind.ROW_GROUP: self.row}.get(self.kind)

    @property
    def prefetch(self) -> frozenset:
        """The symbols the index map reads (scalar prefetch)."""
        return prefetched(self.index)

    @property
    def squeezed(self) -> bool:
        """Whether the axis leaves the kernel ref (`pl.Squeezed()` in the BlockSpec): a row
        chosen by the index map, or the unit axis of a view (its array dim is 1, so
        Mosaic's (8, 128) rule for a block's last two dims allows squeezing it)."""
        return self.kind in (BlockKind.SQUEEZED, BlockKind.UNIT)


@dataclass(frozen=True)
class Operand:
    """A tensor or scalar argument of one pallas_call; `ref_name` names its kernel
    parameter (and, when prefetched, its index-map parameter)."""

    symbol: TensorSymbol | ScalarSymbol
    ref_name: str
    memory: Memory
    axes: tuple[AxisBlock, ...] = ()
    # The host pads it to this shape for the call (outputs are sliced back): hbm, so every
    # DMA window is in bounds; an empty tensor, so no block is empty.
    padded_shape: tuple[int, ...] | None = None
    # vmem_block: the host reshapes it (after padding) to this shape for the call (and
    # back): a unit axis after a row chosen by a scalar, since Mosaic squeezes one of a
    # block's last two dims only where the array's dim is 1. Both axes are squeezed: the
    # kernel ref is the row.
    view_shape: tuple[int, ...] | None = None

    @property
    def block_shape(self) -> tuple[int | None, ...]:
        """The BlockSpec's block shape, None for a squeezed axis (`pl.Squeezed()`)."""
        return tuple(None if a.squeezed else a.size for a in self.axes)

    @property
    def call_shape(self) -> tuple[int, ...]:
        """The array's shape as the pallas_call sees it."""
        return self.view_shape or self.padded_shape or tuple(self.symbol.shape)


@dataclass(frozen=True)
class PreBroadcast:
    """`pallas_pre_broadcast`: operand `position` of node `node_id` (an elementwise op in
    an inner loop) is `value`, defined before the loop; it is broadcast to `shape` once
    before the loop starts and the op reads the widened value (plan/broadcasts.py)."""

    value: Any  # ir.Value
    shape: tuple[int, ...]
    node_id: int
    position: int


@dataclass(frozen=True)
class LoopedReduction:
    """`reduction_loops`: reduction node `node_id` over axis `axis` (a whole dim of
    `extent`) runs as a loop of `trips` chunks of `chunk`, carrying its partial.
    The `region` nodes (loads and elementwise ops computing its source along the
    dim, program order) are recomputed per chunk: `chunk_axes` gives each region
    value's axis along the dim, `loads` each region load's chunked access. With
    `tail_masked`, lanes past `extent` become `fill` (the identity) before reducing.
    Decided in plan/reduction_loops.py."""

    node_id: int
    entry: int  # position in `reduction_loops`
    axis: int
    extent: int
    chunk: int
    trips: int
    region: tuple[int, ...]
    chunk_axes: dict  # value id -> axis carrying the dim
    loads: dict  # load node id -> Access reading its chunk
    fill: float | bool
    tail_masked: bool
    reason: str


@dataclass(frozen=True)
class InPlaceUpdate:
    """A tensor read-modify-written by the loop: its input block is copied into
    the output block on the first visit of that block (grid axes in
    `first_visit_axes` at 0), then every access uses the output ref. Under a flattened
    worklist whose owner table chooses the block (`first_item_of_owner`: that table's ref),
    consecutive items of one segment revisit it, so only an item whose owner differs from
    the previous item's copies (a later copy would drop the earlier items' writes)."""

    symbol: TensorSymbol
    input_ref: str
    output_ref: str
    first_visit_axes: tuple[int, ...]
    first_item_of_owner: str | None = None
    # a grid axis of a folded range (`DeviceLoopCall.folded_trips`) that chooses the block:
    # its skipped steps repeat the block before them, so only a step whose block differs
    # from the previous step's (or the axis's first step) is a first visit and copies
    changes_along: int | None = None


@dataclass(frozen=True)
class Stream:
    """A tensor an inner loop moves tile by tile between HBM and VMEM, instead of
    keeping it resident (the streaming strategies; see plan/loops/).

    Its names (HBM ref, VMEM buffer, semaphores, copy builder, pipeline block
    ref) are its kernel parameters and locals, derived from the tensor's name.
    """

    symbol: TensorSymbol
    loop_id: int
    direction: Direction
    index: tuple  # the normalized index of every access (one window form)
    window_shape: tuple[int, ...]
    # VMEM windows the DMAs rotate through (`pallas_load_buffer_count`; 2 = double
    # buffering): an input's next `buffers - 1` tiles are in flight while one computes.
    buffers: int = 2
    # an output whose last tile may end inside the tensor: the tile dim along which a step
    # writes back only the tile's rows inside its range (None: whole windows)
    partial_dim: TileDim | None = None

    @property
    def partial_axis(self) -> int:
        """The window axis of `partial_dim` (the window keeps the tensor's tiled and whole axes)."""
        window = [item for item in self.index if isinstance(item, (TileSlice, FullSlice))]
        return next(axis for axis, item in enumerate(window)
                    if isinstance(item, TileSlice) and item.dim is self.partial_dim)

    @property
    def piece_fn(self) -> str:
        return f"{self.symbol.name}_piece"

    @property
    def hbm_ref(self) -> str:
        return f"{self.symbol.name}_hbm"

    @property
    def buffer(self) -> str:
        return f"{self.symbol.name}_buf"

    @property
    def semaphores(self) -> str:
        return f"{self.symbol.name}_sem"

    @property
    def copy_fn(self) -> str:
        return f"{self.symbol.name}_copy"

    @property
    def block_ref(self) -> str:
        return f"{self.symbol.name}_blk"

    @property
    def prefetches_next_tile(self) -> bool:
        """An input's next tile is in flight while this tile computes (every streaming strategy)."""
        return self.direction.reads

    @property
    def write_fn(self) -> str:
        """The write-back builder of a stream read and written (its `copy_fn` reads)."""
        return f"{self.symbol.name}_write"


class ScratchKind(str, enum.Enum):
    VMEM = "vmem"
    SMEM = "smem"
    DMA_SEMAPHORES = "dma_semaphores"
    # REGULAR semaphores, one per device of the mesh (a count only tracing under
    # `jax.shard_map` knows: the shape is empty, sized when traced)
    MESH_SEMAPHORES = "mesh_semaphores"


@dataclass(frozen=True)
class Scratch:
    """A scratch buffer of the kernel (after its operand refs)."""

    name: str
    kind: ScratchKind
    shape: tuple[int, ...]
    dtype: object  # torch dtype (None for semaphores; SMEM scratch is int32)


@dataclass(frozen=True)
class LoopPlan:
    """How one inner tile loop runs: the base of each strategy's own plan.

    Each strategy (plan/loops/) subclasses it with the fields only it needs.
    """

    strategy: str  # the strategy's name, as `pallas_loop_type` spells it
    static_trips: tuple[int, ...] | None  # per dim, None when a bound is data-dependent
    streams: tuple[Stream, ...] = ()  # tensors the loop moves tile by tile
    # A multi-dim loop walks its dims in this order (positions in `TileLoop.dims`, the
    # outermost first; the config's `loop_orders` entry for the loop, else as written).
    order: tuple[int, ...] = (0,)

    @property
    def total_trips(self) -> int | None:
        """Steps of the whole loop (every dim's tiles), None when data-dependent."""
        if self.static_trips is None:
            return None
        total = 1
        for trips in self.static_trips:
            total *= trips
        return total


@dataclass(frozen=True)
class RangeCheck:
    """A range that depends on data, so planning cannot check it: interpret mode
    checks it at run time (`pallasite.runtime.checks`), a TPU does not.

    `dim` set: an inner loop's [begin, end) must lie in [0, limit) (checked where
    the loop starts; on a violation it runs no steps), or with `extents` set, its
    tiles' extents must agree with those of the axis they meet. `node_id` set: a scalar
    index read from data must lie in [0, limit) (checked before that access; on a
    violation the access reads row 0). `block_index` set: a BlockSpec index map
    reads the index from prefetched tables, so the host checks it at every grid
    step before the call. `host_index` set: an index tensor or runtime scalar in
    a host-code subscript; its values must lie in [-limit, limit) (negative
    ones count from the end, as in torch). `worklist_items` set: the host checks that a
    flattened worklist's item count fits its grid's bound (`limit - 1`). The call then
    raises `exc.ShapeMismatch` with `message`, whose `{lo}` and `{hi}` are the values
    seen and `{limit}` the size.

    `limit` is a symbolic size under static_shapes=False: the generated code passes
    it where it checks (`limit=table_size0`), so the check is against each call's
    own size and one variant serves the bucket.
    """

    check_id: int  # unique in the kernel's module
    limit: int
    message: str
    location: Any
    dim: TileDim | None = None
    value: Any = None  # ir.Value
    node_id: int | None = None
    block_index: IndexExpr | None = None
    host_index: tuple[int, int] | None = None  # (host step id, position in its subscript)
    valid_lanes: LaneRange | None = None  # a gather's index vector: the lanes that hold indices
    lane_mask: Any = None  # ir.Value: a masked scatter's kept lanes (the others hold no index)
    # `node_id`'s access runs under a device `if`: checked there, not where its index is computed
    # (`if s >= 0: x[s, :]` with s = -1 at a step that does not read)
    guarded: bool = False
    # a torch.gather's N-D index: per padded axis, the range of positions that hold indices
    valid_axes: tuple = ()
    worklist_items: bool = False  # the item count of a flattened worklist, against its grid bound
    # a flattened worklist's segment ends, against the rows its q tiles index (limit rows + 1):
    # offsets past the tensor's end, named before the item count they inflate
    worklist_ends: bool = False
    # a worklist whose items write their own rows in parallel: segments that end before they
    # begin (decreasing offsets, so rows of two items overlap), which must be none (limit 1)
    worklist_overlaps: bool = False
    # a remote copy's or barrier's (`remote_node`) device id (`device`, an int or Value) in
    # [0, the traced mesh's device count) (plan/remote_copies.py); `bounds`: its interval
    mesh_rank: bool = False
    device: Any = None
    remote_node: int | None = None
    bounds: tuple[int, int] | None = None
    # `value` is an integer division's divisor (`node_id`), which must hold no 0 on its valid
    # lanes (plan/divisors.py)
    nonzero: bool = False
    # `device` is (rank, *peers) of `hl.remote_barrier(peers, rank=...)`: every device of the
    # mesh once, the rank this device's (the count checked when traced, the values at run time)
    peer_group: bool = False
    # a value torch computes in int64 (plan/int64_values.py): `node_id`'s op, `recompute` =
    # (op, its attrs as sorted pairs), recomputed exactly from `operands` (Values or numbers) on
    # their valid lanes (`operand_valid`: per operand, its padded axes' ranges) must fit int32
    recompute: tuple | None = None
    operands: tuple = ()
    operand_valid: tuple = ()
    # tiles of a data-dependent range meeting another tile dim or a fixed size on one axis
    # (plan/extents.py): checked where the loop of `dim` starts that every tile of both has
    # one and the same extent; `{lo}` and `{hi}` are the two ranges' lengths
    extents: tuple | None = None

    def describe(self, lo: int, hi: int, limit: int) -> str:
        """The message for values [lo, hi) seen against the call's `limit`."""
        return self.message.format(lo=lo, hi=hi, limit=limit)


@dataclass(frozen=True)
class PallasCallPlan:
    """Everything codegen needs for one device loop."""

    call: DeviceLoopCall
    kernel_name: str
    grid: tuple[GridAxis, ...]
    scalar_prefetch: tuple[Operand, ...]  # SMEM operands index maps read (PrefetchScalarGridSpec)
    scalar_inputs: tuple[Operand, ...]
    inputs: tuple[Operand, ...]
    outputs: tuple[Operand, ...]
    aliases: dict[int, int]  # input position (prefetch and scalars included) -> output position
    updates: tuple[InPlaceUpdate, ...]  # tensors updated in place (aliased)
    accesses: dict[int, Access]  # node id -> access
    masks: dict[int, tuple[Mask, ...]]  # node id -> masks on its operands
    carried_masks: dict[int, tuple[CarriedMask, ...]]  # TileLoop id -> lanes its carried values keep
    grid_axis_of: dict[int, int]  # TileDim id -> grid axis
    inner_loops: dict[int, LoopPlan]  # TileLoop id -> how it runs
    scratch: tuple[Scratch, ...]  # kernel scratch buffers, in parameter order
    vmem_bytes: int
    vmem_limit_bytes: int | None
    range_checks: tuple[RangeCheck, ...] = ()  # data-dependent ranges, checked in interpret mode
    # reduction node id -> its chunk loop (`reduction_loops`); `skipped_nodes` are region
    # nodes only looped reductions read, so they are never computed whole
    looped_reductions: dict[int, LoopedReduction] = field(default_factory=dict)
    skipped_nodes: frozenset[int] = frozenset()
    pre_broadcasts: dict[int, tuple[PreBroadcast, ...]] = field(default_factory=dict)  # TileLoop id -> operands widened before it
    remote: Any = None  # plan/remote_copies.py RemotePlan: copy sites, semaphores, barrier id (None: none)
    subviews: dict[int, SubviewRead] = field(default_factory=dict)  # subview node id -> how it reads
    block_copies: dict[int, BlockCopy] = field(default_factory=dict)  # load node id -> its copy
    # a grid over segments flattened into (segment, q-tile) items (plan/worklists.py), or None
    # and why not (empty when the loop is no candidate at all)
    worklist: Any = None
    worklist_reason: str = ""
    grid_order_reason: str = ""  # why the plan, not the user, ordered the grid ("" if it did not)
    dot_precision: str = "DEFAULT"  # the lax.Precision of its matmuls (`PlanTarget.dot_precision`)

    def loop_checks(self, dim) -> tuple[RangeCheck, ...]:
        return tuple(c for c in self.range_checks if c.dim is dim)

    def index_checks(self, node_id: int) -> tuple[RangeCheck, ...]:
        return tuple(c for c in self.range_checks if c.node_id == node_id)

    @property
    def host_checks(self) -> tuple[RangeCheck, ...]:
        return tuple(c for c in self.range_checks if c.block_index is not None)


@dataclass(frozen=True)
class PlanTarget:
    """What a plan is built for: the resolved config and the TPU generation.

    The config is complete (every tunable block size, the loop strategy);
    `tpu` is JAX's `TpuInfo` of the chip (VMEM capacity, ...).
    """

    config: Config
    chip: str
    tpu: Any
    # the kernel's `dot_precision` setting as the lax.Precision of its matmuls (settings.py)
    dot_precision: str = "DEFAULT"

    @property
    def vmem_capacity_bytes(self) -> int:
        return self.tpu.vmem_capacity_bytes

    @property
    def knobs(self) -> ResolvedConfig:
        """The config with every knob's value (its defaults filled in): what planning reads."""
        return resolve(self.config)


@dataclass(frozen=True)
class KernelPlan:
    ir: KernelIR
    calls: tuple[PallasCallPlan, ...]
    target: PlanTarget
    # Index tensors and runtime scalars subscripting host tensors (`x[idx]`, `out[i] = v`):
    # checked in interpret mode before the indexing, since JAX would clamp them.
    host_index_checks: tuple[RangeCheck, ...] = ()
    # int64 tensor arguments read only as indices: the host narrows them to int32 with a
    # checked range before the call (plan/narrowed_arguments.py)
    narrowed_arguments: tuple[NarrowedArgument, ...] = ()
    # int64 host allocations the kernel fills with int32 values, returned widened to int64
    # (plan/widened_outputs.py), by name
    widened_outputs: tuple[str, ...] = ()
    # int arithmetic whose interval only runtime int arguments decide (`(r + g) * 1000003`):
    # the host checks it against each call's values before running (plan/bounds.py)
    scalar_arithmetic: tuple = ()

    @property
    def range_checks(self) -> tuple[RangeCheck, ...]:
        """Every data-dependent range of the module: the device loops' and the host's."""
        return (*(check for call in self.calls for check in call.range_checks), *self.host_index_checks)

    @property
    def config(self) -> Config:
        return self.target.config

    @property
    def dot_precision(self) -> str:
        """The `lax.Precision` every matmul of the kernel (device and host code) runs at."""
        return self.target.dot_precision

    @property
    def chip(self) -> str:
        return self.target.chip
