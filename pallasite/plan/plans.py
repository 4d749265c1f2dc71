"""The plan objects: every decision codegen consumes, as frozen dataclasses."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..ir import DeviceLoopCall, KernelIR, ScalarSymbol, TensorSymbol, TileDim


@dataclass(frozen=True)
class GridAxis:
    """One axis of the pallas_call grid, driven by one top-level tile dim."""

    dim: TileDim
    num_blocks: int
    semantics: str  # "parallel" | "arbitrary"
    reason: str  # why arbitrary (empty when parallel)


@dataclass(frozen=True)
class AxisBlock:
    """How one tensor axis is carved into the block a grid step sees.

    kind: "tile" (blocked by a grid tile dim), "full" (whole axis),
    "squeezed" (one element chosen by `index_expr`, axis dropped from the ref),
    "resident" (the whole range an inner tile loop walks, read per inner tile),
    "unit" (a size-1 axis that exists only in the operand's `view_shape`).
    """

    kind: str
    size: int | None
    index_expr: str  # block index as an expression of the grid indices (and prefetch refs)
    dim: TileDim | None = None
    prefetch: frozenset = frozenset()  # symbols the index map reads (scalar prefetch)
    reason: str = ""  # why a scalar-indexed axis is "full" rather than "squeezed"


@dataclass(frozen=True)
class Operand:
    """A tensor or scalar argument of one pallas_call."""

    symbol: TensorSymbol | ScalarSymbol
    ref_name: str
    memory: str  # "vmem_block" | "smem" | "hbm" (pl.ANY: copied by explicit DMA)
    axes: tuple[AxisBlock, ...] = ()
    padded_shape: tuple[int, ...] | None = None  # hbm: the host pads it so every DMA window is in bounds
    # vmem_block: the host reshapes it to this shape for the call (and back): a unit
    # axis after a row chosen by a scalar, since Mosaic cannot squeeze a block's last two dims.
    view_shape: tuple[int, ...] | None = None

    @property
    def block_shape(self) -> tuple[int | None, ...]:
        return tuple(None if a.kind == "squeezed" else a.size for a in self.axes)

    @property
    def call_shape(self) -> tuple[int, ...]:
        """The array's shape as the pallas_call sees it."""
        return self.padded_shape or self.view_shape or tuple(self.symbol.shape)


@dataclass(frozen=True)
class InnerTileSlice:
    """A ref subscript item: the run of an inner tile inside a resident block,
    `pl.ds(dim.begin_value, dim.block_size)` (the block starts at element 0)."""

    dim: TileDim


@dataclass(frozen=True)
class Access:
    """How one Load/Store reads or writes its ref inside the kernel.

    `ref_index` is the subscript text of the ref (`...` for the whole block);
    `new_axes` are positions where the loaded value gains unit axes.
    `store_masks` lists the tile dims whose range ends inside the tensor, so a
    store must keep the old contents past the tile's end.
    """

    ref_name: str
    ref_index: tuple  # per ref axis: ":", "...", an int, a scalar Value or an InnerTileSlice
    ref_shape: tuple[int, ...]  # the shape of ref[ref_index]
    value_shape: tuple[int, ...]  # the shape device code sees (NewAxis included)
    store_masks: tuple[tuple[int, TileDim], ...] = ()
    write_back: Stream | None = None  # fori_loop store: start this stream's copy after it


@dataclass(frozen=True)
class Mask:
    """Replace the padded tail of `axis` (past `dim`'s end) by `fill` before an op reads it."""

    operand: int  # which operand of the node
    axis: int
    dim: TileDim
    fill: object  # float | int | bool: the identity of the consuming op


@dataclass(frozen=True)
class CarriedMask:
    """At the end of each iteration of an inner loop, the lanes of carried value
    `carried` (its position in `TileLoop.carried`) past `dim`'s tile range keep
    their previous value: the loop's partial tile contributes nothing there.

    `dim` is one of the loop's own dims, which do not exist after the loop, so
    the padding they cause must stop at the carried value; the value after the
    loop then has no padded lanes of its own.
    """

    carried: int
    axis: int
    dim: TileDim


@dataclass(frozen=True)
class InPlaceUpdate:
    """A tensor read-modify-written by the loop: its input block is copied into
    the output block on the first visit of that block (grid axes in
    `first_visit_axes` at 0), then every access uses the output ref."""

    symbol: TensorSymbol
    input_ref: str
    output_ref: str
    first_visit_axes: tuple[int, ...]


@dataclass(frozen=True)
class StreamSlot:
    """A ref subscript item: the double-buffer slot of inner loop `loop_id`'s current step."""

    loop_id: int


@dataclass(frozen=True)
class Stream:
    """A tensor an inner loop moves tile by tile between HBM and VMEM, instead of
    keeping it resident (the `fori_loop` and `emit_pipeline` strategies).

    fori_loop: explicit DMA into VMEM scratch `buffer` of shape (2, *window),
    double-buffered — an input's copy for step j+1 starts before step j
    computes; an output's copy of step j starts right after its store and is
    waited for when its slot is reused (step j+2) or after the loop. One
    builder function `copy_fn` makes each descriptor, for its start and wait.
    emit_pipeline: a BlockSpec of `pltpu.emit_pipeline`, whose body sees the
    window as `block_ref`.
    """

    symbol: TensorSymbol
    loop_id: int
    direction: str  # "in" | "out"
    index: tuple  # the normalized index of every access (one window form)
    window_shape: tuple[int, ...]

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
        """An input's next tile is in flight while this tile computes (both strategies)."""
        return self.direction == "in"


@dataclass(frozen=True)
class Scratch:
    """A scratch buffer of the kernel (after its operand refs)."""

    name: str
    kind: str  # "vmem" | "smem" | "dma_semaphores"
    shape: tuple[int, ...]
    dtype: object  # torch dtype (None for semaphores)


@dataclass(frozen=True)
class InnerLoopPlan:
    """How one inner tile loop runs.

    strategy "unroll": every tensor it reads stays resident in VMEM through the
    outer BlockSpec; a static trip count is unrolled in Python (`static_trips`),
    a dynamic one is a `lax.fori_loop` over the resident block.
    strategy "fori_loop": a `lax.fori_loop` whose tensors (`streams`) stay in
    HBM and are copied tile by tile, double-buffered; a tensor the loop cannot
    stream (also used outside it, or both read and written) stays resident.
    strategy "emit_pipeline": `pltpu.emit_pipeline` over the loop's tiles with
    the streams as its BlockSpecs; carried values live in VMEM scratch.
    """

    strategy: str
    static_trips: tuple[int, ...] | None  # per dim, None when a bound is data-dependent
    streams: tuple[Stream, ...] = ()  # tensors moved per tile (fori_loop, emit_pipeline)
    aligned_begin: bool = False  # emit_pipeline: tiles start at block multiples; the
    #   loop's own begin is then a lower bound that masks must apply
    carried_refs: tuple[str, ...] = ()  # emit_pipeline: VMEM scratch per carried value
    step_ref: str | None = None  # emit_pipeline: SMEM step counter the body reads


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
    inner_loops: dict[int, InnerLoopPlan]  # TileLoop id -> its strategy
    scratch: tuple[Scratch, ...]  # kernel scratch buffers, in parameter order
    vmem_bytes: int
    vmem_limit_bytes: int | None


@dataclass(frozen=True)
class PlanTarget:
    """What a plan is built for: the resolved config and the TPU generation.

    The config is complete (every tunable block size, the loop strategy);
    `tpu` is JAX's `TpuInfo` of the chip (VMEM capacity, ...).
    """

    config: Config
    chip: str
    tpu: Any

    @property
    def vmem_capacity_bytes(self) -> int:
        return self.tpu.vmem_capacity_bytes


@dataclass(frozen=True)
class KernelPlan:
    ir: KernelIR
    calls: tuple[PallasCallPlan, ...]
    target: PlanTarget

    @property
    def config(self) -> Config:
        return self.target.config

    @property
    def chip(self) -> str:
        return self.target.chip
