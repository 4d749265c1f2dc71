"""Per-row DMA gathers: `table[idx, :]` from a table that stays in HBM.

A DMA's source offset is a scalar, and an index vector lives in vector
registers, so the rows are read as scalars from an SMEM copy of the tensor the
index vector was loaded from (`idx = indices[tile]`: lane i is
`indices[begin + i]`; the flat vector of an index tile `indices[tm, tn]` has
lane i at `indices[tm.begin + i // bn, tn.begin + i % bn]`). Each valid lane's row is copied by its own DMA into row
i of a VMEM scratch buffer, all on one semaphore; every copy started is waited
for before the buffer is read (the interpreter's race detector checks that).
A row is clamped into the table before its copy, so an index out of range
never reads past the table (interpret mode reports it as `exc.ShapeMismatch`
through the gather's index check, as for resident gathers).

Only whole rows of the first dim are copied: `table[idx]`, `table[idx, :]`,
`table[idx, :, :]`. Other forms keep the resident lowering (plan/gathers.py).
"""
from __future__ import annotations

from typing import Any

import torch

from .. import exc
from ..ir import FullSlice, GatherIndex, Load, NewAxis, ScalarIndex, TileSlice
from .bounds import access_text, describe
from .memory import SMEM_MAX_ELEMENTS
from .plans import Access, Gather, GatherMethod, LaneRange, Memory, Operand, RowCopy, Scratch, ScratchKind
from .vmem import padded_bytes


def row_dma_refusal(nodes: list) -> tuple[str, Any] | None:
    """Why the accesses `nodes` of one table cannot copy rows by DMA (and where), or None."""
    from .gathers import is_gather

    for node in nodes:
        if not is_gather(node):
            verb = "written" if not isinstance(node, Load) else "read without an index vector"
            return f"it is also {verb} ({access_text(node)}), so it must be whole in VMEM", node.location
        items = [item for item in node.index if not isinstance(item, NewAxis)]
        if 0 in node.tensor.shape:
            return f"'{node.tensor.name}' is empty (shape {list(node.tensor.shape)}), it has no row to copy", \
                node.location
        if not isinstance(items[0], GatherIndex):
            (axis,) = [a for a, item in enumerate(items) if isinstance(item, GatherIndex)]
            return (f"{access_text(node)} gathers along dim {axis}; per-row DMA copies rows of the first "
                    "dim only, so a gather along a middle or last dim keeps the resident lowering (move "
                    f"the gathered dim first on the host, e.g. table.movedim({axis}, 0).contiguous())",
                    node.location)
        if not all(isinstance(item, FullSlice) for item in items[1:]):
            return (f"{access_text(node)} reads part of each row; per-row DMA copies whole rows (index "
                    "the other dims with ':' and narrow the result)", node.location)
        refusal = _index_source_refusal(items[0].value)
        if refusal is not None:
            return refusal, node.location
    return None


def index_source(value) -> Any:
    """The load an index vector was read by: itself, or the index tile its flat vector
    (`idx.reshape(-1)`, as a gather through an N-D index tile records) was reshaped from."""
    source = value.producer
    if source is not None and source.op == "reshape" and isinstance(source.args[0].producer, Load):
        return source.args[0].producer
    return source


def _index_source_refusal(value) -> str | None:
    """Why the index vector `value` cannot be read as scalars from SMEM, or None."""
    source = index_source(value)
    advice = ("per-row DMA reads each row index as a scalar from SMEM, so the index vector must be "
              "loaded straight from an int32 tensor (`idx = indices[tile]`, `indices[g, tile]`, or "
              "an index tile `indices[tm, tn]`); compute the indices on the host and pass them as a tensor")
    if not isinstance(source, Load):
        return f"its index vector {describe(value)} is computed on the device; {advice}"
    tensor = source.tensor
    items = [item for item in source.index if not isinstance(item, NewAxis)]
    tiles = [item for item in items if isinstance(item, TileSlice)]
    if not tiles or not all(isinstance(i, (TileSlice, ScalarIndex)) for i in items):
        return f"its index vector {access_text(source)} is not a tile of '{tensor.name}'; {advice}"
    if tensor.dtype != torch.int32:
        return f"its index tensor '{tensor.name}' is {tensor.dtype}; {advice}"
    size = padded_bytes(tensor.shape, tensor.dtype)  # SMEM pads like VMEM, conservatively
    if size > SMEM_MAX_ELEMENTS * 4:
        return (f"its index tensor '{tensor.name}' {list(tensor.shape)} takes {size // 1024} KiB, more than "
                f"the {SMEM_MAX_ELEMENTS * 4 // 1024} KiB an SMEM copy may hold; split the call into chunks "
                "of indices")
    return None


def plan_row_gather(node: Load, table: Operand, reason: str, index_operands: dict[int, Operand],
                    lanes: LaneRange | None, threshold: int, names: set[str]) -> tuple[Access, tuple[Scratch, ...]]:
    """The access of one per-row DMA gather from `table` (a pl.ANY operand) and its scratch.

    `index_operands` collects the SMEM copies of index tensors (one per tensor)."""
    (item,) = [i for i in node.index if isinstance(i, GatherIndex)]
    source = index_source(item.value)
    index_tensor = source.tensor
    index_operand = index_operands.setdefault(
        index_tensor.id, Operand(index_tensor, f"{index_tensor.name}_smem", Memory.SMEM))
    symbol = table.symbol
    buffer_shape = (item.value.shape[0], *symbol.shape[1:])
    size = padded_bytes(buffer_shape, symbol.dtype)
    if size > threshold:
        raise exc.VmemOverflow(
            f"'{symbol.name}' is gathered by per-row DMA into a VMEM buffer of {list(buffer_shape)} "
            f"{str(symbol.dtype).replace('torch.', '')}: {size / 2**20:.2f} MiB, over the "
            f"{threshold / 2**20:.2f} MiB threshold for gathered blocks. Gather fewer rows at a time "
            "(a smaller block size for the index tile).", node.location)
    buffer, semaphore = _fresh(f"{symbol.name}_rows", names), _fresh(f"{symbol.name}_row_sem", names)
    index_items = tuple(i for i in source.index if not isinstance(i, NewAxis))
    row_copy = RowCopy(table.ref_name, index_operand.ref_name, index_items, lanes, buffer, semaphore)
    gather = Gather(item.value, 0, symbol.shape[0], GatherMethod.ROW_DMA, reason, row_copy)
    access = Access(table.ref_name, (), buffer_shape, tuple(node.output.shape), gather=gather)
    scratch = (Scratch(buffer, ScratchKind.VMEM, buffer_shape, symbol.dtype),
               Scratch(semaphore, ScratchKind.DMA_SEMAPHORES, (1,), None))
    return access, scratch


def _fresh(name: str, names: set[str]) -> str:
    candidate, counter = name, 1
    while candidate in names:
        candidate, counter = f"{name}_{counter}", counter + 1
    names.add(candidate)
    return candidate
