"""Gathers: how a load through an index vector (`table[idx, :]`) runs on a TPU.

Mosaic has no vector gather, so there are two lowerings, chosen here per
gathered table of a device loop (`choose_table_lowering`) and recorded in
each gather's `Gather` with the reason:

- resident (small tables): the gathered axis of the table stays whole in VMEM
  (a FULL block, or a resident one when tiles also index that axis) and the
  gather is computed from that window: a one-hot matmul for float tables
  (exact at HIGHEST precision: each output is one product by 1.0 plus zeros),
  a select-and-sum for int32 tables (integers must not round through the
  MXU's float passes). Both read the whole table per gather.
- per-row DMA (large tables, `plan/row_gathers.py`): the table stays in HBM
  and each index's row is copied into VMEM scratch by its own DMA.

`pallas_indirect_access_mode` (a config key) forces one: "auto" (the default)
keeps a table resident while its VMEM block with what the gather materializes
(the one-hot of every index over the gathered axis and the selected copies:
`plan/vmem.py` `resident_gather_bytes`) is at most
`GATHER_TABLE_VMEM_FRACTION` of the VMEM budget (the chip's VMEM, or the
config's `vmem_limit_bytes` when that is smaller: the documented way to move
the threshold) and copies rows by DMA past it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import exc
from ..config import IndirectAccessMode
from ..ir import GatherIndex, Load, NewAxis, Value
from ..ir.sizes import SymbolicSize
from .plans import Gather, GatherMethod, Memory, Operand
from .row_gathers import is_gather, row_dma_refusal
from .vmem import resident_gather_bytes

# A gathered table may hold at most this fraction of the VMEM budget: the rest
# is for the other blocks, their double buffers, and the one-hot operand.
GATHER_TABLE_VMEM_FRACTION = 0.25


# Floats are picked by the exact one-hot matmul in float32 (every 16-bit float is a
# float32); integers by select-and-sum in int32, which narrower ones widen to first
# (Mosaic reduces 32-bit integers only).
_METHODS = {
    torch.float32: GatherMethod.ONE_HOT_MATMUL,
    torch.bfloat16: GatherMethod.ONE_HOT_MATMUL,
    torch.float16: GatherMethod.ONE_HOT_MATMUL,
    torch.int32: GatherMethod.SELECT_SUM,
    torch.int16: GatherMethod.SELECT_SUM,
    torch.int8: GatherMethod.SELECT_SUM,
    torch.uint8: GatherMethod.SELECT_SUM,
}


@dataclass(frozen=True)
class TableLowering:
    """How the gathers of one table in one device loop run, and why."""

    row_dma: bool
    reason: str


def check_gather_dtype(node: Load) -> None:
    if node.tensor.dtype not in _METHODS:
        supported = ", ".join(str(dtype).replace("torch.", "") for dtype in _METHODS)
        raise exc.UnsupportedOperation(
            f"Gathering from '{node.tensor.name}' ({node.tensor.dtype}) is not supported; "
            f"gathers read {supported} tables. Convert the table on the host.", node.location)


def plan_gather(node: Load, axis: int, rows: int) -> Gather:
    """The resident gather of `node`, which reads all `rows` of ref axis `axis` of its window."""
    (item,) = [item for item in node.index if isinstance(item, GatherIndex)]
    check_gather_dtype(node)
    return Gather(item.value, axis, rows, _METHODS[node.tensor.dtype])


def gather_vmem_threshold(vmem_capacity: int, vmem_limit: int | None) -> int:
    """The largest VMEM block a resident gathered table may have."""
    budget = vmem_capacity if vmem_limit is None else min(vmem_capacity, vmem_limit)
    return int(budget * GATHER_TABLE_VMEM_FRACTION)


def choose_table_lowering(operand: Operand, nodes: list, mode: IndirectAccessMode,
                          vmem_capacity: int, vmem_limit: int | None) -> TableLowering | None:
    """Resident or per-row DMA for a table (None when none of its accesses `nodes` gathers).

    Raises when the mode's lowering cannot run: a resident table over the
    threshold, or a per-row DMA the gathers' forms do not allow."""
    gathers = [node for node in nodes if is_gather(node)]
    if not gathers or operand.memory is not Memory.VMEM_BLOCK:
        return None
    for node in gathers:
        check_gather_dtype(node)
    name = operand.symbol.name
    size = max(_resident_bytes(operand, node) for node in gathers)
    threshold = gather_vmem_threshold(vmem_capacity, vmem_limit)
    # With static_shapes=False the reason (quoted in the generated code) names the block's
    # sizes instead of this call's bytes, so the text serves every size of the bucket.
    block = (f"its VMEM block and the gather's one-hot take {_mib(size)}" if not isinstance(size, SymbolicSize) else
             f"its VMEM block is {' x '.join(str(e) for e in operand.block_shape)} "
             f"{str(operand.symbol.dtype).replace('torch.', '')} "
             "at each call's sizes")
    sizes = (f"{block}, the threshold for resident gathered tables "
             f"{_mib(threshold)} ({GATHER_TABLE_VMEM_FRACTION:.0%} of {_mib(threshold / GATHER_TABLE_VMEM_FRACTION)} "
             "of VMEM)")
    if mode is IndirectAccessMode.RESIDENT or (mode is IndirectAccessMode.AUTO and size <= threshold):
        if size > threshold:
            raise _too_large(operand, size, threshold, vmem_capacity, vmem_limit, gathers[0],
                             "pallas_indirect_access_mode='resident' keeps it whole in VMEM; use 'auto' or "
                             "'dma' to copy its rows by DMA.")
        why = ("pallas_indirect_access_mode='resident'" if mode is IndirectAccessMode.RESIDENT
               else f"'{name}' fits VMEM: {sizes}")
        return TableLowering(False, why)
    refusal = row_dma_refusal(nodes)
    if refusal is not None:
        why, location = refusal
        if mode is IndirectAccessMode.DMA:
            raise exc.BackendUnsupported(  # an InvalidConfig: this config cannot serve this kernel
                f"pallas_indirect_access_mode='dma' cannot copy the rows of '{name}' by DMA: {why}. "
                "Use 'auto' or 'resident' for this kernel.", location, forms_anchor="index-forms")
        raise _too_large(operand, size, threshold, vmem_capacity, vmem_limit, gathers[0],
                         f"Per-row DMA, the lowering for large tables, does not apply: {why}.")
    why = ("pallas_indirect_access_mode='dma'" if mode is IndirectAccessMode.DMA
           else f"'{name}' is too large to keep in VMEM: {sizes}")
    return TableLowering(True, why)


def _gather_index(node: Load) -> Value:
    (index,) = [item.value for item in node.index if isinstance(item, GatherIndex)]
    return index


def _resident_bytes(operand: Operand, node: Load) -> int:
    """What gathering `node` from the resident window of `operand` holds in VMEM: the window
    and its one-hot and selected copies (plan/vmem.py `resident_gather_bytes`); the one-hot
    of many indices over a long axis outgrows the table itself."""
    window = tuple(1 if extent is None else extent for extent in operand.block_shape)
    items = [item for item in node.index if not isinstance(item, NewAxis)]
    (axis,) = [a for a, item in enumerate(items) if isinstance(item, GatherIndex)]
    (index,) = [item.value for item in items if isinstance(item, GatherIndex)]
    return resident_gather_bytes(window, axis, index.shape[0], window[axis], operand.symbol.dtype,
                                 _METHODS[operand.symbol.dtype])


def _too_large(operand: Operand, size: int, threshold: int, vmem_capacity: int, vmem_limit: int | None,
               node: Load, advice: str) -> exc.VmemOverflow:
    budget = (f"the chip's {_mib(vmem_capacity)}" if vmem_limit is None or vmem_limit >= vmem_capacity
              else f"vmem_limit_bytes={vmem_limit}")
    return exc.VmemOverflow(
        f"'{operand.symbol.name}' is gathered, so its gathered axis stays whole in VMEM, with the "
        f"gather's one-hot over it: {_mib(size)}, which exceeds the {_mib(threshold)} VMEM threshold "
        f"for gathered tables ({GATHER_TABLE_VMEM_FRACTION:.0%} of {budget} of VMEM). {advice}"
        + moved_tile_hint(_gather_index(node)), node.location)


def moved_tile_hint(index: Value) -> str:
    """Why an index vector `s + tile.index` is a gather rather than the tile's window (the use of the
    tile that kept it one, frontend/moved_tiles.py), for a VMEM overflow's message; "" otherwise."""
    node = index.producer
    for arg in (node.args if node is not None and node.op == "add" else ()):
        inner = arg.producer if isinstance(arg, Value) else None
        if inner is not None and inner.op == "tile_index" and inner.args[0].kept_gathers:
            dim = inner.args[0]
            return (f" Its index, a moved {dim.name}.index, reads {dim.name}'s window only when every use of "
                    f"{dim.name} is an access at that scalar plus {dim.name}.index; here "
                    f"{dim.kept_gathers} keeps it a gather.")
    return ""


def _mib(size: float) -> str:
    size = float(size)  # an error's text: this call's bytes, no guard on a symbolic size
    return f"{size / 2**20:.2f} MiB" if size < 2**20 else f"{size / 2**20:.1f} MiB"
