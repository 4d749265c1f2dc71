"""Memory placement: the planning pass deciding, per tensor a device loop touches, its
operand (a BlockSpec block, SMEM, a streamed or DMA-copied HBM ref), its role (input,
output, updated in place) and the ref access of each of its loads and stores.

- **roles**: read only -> input (never aliased); written, not read, and without prior
  contents -> pure output; otherwise updated in place -> input + output aliased, recorded
  as an `InPlaceUpdate`.
- a tensor an inner loop streams is a pl.ANY operand (`_place_stream`); a gathered table
  past the VMEM threshold stays in HBM and is read row by row (`_place_row_gather`); the
  rows a flattened worklist's items write go to HBM by DMA (`_place_write_back`); any other
  tensor is a block (`_place_block`).
"""
from __future__ import annotations

import dataclasses

from .. import exc
from ..config import IndirectAccessMode
from ..ir import FullSlice
from .bounds import check_access_bounds, check_int32_arithmetic, indexed_bounds
from .draft import CallDraft, Placement
from .gathers import choose_table_lowering, gather_vmem_threshold
from .grid_order import RevisitedBlock
from .loops import strategy_of
from .loops.streams import stream_operand
from .memory import check_block_legality, plan_access, plan_operand
from .plans import Access, InPlaceUpdate, Memory, Operand, RefOffset, Scratch, ScratchKind
from .remote_copies import check_whole_operand, remote_symbols
from .row_gathers import plan_row_gather
from .scatters import check_scattered_output


def place_operands(draft: CallDraft) -> CallDraft:
    """Every tensor the loop touches placed in memory, in order of first use."""
    placing = _Placing(draft)
    check_int32_arithmetic(draft.loop.body)
    for use in draft.uses:
        for node in use.nodes:
            placing.data_dependent += check_access_bounds(node, guarded=node.id in use.guarded)
        placing.place(use)
    placing.data_dependent += indexed_bounds(draft.loop.body)
    placing.inputs += placing.index_operands.values()
    return dataclasses.replace(draft, placement=Placement(
        inputs=tuple(placing.inputs), outputs=tuple(placing.outputs), input_aliases=placing.aliases,
        updates=tuple(placing.updates), output_axes=tuple(placing.output_axes), accesses=placing.accesses,
        remote_refs=placing.remote_refs, scratch=tuple(placing.scratch),
        scratch_names=frozenset(placing.scratch_names), data_dependent=tuple(placing.data_dependent)))


class _Placing:
    """The placement pass's working lists while it visits the loop's tensors."""

    def __init__(self, draft: CallDraft):
        self.draft = draft
        kernel = draft.kernel
        self.mode = IndirectAccessMode(kernel.knobs.pallas_indirect_access_mode)
        self.vmem_capacity = kernel.target.vmem_capacity_bytes
        self.vmem_limit = kernel.knobs.vmem_limit_bytes
        self.remote_ids = remote_symbols(draft.loop.body)
        worklist = draft.worklist
        self.write_backs = {w.symbol.id: w for w in (worklist.write_backs if worklist else ())}
        self.inputs: list[Operand] = []
        self.outputs: list[Operand] = []
        self.updates: list[InPlaceUpdate] = []
        self.aliases: dict[int, int] = {}
        self.accesses: dict = {}
        self.output_axes: list[tuple[Operand, frozenset[int]]] = []
        self.remote_refs: dict[int, str] = {}
        self.index_operands: dict = {}  # per-row DMA gathers: SMEM copies of their index tensors
        self.scratch: list = []
        self.scratch_names: set[str] = set()
        self.data_dependent: list = []
        self.grid_trips = {draft.grid_axis_of[dim.id]: dim.static_trips
                           for dim in draft.loop.dims if dim.id in draft.grid_axis_of}

    def place(self, use) -> None:
        draft = self.draft
        stream = draft.streams.get(use.symbol.id)
        if stream is not None:
            return self._place_stream(stream, use)
        operand, used_axes = plan_operand(use, draft.grid_axis_of, self.grid_trips)
        operand = draft.looped.pad_operand(operand)
        try:
            check_block_legality(operand)
        except exc.PallasiteError as err:
            raise err.with_location(use.nodes[0].location)
        if use.symbol.id in self.remote_ids:
            check_whole_operand(operand, use.nodes[0].location)
            self.remote_refs[use.symbol.id] = operand.ref_name
        check_scattered_output(operand, use.stores, self.vmem_capacity)
        lowering = choose_table_lowering(operand, use.nodes, self.mode, self.vmem_capacity, self.vmem_limit)
        if lowering is not None and lowering.row_dma:  # the table stays in HBM
            return self._place_row_gather(use, lowering)
        written_back = self.write_backs.get(use.symbol.id)
        if written_back is not None:  # the items' rows go to HBM by DMA (plan/worklist_isolation.py)
            return self._place_write_back(written_back, use)
        self._place_block(use, operand, used_axes)
        for node in use.nodes:
            self.accesses[node.id] = plan_access(node, operand)
            if lowering is not None and self.accesses[node.id].gather is not None:
                self.accesses[node.id] = dataclasses.replace(self.accesses[node.id], gather=dataclasses.replace(
                    self.accesses[node.id].gather, reason=lowering.reason))

    def _place_block(self, use, operand: Operand, used_axes: frozenset[int]) -> None:
        """A block operand: an input, a pure output, or updated in place (aliased)."""
        rank, location = len(self.draft.loop.dims), use.nodes[0].location
        reorderable = self.draft.worklist is None
        if not use.stores:
            self.inputs.append(operand)
        elif not use.loads and id(use.symbol) not in self.draft.defined:
            first_visit_axes(operand, used_axes, rank, location, use.stores, reorderable=reorderable)
            self.outputs.append(operand)
            self.output_axes.append((operand, used_axes))
        else:
            in_operand = dataclasses.replace(operand, ref_name=f"{use.symbol.name}_in_ref")
            self.aliases[id(in_operand)] = len(self.outputs)
            self.inputs.append(in_operand)
            self.outputs.append(operand)
            self.output_axes.append((operand, used_axes))
            self.updates.append(InPlaceUpdate(
                use.symbol, in_operand.ref_name, operand.ref_name,
                first_visit_axes(operand, used_axes, rank, location, use.stores,
                                 "is updated in place" if use.loads else "is written", reorderable),
                changes_along=self._folded_range_axis(used_axes),
            ))

    def _folded_range_axis(self, used_axes: frozenset[int]) -> int | None:
        """The grid axis of the folded range among `used_axes` (the steps it skips repeat a
        block; a fold has one such dim at most, plan/folded_loops.py)."""
        return next((self.draft.grid_axis_of[dim_id] for dim_id in self.draft.call.folded_trips
                     if self.draft.grid_axis_of[dim_id] in used_axes), None)

    def _place_row_gather(self, use, lowering) -> None:
        """A gathered table past the VMEM threshold: in HBM, each gathered row copied by DMA."""
        operand = Operand(use.symbol, f"{use.symbol.name}_hbm", Memory.HBM)
        self.inputs.append(operand)
        threshold = gather_vmem_threshold(self.vmem_capacity, self.vmem_limit)
        for node in use.loads:
            self.accesses[node.id], scratch = plan_row_gather(
                node, operand, lowering.reason, self.index_operands, self.draft.gather_lanes.get(node.id),
                threshold, self.scratch_names)
            self.scratch += scratch

    def _place_stream(self, stream, use) -> None:
        """A streamed tensor is a pl.ANY operand; an output that already holds data is aliased
        (its HBM buffer is written window by window, so the rest keeps its contents)."""
        strategy = strategy_of(self.draft.inner_loops[stream.loop_id])
        operand, used_axes = stream_operand(stream, self.draft.grid_axis_of, strategy.windows_from_block_multiples)
        if not stream.direction.writes:
            self.inputs.append(operand)
        else:
            if id(use.symbol) in self.draft.defined:
                in_operand = dataclasses.replace(operand, ref_name=f"{use.symbol.name}_in_hbm")
                self.aliases[id(in_operand)] = len(self.outputs)
                self.inputs.append(in_operand)
            self.outputs.append(operand)
            self.output_axes.append((operand, used_axes))
        for node in use.nodes:
            self.accesses[node.id] = strategy.stream_access(node, stream)

    def _place_write_back(self, write_back, use) -> None:
        """An output the items write by DMA: in HBM, aliased to its initial contents when it has
        any (the rows no item writes keep them), each store into the item's scratch (its rows by
        the axes no head grid index selects: `out[tile_q, h, :]` stores a [block, D] tile)."""
        symbol, worklist = use.symbol, self.draft.worklist
        operand = Operand(symbol, write_back.hbm_ref, Memory.HBM)
        if id(symbol) in self.draft.defined:
            in_operand = Operand(symbol, f"{symbol.name}_in_hbm", Memory.HBM)
            self.aliases[id(in_operand)] = len(self.outputs)
            self.inputs.append(in_operand)
        self.outputs.append(operand)
        rest = write_back.scratch_shape[1:]
        offset = worklist.row_offset
        for node in use.stores:
            shape = (worklist.tile_dim.block_size, *rest)
            self.accesses[node.id] = Access(write_back.scratch,
                                            (RefOffset((offset,), shape[0]), *(FullSlice(),) * len(rest)),
                                            shape, shape)
        self.scratch.append(Scratch(write_back.scratch, ScratchKind.VMEM, write_back.scratch_shape, symbol.dtype))
        self.scratch.append(Scratch(write_back.semaphore, ScratchKind.DMA_SEMAPHORES, (1,), None))


def first_visit_axes(operand: Operand, used_axes: frozenset[int], rank: int, location, stores: list,
                     how: str = "is written", reorderable: bool = True) -> tuple[int, ...]:
    """Grid axes along which a written tensor's block stays the same.

    Its block is revisited on consecutive steps only if those axes are the
    innermost ones; otherwise the block would be written back and fetched
    again between visits, racing with itself (an output's revisit would even
    start from a stale buffer and overwrite what the earlier visit wrote).
    (`stores`: the tensor's stores; `reorderable`: whether plan/grid_order.py may
    reorder the grid to fix it — a worklist orders its own.)
    """
    unused = [a for a in range(rank) if a not in used_axes]
    if unused and unused != list(range(rank - len(unused), rank)):
        name = operand.symbol.name
        whole = "".join(f" Its axis {axis} is one whole block: {block.reason}."
                        for axis, block in enumerate(operand.axes) if block.reason)
        raise RevisitedBlock(
            f"'{name}' {how} with a block that does not change along grid "
            f"axis {unused[0]}, which is not innermost, so programs would overwrite each "
            f"other's writes.{whole} Index '{name}' by every outer tile (a tile, or a row "
            "chosen by tile.id / tile.begin // block_size on a leading or second-to-last "
            "axis), or make that tile the last dimension of the loop.",
            location, operand, unused, stores, reorderable,
        )
    return tuple(unused)
