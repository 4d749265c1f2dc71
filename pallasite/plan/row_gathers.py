"""Per-row DMA gathers: `table[idx, :]` from a table that stays in HBM.

A DMA's source offset is a scalar, and an index vector lives in vector
registers, so the rows are read as scalars from an SMEM copy of the tensor the
index vector was loaded from (`idx = indices[tile]`: lane i is
`indices[begin + i]`; the flat vector of an index tile `indices[tm, tn]` has
lane i at `indices[tm.begin + i // bn, tn.begin + i % bn]`), or, for an index
computed on the device (`hl.load(flat, [t.index * v + labels[t]])`), from an
SMEM buffer the vector is staged into by a local DMA (`StagedIndex`). Each valid lane's row is copied by its own DMA into row
i of a VMEM scratch buffer, all on one semaphore; every copy started is waited
for before the buffer is read (the interpreter's race detector checks that).
A row is clamped into the table before its copy, so an index out of range
never reads past the table (interpret mode reports it as `exc.ShapeMismatch`
through the gather's index check, as for resident gathers).

Rows of the first dim are copied, whole (`table[idx]`, `table[idx, :]`) or
their window at tiles of the other dims (`table[idx[tb], te]`: each copy reads
the te block of its row). A tile whose last block is partial keeps the
resident lowering (a DMA's size is static and must not run past the table),
as do gathers along other dims (plan/gathers.py).
"""
from __future__ import annotations

from typing import Any

import torch

from .. import exc
from ..ir import FullSlice, GatherIndex, Load, NewAxis, ScalarIndex, TileSlice
from ..ir.sizes import SymbolicSize
from .bounds import access_text, describe
from .tpu_tiling import SMEM_MAX_ELEMENTS
from .plans import Access, Gather, GatherMethod, LaneRange, Memory, Operand, RowCopy, Scratch, ScratchKind
from .access_plans import StagedIndex
from .vmem import padded_bytes


def is_gather(node) -> bool:
    """Whether `node` reads a table at index vectors (a `GatherIndex` item)."""
    return isinstance(node, Load) and any(isinstance(item, GatherIndex) for item in node.index)


def row_dma_refusal(nodes: list) -> tuple[str, Any] | None:
    """Why the accesses `nodes` of one table cannot copy rows by DMA (and where), or None."""
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
        for item in items[1:]:
            if isinstance(item, TileSlice) and _may_end_partial(item.dim):
                return (f"{access_text(node)} reads each row at tile '{item.dim.name}', whose last block "
                        "is partial; a row copy's size is static, so per-row DMA copies a tile's window "
                        "only where its blocks divide the dim (choose such a block size, or index the "
                        "dim with ':' and narrow the result)", node.location)
            if not isinstance(item, (FullSlice, TileSlice)):
                return (f"{access_text(node)} reads part of each row other than at a tile; per-row DMA "
                        "copies whole rows or a tile's window of them (index the other dims with ':' or "
                        "a tile, and narrow the result)", node.location)
        refusal = _index_source_refusal(items[0].value)
        if refusal is not None:
            return refusal, node.location
    return None


def _may_end_partial(dim) -> bool:
    """Whether a tile's last block may be partial. A dynamic size (static_shapes=False) is
    masked as if it might, so one variant serves every size; a row copy needs whole blocks,
    so here the block's divisibility is a guard of the variant (a size that breaks it
    builds another)."""
    extent = dim.static_extent
    if isinstance(extent, SymbolicSize):
        return bool(extent % dim.block_size != 0)
    return dim.has_partial_tail


def index_source(value) -> Any:
    """The load an index vector was read by: itself, or the index tile its flat vector
    (`idx.reshape(-1)`, as a gather through an N-D index tile records) was reshaped from."""
    source = value.producer
    if source is not None and source.op == "reshape" and isinstance(source.args[0].producer, Load):
        return source.args[0].producer
    return source


def _read_from_tensor(value) -> bool:
    """Whether the index vector `value` is a tile of an int32 tensor small enough for an
    SMEM copy, so each row copy reads its lane's index from that copy."""
    source = index_source(value)
    if not isinstance(source, Load):
        return False
    tensor = source.tensor
    items = [item for item in source.index if not isinstance(item, NewAxis)]
    tiles = [item for item in items if isinstance(item, TileSlice)]
    return (bool(tiles) and all(isinstance(i, (TileSlice, ScalarIndex)) for i in items)
            and tensor.dtype == torch.int32
            and padded_bytes(tensor.shape, tensor.dtype) <= SMEM_MAX_ELEMENTS * 4)  # SMEM pads like VMEM


def _index_source_refusal(value) -> str | None:
    """Why the index vector `value` cannot give its lanes to row copies as scalars, or None:
    one read from an int32 tensor is read from that tensor's SMEM copy; any other (computed
    on the device, `t.index * v + labels[t]`) is staged through SMEM (`StagedIndex`)."""
    if _read_from_tensor(value):
        return None
    if value.shape[0] > SMEM_MAX_ELEMENTS:
        return (f"its index vector {describe(value)} has {value.shape[0]} lanes, more than the "
                f"{SMEM_MAX_ELEMENTS} an SMEM copy may hold; gather fewer at a time (a smaller block size)")
    return None


def plan_row_gather(node: Load, table: Operand, reason: str, index_operands: dict[int, Operand],
                    lanes: LaneRange | None, threshold: int, names: set[str]) -> tuple[Access, tuple[Scratch, ...]]:
    """The access of one per-row DMA gather from `table` (a pl.ANY operand) and its scratch.

    `index_operands` collects the SMEM copies of index tensors (one per tensor)."""
    (item,) = [i for i in node.index if isinstance(i, GatherIndex)]
    symbol = table.symbol
    window = tuple(i for i in node.index if not isinstance(i, NewAxis))[1:]  # FullSlice or TileSlice
    buffer_shape = (item.value.shape[0], *(i.dim.block_size if isinstance(i, TileSlice) else size
                                           for i, size in zip(window, symbol.shape[1:])))
    size = padded_bytes(buffer_shape, symbol.dtype)
    if size > threshold:
        raise exc.VmemOverflow(
            f"'{symbol.name}' is gathered by per-row DMA into a VMEM buffer of {list(buffer_shape)} "
            f"{str(symbol.dtype).replace('torch.', '')}: {size / 2**20:.2f} MiB, over the "
            f"{threshold / 2**20:.2f} MiB threshold for gathered blocks. Gather fewer rows at a time "
            "(a smaller block size for the index tile).", node.location)
    buffer, semaphore = _fresh(f"{symbol.name}_rows", names), _fresh(f"{symbol.name}_row_sem", names)
    scratch = [Scratch(buffer, ScratchKind.VMEM, buffer_shape, symbol.dtype),
               Scratch(semaphore, ScratchKind.DMA_SEMAPHORES, (1,), None)]
    if _read_from_tensor(item.value):
        source = index_source(item.value)
        index_tensor = source.tensor
        index_operand = index_operands.setdefault(
            index_tensor.id, Operand(index_tensor, f"{index_tensor.name}_smem", Memory.SMEM))
        index_items = tuple(i for i in source.index if not isinstance(i, NewAxis))
        row_copy = RowCopy(table.ref_name, index_operand.ref_name, index_items, lanes, buffer, semaphore,
                           window=window)
    else:  # computed on the device: staged through VMEM into SMEM
        count = (item.value.shape[0],)
        name = item.value.name or "index"
        staged = StagedIndex(_fresh(f"{name}_staged", names), _fresh(f"{name}_smem", names),
                             _fresh(f"{name}_stage_sem", names))
        scratch += [Scratch(staged.vmem, ScratchKind.VMEM, count, torch.int32),
                    Scratch(staged.smem, ScratchKind.SMEM, count, None),
                    Scratch(staged.semaphore, ScratchKind.DMA_SEMAPHORES, (1,), None)]
        row_copy = RowCopy(table.ref_name, staged.smem, (), lanes, buffer, semaphore, staged, window)
    gather = Gather(item.value, 0, symbol.shape[0], GatherMethod.ROW_DMA, reason, row_copy)
    access = Access(table.ref_name, (), buffer_shape, tuple(node.output.shape), gather=gather)
    return access, tuple(scratch)


def _fresh(name: str, names: set[str]) -> str:
    candidate, counter = name, 1
    while candidate in names:
        candidate, counter = f"{name}_{counter}", counter + 1
    names.add(candidate)
    return candidate
