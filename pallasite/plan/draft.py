"""The frozen objects planning passes read and extend (plan/build.py runs the passes).

A device loop's plan is built by a fixed list of passes (`build.CALL_PASSES`), each a
function `CallDraft -> CallDraft` that reads the fields earlier passes set and adds its
own with `dataclasses.replace`; the last pass leaves the finished `PallasCallPlan` in
`CallDraft.plan`. What every call of a kernel shares is its `KernelContext`.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..config import ResolvedConfig
from ..ir import DeviceLoopCall, KernelIR, TileDim
from .bounds import DataDependentRange
from .folded_loops import folded_loop_ids
from .loops import LoopStrategy, buffer_counts, loop_strategies, multi_dim_loops
from .worklists import check_compact_worklist_named
from .plans import (
    Access, CarriedMask, GridAxis, InPlaceUpdate, LoopPlan, Mask, Operand, PallasCallPlan, PlanTarget, RangeCheck,
    Scratch, Stream, SubviewRead, BlockCopy,
)


@dataclass(frozen=True)
class KernelContext:
    """What every device loop of one kernel is planned against: the IR, the target, the
    config's knobs (every one resolved), and the per-loop choices read from them."""

    ir: KernelIR
    target: PlanTarget
    knobs: ResolvedConfig
    strategies: Mapping[int, LoopStrategy]  # `pallas_loop_type`: TileLoop id -> strategy
    folded: frozenset[int]  # `pallas_loop_type` "outer_pipeline": TileLoop ids folded into the grid
    loop_orders: Mapping[int, tuple[int, ...]]  # `loop_orders`: TileLoop id -> its dims' order
    buffer_counts: Mapping[int, int]  # `pallas_load_buffer_count`: TileLoop id -> its streams' depth
    check_ids: Iterator[int]  # range checks are numbered across the kernel's module

    @classmethod
    def of(cls, ir: KernelIR, target: PlanTarget) -> KernelContext:
        knobs = target.knobs
        check_compact_worklist_named(ir, knobs.pallas_loop_type)
        strategies = loop_strategies(ir, knobs.pallas_loop_type)
        loop_orders = {loop.id: tuple(order) for loop, order in zip(multi_dim_loops(ir), knobs.loop_orders)}
        return cls(ir, target, knobs, strategies, folded_loop_ids(ir, knobs.pallas_loop_type), loop_orders,
                   buffer_counts(ir, knobs.pallas_load_buffer_count), itertools.count())

    @property
    def chip_key(self) -> str:
        return str(self.target.tpu.chip_version)


@dataclass(frozen=True)
class Placement:
    """Memory placement of one call: its operands, how each load/store reads its ref, and
    what placing them found (`place_operands` in plan/placement.py)."""

    inputs: tuple[Operand, ...]
    outputs: tuple[Operand, ...]
    input_aliases: Mapping[int, int]  # id of an input Operand -> position of the output it aliases
    updates: tuple[InPlaceUpdate, ...]
    output_axes: tuple[tuple[Operand, frozenset[int]], ...]  # each output and the grid axes it uses
    accesses: Mapping[int, Access]  # node id -> access
    remote_refs: Mapping[int, str]  # symbol id -> ref name of a remote copy's operand
    scratch: tuple[Scratch, ...]  # per-row gathers' and item write-backs' buffers
    scratch_names: frozenset[str]
    data_dependent: tuple[DataDependentRange, ...]  # ranges only the data decides


@dataclass(frozen=True)
class CallDraft:
    """One device loop's plan while the passes fill it in (fields in pass order)."""

    kernel: KernelContext
    call: DeviceLoopCall
    order: tuple[int, ...]  # grid axis a walks dim order[a]
    defined: frozenset[int]  # ids of tensors that hold contents before this call
    view_bases: Mapping[int, Any]  # id of a host view -> the tensor it views
    # decide_worklist
    worklist: Any = None
    worklist_reason: str = ""
    # order_grid
    grid_dims: tuple[TileDim, ...] = ()
    grid_axis_of: Mapping[int, int] | None = None
    # plan_loops
    uses: tuple = ()
    looped: Any = None  # reduction_loops.LoopedReductions
    inner_loops: Mapping[int, LoopPlan] | None = None
    streams: Mapping[int, Stream] | None = None
    # plan_padding
    masks: Mapping[int, tuple[Mask, ...]] | None = None
    carried_masks: Mapping[int, tuple[CarriedMask, ...]] | None = None
    gather_lanes: Mapping | None = None
    padded: Mapping | None = None
    extent_agreements: tuple = ()  # extents.ExtentAgreement: checked in interpret mode
    # place_operands
    placement: Placement | None = None
    # plan_narrowing_reads
    subviews: Mapping[int, SubviewRead] | None = None
    block_copies: Mapping[int, BlockCopy] | None = None
    copy_scratch: tuple[Scratch, ...] = ()
    # plan_remote_copies
    remote: Any = None
    # choose_grid_semantics
    grid: tuple[GridAxis, ...] = ()
    # split_scalar_prefetch
    scalar_prefetch: tuple[Operand, ...] = ()
    scalar_inputs: tuple[Operand, ...] = ()
    inputs: tuple[Operand, ...] = ()
    aliases: Mapping[int, int] | None = None  # input position -> output position
    updates: tuple[InPlaceUpdate, ...] = ()
    accesses: Mapping[int, Access] | None = None
    # number_range_checks
    range_checks: tuple[RangeCheck, ...] = ()
    # assemble_call, then budget_vmem
    plan: PallasCallPlan | None = None

    @property
    def loop(self):
        return self.call.loop
