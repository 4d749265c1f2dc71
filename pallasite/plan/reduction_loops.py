"""`reduction_loops`: a reduction over a whole (`:`) dim, run as a loop over chunks.

A *reduction dim* is the extent of a whole-dim axis (`x[tile_m, :]`) that a
reduction reduces: its source traces back, through elementwise ops, to a load
whose index is `:` on that axis. Reduction dims are listed in order of first
appearance; reductions over whole dims of the same extent share an entry (as
in Helion, where `:` over a size is one reduction dim). `reduction_dims`
lists them for `ConfigSpec`; `plan_reduction_loops` plans a config's choice.

With `reduction_loops[i] = R` (R below the extent), each such reduction is a
loop over ceil(n / R) chunks of R with a carried partial (sum, mean, amax,
amin, prod, all, any; argmax/argmin carry the best value and its index). Its *region*
(the loads and elementwise ops that compute the source along the reduced
axis) is recomputed chunk by chunk from the refs:
a chunk reads `ref[..., pl.ds(c * R, R)]`, so the ops of the region work on
R lanes at a time, and the tail past n is replaced by the reduction's
identity before reducing. Blocks read by a chunked load are padded along the
axis to whole chunks (a resident block, like a tile that overruns the array).

Why recompute rather than slice the whole-row value: Mosaic cannot slice a
value at a dynamic offset, and re-reading VMEM is cheap. A region value the
kernel also needs whole (softmax's `x` for `x - max`, layer norm's `x - mean`)
is still computed whole where the user wrote it; values only the looped
reductions read are not (`LoopedReductions.skipped`), so `x[tile, :].sum(-1)`
never holds the whole row in registers. So multi-pass uses (softmax, layer
norm) are correct: each pass is its own chunk loop.

A region that cannot be chunked (a matmul, view or another reduction along
the dim, a loop-carried value, a tensor written in the same device loop)
raises `exc.BackendUnsupported` (an `InvalidConfig`: another config runs the
kernel) naming the line and saying to set that entry to None. A dim with a
reduction that carries no partials (logsumexp) offers no chunks.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import exc
from ..ir import FullSlice, IfBlock, KernelIR, Load, NewAxis, Node, ScalarIndex, Store, TileLoop, Value, cdiv, ops
from ..ir import walk_nodes
from .index_expr import ZERO
from .access_plans import keeps_axis
from .int64_values import checked_nodes
from .plans import (
    Access, AxisBlock, BlockKind, LoopedReduction, Memory, Operand, PrefixSlice, ReductionChunk,
)
from .tpu_tiling import AxisRule

# Reductions a chunk loop can carry: those whose registry entry says how partials combine.
COMBINABLE = tuple(name for name, op in ops.OPS.items() if op.reduction is not None and op.reduction.partials is not None)


@dataclass(frozen=True)
class ReductionDim:
    """One entry of `reduction_loops`: a whole-dim extent that reductions reduce, and
    the tiling rule of every tensor axis a chunk of it would be read from."""

    extent: int
    rules: tuple[AxisRule, ...]
    combinable: bool = True  # every reduction of the dim carries partials across chunks

    def allows(self, chunk: int) -> bool:
        return all(rule.allows(chunk) for rule in self.rules)

    def candidates(self) -> list[int]:
        """Legal chunk sizes below the extent (powers of two), ascending; none for a dim some
        reduction of which cannot run in chunks (logsumexp)."""
        sizes, size = [], 8
        while self.combinable and size < self.extent:
            if self.allows(size):
                sizes.append(size)
            size *= 2
        return sizes


@dataclass(frozen=True)
class _Draft:
    """A looped reduction before its accesses are planned."""

    node: Node
    axis: int
    extent: int
    chunk: int
    entry: int
    region: tuple[Node, ...]  # program order
    chunk_axes: dict  # value id -> the axis carrying the reduced dim
    chunked_axes: tuple[tuple[int, int], ...]  # (tensor symbol id, tensor axis) read in chunks

    @property
    def trips_length(self) -> int:
        """The length of whole chunks covering the dim."""
        return cdiv(self.extent, self.chunk) * self.chunk


class LoopedReductions:
    """The drafts of one device loop's looped reductions, then their finished records."""

    def __init__(self, drafts: list[_Draft], skipped: frozenset[int]):
        self.drafts = drafts
        self.skipped = skipped
        self.padded: set[tuple[int, int]] = set()  # (tensor id, axis) of blocks holding whole chunks

    def padded_axes(self) -> dict[tuple[int, int], int]:
        """(tensor id, axis) -> the block length holding whole chunks."""
        lengths: dict[tuple[int, int], int] = {}
        for draft in self.drafts:
            for key in draft.chunked_axes:
                lengths[key] = max(lengths.get(key, 0), draft.trips_length)
        return lengths

    def unstreamable(self) -> set[int]:
        """Tensors read in chunks whose dim is not whole chunks: they stay resident (a
        stream's window is the dim exactly; a resident block is padded to whole chunks)."""
        return {key[0] for draft in self.drafts if draft.extent % draft.chunk for key in draft.chunked_axes}

    def pad_operand(self, operand: Operand) -> Operand:
        """A VMEM block read in chunks, padded along the chunked axis to whole chunks
        (resident from element 0; whole-dim reads take its first n elements)."""
        lengths = self.padded_axes()
        if operand.memory is not Memory.VMEM_BLOCK or not any(k[0] == operand.symbol.id for k in lengths):
            return operand
        axes, tensor_axis = [], 0
        for block in operand.axes:
            if block.kind is BlockKind.UNIT:
                axes.append(block)
                continue
            length = lengths.get((operand.symbol.id, tensor_axis))
            if length is not None and block.kind in (BlockKind.FULL, BlockKind.RESIDENT) and length > block.size:
                block = AxisBlock(BlockKind.RESIDENT, length, ZERO, block.dim,
                                  reason=f"reduction_loops reads it in chunks; padded to {length}, whole chunks")
            if length is not None:
                self.padded.add((operand.symbol.id, tensor_axis))
            axes.append(block)
            tensor_axis += 1
        return dataclasses.replace(operand, axes=tuple(axes))

    def finish(self, accesses: dict[int, Access]) -> dict[int, LoopedReduction]:
        done = {}
        for draft in self.drafts:
            loads = {}
            for node in draft.region:
                if isinstance(node, Load):
                    loads[node.id] = _chunk_access(draft, node, accesses[node.id], self.padded)
            fill = ops.OPS[draft.node.op].reduction.identity
            done[draft.node.id] = LoopedReduction(
                node_id=draft.node.id, entry=draft.entry, axis=draft.axis, extent=draft.extent,
                chunk=draft.chunk, trips=cdiv(draft.extent, draft.chunk),
                region=tuple(n.id for n in draft.region), chunk_axes=dict(draft.chunk_axes),
                loads=loads, fill=fill, tail_masked=draft.extent % draft.chunk != 0,
                reason=f"reduction_loops[{draft.entry}]={draft.chunk}: {draft.node.op} over a dim of "
                       f"{draft.extent} in {cdiv(draft.extent, draft.chunk)} chunks")
        return done


def reduction_dims(ir: KernelIR) -> list[ReductionDim]:
    """The kernel's reduction dims (`reduction_loops` entries), in order of first appearance."""
    extents: list[int] = []
    rules: dict[int, list[AxisRule]] = {}
    combinable: dict[int, bool] = {}
    for call in ir.device_loops:
        producers = _producers(call.loop.body)
        for node in walk_nodes(call.loop.body):
            axis = _full_dim_axis(node, producers)
            if axis is None:
                continue
            extent = node.args[0].shape[axis]
            if extent not in extents:
                extents.append(extent)
                rules[extent] = []
            combinable[extent] = combinable.get(extent, True) and node.op in COMBINABLE
            for load, tensor_axis in _full_loads(node.args[0], axis, producers):
                tensor = load.tensor
                rule = AxisRule(tensor.name, tensor_axis, len(tensor.shape), tensor.shape[tensor_axis], tensor.dtype)
                if rule not in rules[extent]:
                    rules[extent].append(rule)
    return [ReductionDim(extent, tuple(rules[extent]), combinable[extent]) for extent in extents]


def plan_reduction_loops(ir: KernelIR, body: list, chunks: list | None) -> LoopedReductions:
    """The looped reductions a config's `reduction_loops` asks for in one device loop."""
    if not chunks or all(c is None for c in chunks):
        return LoopedReductions([], frozenset())
    dims = reduction_dims(ir)
    if len(chunks) != len(dims):
        raise exc.InvalidConfig(
            f"reduction_loops has {len(chunks)} entries but the kernel has {len(dims)} reduction dims "
            f"(whole-dim extents reduced: {[d.extent for d in dims]}); give one entry (None or a chunk "
            "size) per dim.")
    entry_of = {dim.extent: i for i, dim in enumerate(dims)}
    producers = _producers(body)
    stored = {node.tensor.id for node in walk_nodes(body) if isinstance(node, Store)}
    drafts = []
    for node in walk_nodes(body):
        axis = _full_dim_axis(node, producers)
        if axis is None:
            continue
        extent = node.args[0].shape[axis]
        entry = entry_of[extent]
        chunk = chunks[entry]
        if chunk is None or chunk >= extent:  # one block holds the whole dim
            continue
        drafts.append(_draft(node, axis, extent, chunk, entry, dims[entry], producers, stored))
    _refuse_checked_regions(body, drafts)
    return LoopedReductions(drafts, _skipped(body, drafts))


def _refuse_checked_regions(body: list, drafts: list[_Draft]) -> None:
    """A value torch holds in int64 is checked whole before its op runs (plan/int64_values.py);
    chunks never hold it whole."""
    checked = checked_nodes(body) if drafts else set()
    for draft in drafts:
        if any(node.id in checked for node in (*draft.region, draft.node)):
            raise exc.BackendUnsupported(
                f"reduction_loops[{draft.entry}]={draft.chunk}: this {draft.node.op} over a dim of {draft.extent} "
                "computes integers torch holds in int64, which interpret mode checks on the whole row (a "
                f"chunk never holds it). Set reduction_loops[{draft.entry}] to None for it, or sum in int32 "
                "(`dtype=torch.int32`) or float32.", draft.node.location)


def _draft(node, axis, extent, chunk, entry, dim: ReductionDim, producers, stored) -> _Draft:
    def refuse(why: str):
        return exc.BackendUnsupported(
            f"reduction_loops[{entry}]={chunk}: this {node.op} over a dim of {extent} cannot run as a "
            f"loop over chunks: {why}. Set reduction_loops[{entry}] to None for it.", node.location)

    if node.op not in COMBINABLE:
        names = "', '".join(COMBINABLE)
        raise refuse(f"only '{names}' carry partials across chunks")
    if not dim.allows(chunk):
        raise exc.InvalidConfig(
            f"reduction_loops[{entry}]={chunk} is not a legal chunk: "
            + "; ".join(r.describe() for r in dim.rules if not r.allows(chunk))
            + f". Legal chunks: {dim.candidates()} or None.")
    chunk_axes: dict[int, int] = {}
    region: dict[int, Node] = {}
    chunked: set[tuple[int, int]] = set()

    def visit(value, value_axis: int) -> None:
        if id(value) in chunk_axes:
            if chunk_axes[id(value)] != value_axis:
                raise refuse(f"'{value.name}' carries the dim on two axes")
            return
        producer = producers.get(id(value))
        if producer is None:
            raise refuse(f"'{value.name or 'a value'}' along the dim is a loop-carried or merged value")
        chunk_axes[id(value)] = value_axis
        if isinstance(producer, Load):
            item, tensor_axis = _load_axis(producer, value_axis)
            if not isinstance(item, FullSlice):
                raise refuse(f"'{producer.tensor.name}' is not read whole (':') along the dim")
            if producer.tensor.id in stored:
                raise refuse(f"'{producer.tensor.name}' is also written in this loop")
            chunked.add((producer.tensor.id, tensor_axis))
        elif isinstance(producer, Store) or type(producer) is not Node or \
                ops.OPS[producer.op].kind is not ops.OpKind.ELEMENTWISE:
            raise refuse(f"'{producer.op}' mixes or moves elements along the dim")
        else:
            out_rank = len(value.shape)
            for operand in producer.args:
                if not isinstance(operand, Value):
                    continue
                operand_axis = value_axis - (out_rank - len(operand.shape))
                if operand_axis >= 0 and operand.shape[operand_axis] == value.shape[value_axis]:
                    visit(operand, operand_axis)
        region[producer.id] = producer

    visit(node.args[0], axis)
    order = {n.id: i for i, n in enumerate(producers.values())}
    ordered = tuple(sorted(region.values(), key=lambda n: order[n.id]))
    return _Draft(node, axis, extent, chunk, entry, ordered, chunk_axes, tuple(sorted(chunked)))


def _chunk_access(draft: _Draft, node: Load, access: Access, padded: set) -> Access:
    """The load's access with its whole-dim ref item replaced by the current chunk."""
    axis = draft.chunk_axes[id(node.outputs[0])]
    _, tensor_axis = _load_axis(node, axis)
    where = f"the read of '{node.tensor.name}'"

    def refuse(why: str):
        return exc.BackendUnsupported(
            f"reduction_loops[{draft.entry}]={draft.chunk}: {where} {why}, so it cannot be read in chunks. "
            f"Set reduction_loops[{draft.entry}] to None for it.", node.location)

    if tuple(access.ref_shape) != tuple(access.value_shape) or access.gather is not None:
        raise refuse("is reshaped (a None axis or a squeezed row)")
    if (node.tensor.id, tensor_axis) not in padded and draft.extent % draft.chunk:
        raise refuse(f"is streamed by an inner loop and its dim of {draft.extent} is not a multiple "
                     f"of {draft.chunk}")
    items = list(access.ref_index)  # a whole ref, or a stream slot then the window: complete it
    positions = [i for i, item in enumerate(items) if keeps_axis(item)]
    missing = len(access.ref_shape) - len(positions)
    positions += range(len(items), len(items) + missing)
    items += [FullSlice()] * missing
    position = positions[axis]
    if not isinstance(items[position], (FullSlice, PrefixSlice)):
        raise refuse("does not read the whole dim from its ref")
    items[position] = ReductionChunk(draft.node.id, draft.chunk)
    ref_shape = list(access.ref_shape)
    ref_shape[axis] = draft.chunk
    return dataclasses.replace(access, ref_index=tuple(items), ref_shape=tuple(ref_shape),
                               value_shape=tuple(ref_shape))


def _skipped(body: list, drafts: list[_Draft]) -> frozenset[int]:
    """Region nodes only looped reductions read: they are not computed whole."""
    looped = {d.node.id: d for d in drafts}
    candidates = {n.id for d in drafts for n in d.region}
    consumers = _consumers(body)
    changed = True
    while changed:
        changed = False
        for node_id in list(candidates):
            for consumer in consumers.get(node_id, [None]):
                if consumer is None or (consumer not in candidates and consumer not in looped):
                    candidates.discard(node_id)
                    changed = True
                    break
    return frozenset(candidates)


def _consumers(body: list) -> dict[int, list]:
    """Producer node id -> the ids of the nodes reading its outputs (None: a loop or an if
    reads it)."""
    producer_of = {id(v): n.id for n in walk_nodes(body) for v in getattr(n, "outputs", ())}
    result: dict[int, list] = {}

    def read(operand, reader) -> None:
        if isinstance(operand, Value) and id(operand) in producer_of:
            result.setdefault(producer_of[id(operand)], []).append(reader)
        elif isinstance(operand, (tuple, list)):
            for item in operand:
                read(item, reader)

    def visit(items) -> None:
        for item in items:
            if isinstance(item, TileLoop):
                for dim in item.dims:
                    read((dim.begin, dim.end), None)
                for carried in item.carried:
                    read((carried.init, carried.result), None)
                visit(item.body)
            elif isinstance(item, IfBlock):
                read(item.condition, None)
                for merged in item.outputs:
                    read((merged.then_value, merged.else_value), None)
                for branch in item.bodies:
                    visit(branch)
            else:
                read(item.args, item.id)
                for index in getattr(item, "index", ()):
                    if isinstance(index, ScalarIndex):
                        read(index.index, item.id)

    visit(body)
    return result


def _producers(body: list) -> dict[int, Node]:
    return {id(v): node for node in walk_nodes(body) for v in getattr(node, "outputs", ())}


def _reduced_axis(node) -> int | None:
    if type(node) is not Node or ops.OPS[node.op].kind is not ops.OpKind.REDUCTION:
        return None
    source = node.args[0]
    if not isinstance(source, Value) or not source.shape:
        return None
    dims = node.kwargs.get("dim")
    if dims is None:
        return 0 if len(source.shape) == 1 else None
    return dims[0] if len(dims) == 1 else None


def _full_dim_axis(node, producers) -> int | None:
    """The reduced axis of a reduction whose source reads it whole from a tensor."""
    axis = _reduced_axis(node)
    if axis is None or not _full_loads(node.args[0], axis, producers):
        return None
    return axis


def _full_loads(value, axis: int, producers, seen=None) -> list[tuple[Load, int]]:
    """The loads reading `value`'s `axis` whole (':'), through elementwise ops."""
    seen = set() if seen is None else seen
    if (id(value), axis) in seen or value.shape[axis] == 1:
        return []
    seen.add((id(value), axis))
    producer = producers.get(id(value))
    if isinstance(producer, Load):
        item, tensor_axis = _load_axis(producer, axis)
        return [(producer, tensor_axis)] if isinstance(item, FullSlice) else []
    if type(producer) is not Node or ops.OPS[producer.op].kind is not ops.OpKind.ELEMENTWISE:
        return []
    found = []
    for operand in producer.args:
        if isinstance(operand, Value):
            operand_axis = axis - (len(value.shape) - len(operand.shape))
            if operand_axis >= 0 and operand.shape[operand_axis] == value.shape[axis]:
                found += _full_loads(operand, operand_axis, producers, seen)
    return found


def _load_axis(load: Load, value_axis: int):
    """The index item that makes axis `value_axis` of a load's value, and its tensor axis."""
    tensor_axis = 0
    position = 0
    for item in load.index:
        if isinstance(item, ScalarIndex):
            tensor_axis += 1
            continue
        if position == value_axis:
            return item, (None if isinstance(item, NewAxis) else tensor_axis)
        position += 1
        if not isinstance(item, NewAxis):
            tensor_axis += 1
    return None, None
