"""Gathers: how a load through an index vector (`table[idx, :]`) runs on a TPU.

Mosaic has no vector gather, so the gathered axis of the table stays whole in
VMEM (a FULL block, or a resident one when tiles also index that axis) and
the gather is computed from that window: a one-hot matmul for float tables
(exact at HIGHEST precision: each output is one product by 1.0 plus zeros),
a select-and-sum for int32 tables (integers must not round through the MXU's
float passes). Both read the whole table per gather, so a table that would
crowd VMEM is rejected; per-row DMA for large tables is not implemented.
"""
from __future__ import annotations

import torch

from .. import exc
from ..ir import GatherIndex, Load
from .plans import Gather, GatherMethod, Memory, Operand
from .vmem import padded_bytes

# A gathered table may hold at most this fraction of the chip's VMEM: the rest
# is for the other blocks, their double buffers, and the one-hot operand.
GATHER_TABLE_VMEM_FRACTION = 0.25

_METHODS = {
    torch.float32: GatherMethod.ONE_HOT_MATMUL,
    torch.bfloat16: GatherMethod.ONE_HOT_MATMUL,
    torch.int32: GatherMethod.SELECT_SUM,
}


def is_gather(node) -> bool:
    return isinstance(node, Load) and any(isinstance(item, GatherIndex) for item in node.index)


def plan_gather(node: Load, axis: int, rows: int) -> Gather:
    """The gather of `node`, which reads all `rows` of ref axis `axis` of its window."""
    (item,) = [item for item in node.index if isinstance(item, GatherIndex)]
    method = _METHODS.get(node.tensor.dtype)
    if method is None:
        supported = ", ".join(str(dtype).replace("torch.", "") for dtype in _METHODS)
        raise exc.UnsupportedOperation(
            f"Gathering from '{node.tensor.name}' ({node.tensor.dtype}) is not supported; "
            f"gathers read {supported} tables. Convert the table on the host.", node.location)
    return Gather(item.value, axis, rows, method)


def check_gathered_table(operand: Operand, loads: list, vmem_capacity: int) -> None:
    """Reject a gathered table whose VMEM-resident block is too large for VMEM."""
    gathers = [node for node in loads if is_gather(node)]
    if not gathers or operand.memory is not Memory.VMEM_BLOCK:
        return
    size = padded_bytes(operand.block_shape, operand.symbol.dtype)
    threshold = int(vmem_capacity * GATHER_TABLE_VMEM_FRACTION)
    if size > threshold:
        raise exc.VmemOverflow(
            f"'{operand.symbol.name}' is gathered, so its gathered axis stays whole in VMEM: "
            f"{size / 2**20:.1f} MiB, which exceeds the {threshold / 2**20:.1f} MiB VMEM threshold "
            f"for gathered tables ({GATHER_TABLE_VMEM_FRACTION:.0%} of the chip's "
            f"{vmem_capacity / 2**20:.0f} MiB). Gathering rows of larger tables by per-row DMA "
            "is not supported; gather from a smaller table or split it.",
            gathers[0].location)
