"""The VMEM ceiling of one pallas_call plan: every buffer Mosaic allocates, against the chip.

`estimate_vmem_bytes` adds up, padded to the TPU's native tiles (see `padded_bytes`):
- each BlockSpec operand's block, twice: the grid pipeline double-buffers every
  VMEM block, inputs and outputs;
- each streamed window (fori_loop DMA scratch, emit_pipeline buffers), times its
  `Stream.buffers` (`pallas_load_buffer_count`; outputs of an emit_pipeline stay
  double-buffered);
- every other VMEM scratch buffer: carried values of an emit_pipeline, resident
  gather windows, looped-reduction and per-row-gather buffers;
- the largest set of body values live at once (`peak_live_bytes`), with the arrays
  a node's lowering materializes while it runs (`transient_bytes`: a gather's one-hot
  and selected windows, below): Mosaic keeps
  a vector value bigger than the 64-vreg file in VMEM it allocates itself, and
  a value carried by a fori_loop or an unrolled loop lives through the whole
  loop. Both count against the scoped-VMEM limit.
DMA semaphores live in semaphore memory and SMEM scratch (step counters, DMA
indices) in SMEM: neither takes VMEM.

`default_vmem_limit(estimate, chip, capacity)` is the plan's decision on the compiler
parameter: none while the estimate fits the chip's scoped-VMEM default
(`SCOPED_VMEM_DEFAULT`), else the estimate plus a quarter of headroom, at most
the capacity. `vmem_limit_for` rejects (`exc.VmemOverflow`, an `InvalidConfig`)
an estimate over the capacity, so a tuner skips the config.
"""
from __future__ import annotations

import torch

from .. import exc
from ..ir import Carried, IfBlock, Load, Node, Store, TileLoop, Value, cdiv, ops
from ..ir.sizes import SymbolicSize
from .plans import Access, BlockKind, GatherMethod, Memory, PallasCallPlan, ScratchKind
from .tpu_tiling import LANES, SUBLANES

MIB = 2 ** 20

# Mosaic's default scoped-VMEM limit per generation (JAX's Pallas TPU docs: 16 MiB on
# v4 and v5, 32 MiB from v6e); a kernel needing more sets `vmem_limit_bytes`.
SCOPED_VMEM_DEFAULT = {"v4": 16 * MIB, "v4i": 16 * MIB, "v5e": 16 * MIB, "v5p": 16 * MIB,
                       "v6e": 32 * MIB, "7": 32 * MIB, "7x": 32 * MIB, "8i": 32 * MIB}
LIMIT_HEADROOM = 1.25  # the limit we set: the estimate plus a quarter


def sublane_tile(dtype) -> int:
    """Rows of one native VMEM tile: 8 for 32-bit, 16 for 16-bit, 32 for 8-bit types
    (and bool), which pack 2 or 4 rows per 32-bit sublane."""
    itemsize = getattr(dtype, "itemsize", 4) or 4
    return SUBLANES * max(1, 4 // itemsize)


def padded_bytes(shape, dtype) -> int:
    """Bytes of a VMEM buffer of `shape`, its last two dims padded to the dtype's native
    tile: (8, 128) float32, (16, 128) bfloat16, (32, 128) int8 and bool."""
    dims = [1 if d is None else d for d in shape] or [1]
    dims[-1] = cdiv(dims[-1], LANES) * LANES
    if len(dims) >= 2:
        dims[-2] = cdiv(dims[-2], sublane_tile(dtype)) * sublane_tile(dtype)
    total = dtype.itemsize
    for d in dims:
        total *= d
    return total


def buffer_bytes(plan: PallasCallPlan) -> int:
    """The buffers the pallas_call itself allocates: double-buffered blocks, n-buffered
    stream windows and VMEM scratch (what its lowered signature and pipelines declare)."""
    total = sum(2 * size for _, size in _block_operands(plan))
    stream_buffers = set()
    for loop_plan in plan.inner_loops.values():
        for stream in loop_plan.streams:
            total += stream.buffers * padded_bytes(stream.window_shape, stream.symbol.dtype)
            stream_buffers.add(stream.buffer)
    for scratch in plan.scratch:
        if scratch.kind is ScratchKind.VMEM and scratch.name not in stream_buffers:
            total += padded_bytes(scratch.shape, scratch.dtype)
    return total


def _block_operands(plan: PallasCallPlan):
    """Each VMEM-block operand with the bytes of one of its (double-buffered) blocks."""
    for op in (*plan.inputs, *plan.outputs):
        if op.memory is Memory.VMEM_BLOCK:
            yield op, padded_bytes(op.block_shape, op.symbol.dtype)


def overflow_advice(plan: PallasCallPlan, copying: tuple[str, ...], count: int = 3) -> str:
    """For a VMEM overflow message: the `count` largest parts of the estimate — double-buffered
    blocks (with why an axis is whole, when the plan recorded it), scratch buffers (carried
    values, windows), the body's values live at once — and what to change. Tiles that start
    at data-dependent rows keep the tensors they index resident unless the loop copies
    their windows by DMA (`fori_loop`: `copies_unaligned_windows`), and smaller blocks do
    not shrink those."""
    blocks = sorted(_block_operands(plan), key=lambda item: -item[1])
    parts, seen = [], set()  # (bytes, text)
    for op, size in blocks:
        if op.symbol.id in seen:
            continue
        seen.add(op.symbol.id)
        why = next((axis.reason for axis in op.axes if axis.reason), "")
        parts.append((2 * size, f"'{op.symbol.name}' 2 x {size / MIB:.1f} MiB" + (f" ({why})" if why else "")))
    streamed = {stream.buffer for loop_plan in plan.inner_loops.values() for stream in loop_plan.streams}
    for scratch in plan.scratch:
        if scratch.kind is ScratchKind.VMEM and scratch.name not in streamed:
            size = padded_bytes(scratch.shape, scratch.dtype)
            parts.append((size, f"scratch '{scratch.name}' {size / MIB:.1f} MiB"))
    live = peak_live_bytes(plan)
    if live:
        parts.append((live, f"the body's values live at once {live / MIB:.1f} MiB"))
    total = sum(size for size, _ in parts)
    described = [text for size, text in sorted(parts, key=lambda part: -part[0])[:count] if size >= total / 100]
    unaligned = [op for op, _ in blocks if any(
        axis.kind is BlockKind.RESIDENT and axis.dim is not None and not axis.dim.begin_aligned for axis in op.axes)]
    written = [op.symbol.name for op in unaligned if any(op is out for out in plan.outputs)]
    if unaligned and copying and any(loop.strategy not in copying for loop in plan.inner_loops.values()):
        advice = ("tiles starting at data-dependent rows keep the tensors they index resident, whatever the "
                  f"block size; pallas_loop_type={copying[0]!r} copies their windows by DMA instead")
    elif written:
        advice = (f"'{written[0]}' is written at tiles starting at data-dependent rows, so all its rows stay "
                  "resident whatever the block size (a fori_loop streams such an output only when one loop's "
                  "body writes it, or reads and writes it, directly at one window form, and its range ends "
                  "inside it along one axis other than the last); tile its other dims in the outer loop, around "
                  "the data-dependent tile loop (`for tile_e, tile_n in hl.tile([E, N], block_size=[1, None]):` "
                  "then `for tile_t in hl.tile(start, end):`), so its resident block is one tile of them")
    elif _smallest_tiles([op for op, _ in blocks]):
        advice = ("the tiled axes are down to one sublane tile (8; below it a block is not aligned and its "
                  "tensor stays resident), so the whole axes are what does not fit; loop over them in tiles "
                  "(an inner `for tile_n in hl.tile(n):` carrying partial results, or reduction_loops=[...] "
                  "for a reduction over them)")
    else:
        advice = "use smaller block sizes"
    return f"the largest: {', '.join(described)}; {advice}" if described else advice


def _smallest_tiles(operands: list) -> bool:
    """Whether the operands' tiled axes are all one sublane tile (8) or less: below that a
    block is not aligned and its tensor stays resident, so smaller blocks seldom help."""
    tiled = [axis.size for op in operands for axis in op.axes if axis.kind is BlockKind.TILE]
    return bool(tiled) and all(size is not None and size <= SUBLANES for size in tiled)


def estimate_vmem_bytes(plan: PallasCallPlan) -> int:
    """The call's buffers plus its body's peak of live values (see the module docstring)."""
    return buffer_bytes(plan) + peak_live_bytes(plan)


def peak_live_bytes(plan: PallasCallPlan) -> int:
    """The most bytes of body values live at one point, in program order: a value lives
    from its node to its last use; one an inner loop reads from outside, or carries, lives
    through the whole loop. Values only looped reductions read are never whole (skipped)."""
    order: list = []  # nodes in program order
    loop_spans: list[tuple[int, int, TileLoop]] = []

    def linearize(body: list) -> None:
        for item in body:
            if isinstance(item, TileLoop):
                start = len(order)
                linearize(item.body)
                loop_spans.append((start, len(order) - 1, item))
            elif isinstance(item, IfBlock):
                linearize(item.then_body)
                linearize(item.else_body)
            else:
                order.append(item)

    linearize(plan.call.loop.body)
    born: dict[int, tuple[int, int]] = {}  # value id -> (position, bytes)
    last: dict[int, int] = {}
    transient: dict[int, int] = {}  # position -> bytes its lowering holds while it runs
    for position, node in enumerate(order):
        if node.id in plan.skipped_nodes:
            continue
        transient[position] = transient_bytes(node, plan.accesses.get(node.id))
        for value in node.outputs:
            if isinstance(value, Value) and value.shape:
                born[id(value)] = (position, padded_bytes(value.shape, value.dtype))
                last.setdefault(id(value), position)
        for arg in (*node.args, *node.kwargs.values()):
            if isinstance(arg, Value) and id(arg) in born:
                last[id(arg)] = max(last[id(arg)], position)
    for start, end, loop in loop_spans:  # read inside a loop, defined before: live to its end
        for value_id, (position, _) in born.items():
            if position < start and start <= last[value_id] <= end:
                last[value_id] = end
        for carried in loop.carried:
            _extend(carried, born, last, end)
    deltas = [0] * (len(order) + 1)
    for value_id, (position, size) in born.items():
        deltas[position] += size
        deltas[last[value_id] + 1] -= size
    for position, size in transient.items():
        deltas[position] += size
        deltas[position + 1] -= size
    peak = live = 0
    for delta in deltas:
        live += delta
        peak = max(peak, live)
    return peak


def _extend(carried: Carried, born: dict, last: dict, end: int) -> None:
    """A carried value (and its initial value) stays live until the loop ends."""
    for value in (carried.init, carried.result):
        if value is not None and id(value) in born:
            last[id(value)] = max(last[id(value)], end)


def vmem_limit_for(plan: PallasCallPlan, vmem: int, capacity: int, limit: int | None, chip_key: str,
                   copying: tuple[str, ...] = ()) -> int | None:
    """The `vmem_limit_bytes` of a call estimated at `vmem` bytes: the config's `limit`, else
    the default. An estimate over the chip's capacity, a limit over it or a limit below the
    estimate is `exc.VmemOverflow`, so the tuner skips the config. `copying`: the loop types
    that copy unaligned windows by DMA (the registry's; named in the advice)."""
    location = plan.call.loop.location
    if vmem > capacity:
        raise exc.VmemOverflow(
            f"The VMEM working set of this config is estimated at {vmem / 2**20:.1f} MiB, over "
            f"TPU {chip_key}'s {capacity / 2**20:.0f} MiB of VMEM; {overflow_advice(plan, copying)}.",
            location,
        )
    if limit is not None and limit > capacity:
        raise exc.VmemOverflow(
            f"vmem_limit_bytes={limit} ({limit / 2**20:.0f} MiB) is over the {capacity / 2**20:.0f} MiB "
            f"of VMEM TPU {chip_key} has; lower the limit (or leave it out: the plan sets one when needed).",
            location,
        )
    if limit is not None and limit < vmem:
        raise exc.VmemOverflow(
            f"vmem_limit_bytes={limit} is below this config's estimated VMEM working set of "
            f"{vmem} bytes ({vmem / 2**20:.2f} MiB); raise the limit or use smaller block sizes.",
            location,
        )
    return default_vmem_limit(vmem, chip_key, capacity) if limit is None else limit


def default_vmem_limit(estimate: int, chip_key: str, capacity: int) -> int | None:
    """The `vmem_limit_bytes` a plan sets: None when `estimate` fits the scoped default.
    An estimate that varies with the sizes (static_shapes=False) gets the chip's whole
    VMEM, a number every size of the variant shares (this call's estimate would be baked
    into the code and pin the variant to one size)."""
    if estimate <= SCOPED_VMEM_DEFAULT.get(chip_key, 16 * MIB):
        return None
    if isinstance(estimate, SymbolicSize):
        return capacity
    return min(capacity, int(estimate * LIMIT_HEADROOM))


# ---------------------------------------------------------------- transients --
# The arrays a node's lowering materializes besides its result. Mosaic has no vector
# gather, so a gather compares indices with an iota and reads the whole window: the
# one-hot and the selected copies are as large as the window times the index's lanes, far
# larger than the result. They live only while the node runs, but count against the
# scoped-VMEM limit like any value (tests/test_vmem_transients.py checks these figures
# against the largest vector of the lowered Mosaic kernels). The shapes follow the texts of
# codegen/gathers.py (one-hot matmul, select-and-sum), codegen/scatters.py and the
# torch.gather rule of codegen/matmul_rules.py.

def transient_bytes(node: Node, access: Access | None) -> int:
    """The bytes of the arrays `node`'s lowering materializes at once, beside its output."""
    if isinstance(node, Load) and access is not None and access.gather is not None:
        return _gather_bytes(node, access)
    if isinstance(node, Store) and access is not None and access.scatter is not None:
        return _scatter_bytes(node, access)
    if not isinstance(node, (Load, Store)) and node.op in ops.OPS and ops.OPS[node.op].kind is ops.OpKind.INDEXED:
        return _indexed_bytes(node)
    return 0


def _gather_bytes(node: Load, access: Access) -> int:
    gather = access.gather
    if gather.method is GatherMethod.ROW_DMA:  # its rows arrive in scratch (counted as such)
        return 0
    return resident_gather_bytes(tuple(access.ref_shape), gather.axis, gather.index.shape[0], gather.rows,
                                 node.tensor.dtype, gather.method)


def resident_gather_bytes(window: tuple, axis: int, lanes: int, rows: int, dtype: torch.dtype,
                          method: GatherMethod) -> int:
    """What a resident gather of `lanes` indices from the `rows` of `window`'s axis `axis`
    materializes: the window it reads, its one-hot and selected copies."""
    picked = (*window[:axis], lanes, *window[axis + 1:])
    total = padded_bytes(window, dtype) + padded_bytes((lanes, rows), torch.bool)  # the window, the one-hot
    if method is GatherMethod.SELECT_SUM:  # where(one-hot, window) over (lanes, rows) at once
        total += padded_bytes((*window[:axis], lanes, rows, *window[axis + 1:]), torch.int32)
        # an 8- or 16-bit window is widened to int32 first (Mosaic reduces 32-bit integers)
        return total if dtype == torch.int32 else total + padded_bytes(window, torch.int32)
    # one-hot matmul: the one-hot and the window in f32, which entries are finite, the two
    # masked windows (values, non-finite codes) and their two products
    total += padded_bytes((lanes, rows), torch.float32) + padded_bytes(window, torch.bool)
    total += 2 * padded_bytes(window, torch.float32) + 2 * padded_bytes(picked, torch.float32)
    if dtype != torch.float32:
        total += padded_bytes(window, torch.float32)
    return total


def _scatter_bytes(node: Store, access: Access) -> int:
    scatter = access.scatter
    window = tuple(access.ref_shape)
    lanes, rows, axis = scatter.index.shape[0], scatter.rows, scatter.axis
    value = (*window[:axis], lanes, *window[axis + 1:])
    # the window's old rows, the (rows, lanes) hits, last writers and one-hot, the picked rows
    total = padded_bytes(window, node.tensor.dtype) + 2 * padded_bytes((rows, lanes), torch.bool)
    total += padded_bytes((rows, lanes), torch.int32) + padded_bytes(window, torch.float32)
    if scatter.method is GatherMethod.SELECT_SUM:
        return total + padded_bytes((*window[:axis], rows, lanes, *window[axis + 1:]), torch.int32)
    # one-hot matmul: the one-hot in f32, the value's finite mask, masked copies and codes
    return total + padded_bytes((rows, lanes), torch.float32) + 3 * padded_bytes(value, torch.float32) \
        + padded_bytes(window, torch.float32)


def _indexed_bytes(node: Node) -> int:
    """torch.gather: the one-hot over the input's axis and the selected 32-bit patterns, of the
    index's shape with the input's axis in place of (or, for several positions, beside) it."""
    source, index = node.args
    dim = node.kwargs["dim"]
    rows = source.shape[dim]
    if index.shape[dim] == 1:
        shape = tuple(rows if axis == dim else size for axis, size in enumerate(index.shape))
    else:
        shape = (*index.shape[:dim + 1], rows, *index.shape[dim + 1:])
    total = padded_bytes(shape, torch.bool) + padded_bytes(shape, torch.int32)
    if source.dtype in (torch.bfloat16, torch.float16):  # widened to f32 first
        total += padded_bytes(source.shape, torch.float32)
    return total
