"""Flat gathers and scatters of whole rows: `hl.load(x_flat, [rows[..., None] * w + cols])`.

Helion's jagged programs read and write a 2-D tensor through its flat view, element by
element: `x_flat[(starts[:, None] + tile_k.index[None, :])[:, :, None] * m + tile_m.index[None,
None, :]]`, `hl.store(out_flat, [q_idx], acc)`. When the lanes of the index's last axis are
`cols` (`hl.arange(w)` or the positions of a tile over [0, w)) and the rest is a row
number times w, the access reads (or writes) those columns of rows of `x_flat` seen as
[n // w, w]: a gather (scatter) of rows, whose one-hot or per-row DMA spans n // w rows
instead of n elements. This module recognizes the form (`row_form`) and records the access
on a host view `x_flat.reshape(n // w, w)` made before the device loop (`read_rows`,
`write_rows`); a store's lane mask must keep or drop whole rows. When a tensor the flat
one reshapes already has that shape (`x` of `x_flat = x.view(-1)`, w = x.size(1)), the
access goes through it: one operand, whose reads and writes the planner orders.

Otherwise the view is an operand of its own, so a loop that writes the buffer must touch it only
through that view: an access through another view of the buffer, where either side
writes, raises `RowsReadConflict` (`check_access`) and the kernel is traced again without
rows views of that buffer (runtime/bound_kernel.py); a rows access after such an access in the
same loop is not made one. Reads alone may mix views.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..ir import TensorSymbol, TileDim, Value
from ..ir.sizes import broadcast_shape, exact_quotient, is_int
from .proxies import DeviceTensor, HostTensor, TileProxy


class RowsReadConflict(Exception):
    """A device loop writes a buffer it reads as rows; trace again without reading it so."""

    def __init__(self, root: str):
        super().__init__(root)
        self.root = root


@dataclass(frozen=True)
class RowForm:
    """`sum(x_i * c_i) + cols` with every c_i a multiple of `width` (masked by `where(mask,
    ..., 0)` when `mask` is set): row number `sum(x_i * (c_i // width))`, the x_i shaped like
    the index but 1 along its last axis (`rows[:, :, None] * w`; Helion also writes
    `starts[:, None, None] * 0 + tile_k.index[None, :, None] * n`); `cols` is None for all
    `width` columns (`hl.arange(width)`), else the tile over [0, width) whose positions they
    are."""

    terms: tuple[tuple[Value, int], ...]  # (x_i, c_i // width)
    width: int
    cols: TileDim | None
    mask: Value | None


def row_form(index: Value, length: int, load_masked: bool = False) -> RowForm | None:
    """The row form of the flat index `index` into a tensor of `length` elements, or None.
    `load_masked`: `index` is hl.load's `where(mask, flat, 0)`, whose masked-off lanes the load
    sets to 0 after reading (so a masked row may read any row); a `where` the user wrote reads
    element 0 there, which a row gather would not."""
    mask, flat = None, index
    node = flat.producer
    if load_masked and node is not None and node.op == "where" and len(node.args) == 3 and node.args[2] == 0 \
            and isinstance(node.args[0], Value) and isinstance(node.args[1], Value):
        mask, flat = node.args[0], node.args[1]
        if len(mask.shape) != len(flat.shape) or mask.shape[-1] != 1:
            return None  # a mask that varies along a row's columns: not one per row
    node = flat.producer
    if node is None or node.op != "add" or node.kwargs.get("alpha", 1) != 1 or len(node.args) != 2:
        return None
    for scaled, cols in (node.args, node.args[::-1]):
        terms, columns = _scaled_terms(scaled), _columns(cols)
        if not terms or columns is None:
            continue
        count, dim = columns
        width = count if dim is None else dim.end
        quotients = [_quotient(factor, width) for _, factor in terms]
        if (int(width) <= 0 or _quotient(length, width) is None or count != flat.shape[-1]
                or any(q is None for q in quotients)):
            continue
        try:
            shape = broadcast_shape(*(tuple(x.shape) for x, _ in terms))
        except ValueError:
            continue
        if len(shape) != len(flat.shape) or shape[-1] != 1 or tuple(shape[:-1]) != tuple(flat.shape[:-1]):
            continue
        return RowForm(tuple((x, q) for (x, _), q in zip(terms, quotients)), width, dim, mask)
    return None


def _quotient(a: Any, b: Any) -> Any:
    """`a // b` when b divides a: for every size (`exact_quotient`), else, b a plain int, at
    the sizes of a guard (`hl.arange(d)` pins d, so `r * d` over its width divides); None."""
    quotient = exact_quotient(a, b)
    if quotient is None and type(b) is int and b > 0 and a % b == 0:
        quotient = a // b
    return quotient


def _scaled_terms(value: Any) -> list[tuple[Value, int]] | None:
    """[(x, c), ...] for `x * c + ...` (c ints or sizes, x int32 values), else None."""
    if not isinstance(value, Value) or value.producer is None:
        return None
    node = value.producer
    if node.op == "add" and node.kwargs.get("alpha", 1) == 1 and len(node.args) == 2:
        left, right = _scaled_terms(node.args[0]), _scaled_terms(node.args[1])
        return left + right if left and right else None
    if node.op != "mul" or len(node.args) != 2:
        return None
    left, right = node.args
    if is_int(left):
        left, right = right, left
    if not (isinstance(left, Value) and is_int(right) and left.dtype == torch.int32):
        return None
    return [(left, right)]


def _columns(value: Any) -> tuple[int, TileDim | None] | None:
    """(count, tile) when `value` holds column positions 0, 1, ... along its last axis and
    is 1 on every other: `hl.arange(w)` (tile None) or `tile.index` of a tile whose loop
    covers [0, w) (count: its block size)."""
    if not isinstance(value, Value) or not value.shape or any(size != 1 for size in value.shape[:-1]):
        return None
    while value.producer is not None and value.producer.op in ("getitem", "reshape") and len(value.shape) != 1:
        source = value.producer.args[0]
        if not isinstance(source, Value) or source.shape[-1:] != value.shape[-1:] \
                or any(size != 1 for size in source.shape[:-1]):
            return None
        value = source
    node = value.producer
    if node is None or len(value.shape) != 1:
        return None
    if node.op == "iota" and node.kwargs.get("start") == 0 and node.kwargs.get("step") == 1:
        return value.shape[0], None
    if node.op == "tile_index":
        dim = node.args[0]
        if is_int(dim.begin) and dim.begin == 0 and is_int(dim.end) and not dim.is_grid:
            return dim.block_size, dim
    return None


def _flat_target(tensor: Any, key: Any) -> tuple | None:
    """(symbol, index value) of a subscript of a 1-D kernel tensor by one int device value."""
    items = key if isinstance(key, tuple) else (key,)
    if not isinstance(tensor, HostTensor) or len(items) != 1 or not isinstance(items[0], DeviceTensor):
        return None
    symbol = tensor.symbol
    if len(symbol.shape) != 1 or not is_int(symbol.shape[0]):
        return None
    return symbol, items[0].value


def read_rows(recorder: Any, tensor: HostTensor, key: Any, subscript: Any) -> DeviceTensor | None:
    """`tensor[key]` (a 1-D kernel tensor, one flat index) read as rows of its 2-D view when
    the index has the row form; None to read it element by element."""
    target = _flat_target(tensor, key)
    form = (row_form(target[1], target[0].shape[0], id(target[1]) in recorder.load_masked)
            if target is not None else None)
    if form is None or not may_use_view(recorder, target[0], write=False):
        return None
    view = _rows_view(recorder, tensor, form.width)
    columns = slice(None) if form.cols is None else TileProxy(recorder, form.cols)
    tile = _tile_rows(form)
    if tile is not None:  # the rows of one tile (`zero * 0 + tile_k.index * n`): a tile of the view
        position, dim = tile
        block = subscript(recorder, view, (TileProxy(recorder, dim), columns))
        shape = [1] * len(target[1].shape)
        shape[position], shape[-1] = dim.block_size, block.shape[-1]
        return block.reshape(tuple(shape)).expand(tuple(target[1].shape))
    rows = _row_numbers(recorder, form).expand(tuple(target[1].shape[:-1]) + (1,))
    if form.mask is not None:  # masked-off rows read row 0 (hl.load's where gives them 0)
        rows = torch.where(DeviceTensor(recorder, form.mask).expand(tuple(rows.shape)), rows, 0)
    rows = rows.reshape(tuple(rows.shape[:-1])) if len(rows.shape) > 1 else rows.reshape(())
    rows.value.name = f"{target[1].name or 'index'}_rows"
    return subscript(recorder, view, (rows, columns))


def _tile_rows(form: RowForm) -> tuple[int, TileDim] | None:
    """(axis, tile) when the row numbers are one tile's positions along one axis of the index
    and every other term is multiplied by 0 (Helion broadcasts B over a group axis so:
    `starts[:, None, None] * 0 + tile_k.index[None, :, None] * n`): the rows are that tile
    of the view, read as a block instead of gathered row by row."""
    if form.mask is not None:
        return None
    ones = [x for x, quotient in form.terms if not (type(quotient) is int and quotient == 0)]
    if len(ones) != 1 or not any(x is ones[0] and type(q) is int and q == 1 for x, q in form.terms):
        return None
    value = ones[0]
    wide = [axis for axis, extent in enumerate(value.shape) if extent != 1]
    while value.producer is not None and value.producer.op in ("getitem", "reshape") and len(value.shape) != 1:
        value = value.producer.args[0]
        if not isinstance(value, Value):
            return None
    node = value.producer
    if node is None or node.op != "tile_index" or len(value.shape) != 1 or len(wide) != 1:
        return None
    dim = node.args[0]
    return (wide[0], dim) if ones[0].shape[wide[0]] == dim.block_size else None


def write_rows(recorder: Any, tensor: HostTensor, key: Any, value: Any, lane_mask: Any, store: Any) -> bool:
    """`tensor[key] = value` (a 1-D kernel tensor, one flat index: hl.store's flat vector of
    an N-D index) written as rows of its 2-D view when the index has the row form and the
    lane mask, if any, keeps or drops whole rows; False to scatter element by element."""
    target = _flat_target(tensor, key)
    if target is None:
        return False
    symbol, flat = target
    node = flat.producer
    if node is None or node.op != "reshape" or not isinstance(node.args[0], Value) or len(node.args[0].shape) < 2:
        return False
    index = node.args[0]  # the N-D index the flat vector was made of
    form = row_form(index, symbol.shape[0])
    if form is None or form.mask is not None:
        return False
    row_mask = _row_lanes(lane_mask, index) if lane_mask is not None else None
    if (lane_mask is not None and row_mask is None) or not may_use_view(recorder, symbol, write=True):
        return False
    view = _rows_view(recorder, tensor, form.width)
    rows = _row_numbers(recorder, form).expand(tuple(index.shape[:-1]) + (1,)).reshape(-1)
    rows.value.name = f"{index.name or 'index'}_rows"
    values = value.reshape(-1, index.shape[-1]) if isinstance(value, DeviceTensor) else value
    columns = slice(None) if form.cols is None else TileProxy(recorder, form.cols)
    store(recorder, view, (rows, columns), values,
          lane_mask=None if row_mask is None else DeviceTensor(recorder, row_mask).reshape(-1))
    return True


def _row_numbers(recorder: Any, form: RowForm) -> DeviceTensor:
    """The row number of each lane group, `sum(x_i * (c_i // width))`, shaped like the index
    but 1 along its last axis (the terms broadcast together)."""
    total = None
    for x, factor in form.terms:
        term = DeviceTensor(recorder, x)
        term = term if type(factor) is int and factor == 1 else term * factor
        total = term if total is None else total + term
    return total


def _row_lanes(lane_mask: Any, index: Value) -> Value | None:
    """The per-row mask a flat scatter's lane mask was expanded from (`m[..., None]` over the
    index's lanes), or None when it differs along a row."""
    mask = lane_mask.value if isinstance(lane_mask, DeviceTensor) else None
    node = mask.producer if mask is not None else None
    if node is None or node.op != "reshape" or not isinstance(node.args[0], Value):
        return None
    expanded = node.args[0].producer
    if expanded is None or expanded.op != "expand" or not isinstance(expanded.args[0], Value):
        return None
    source = expanded.args[0]
    if len(source.shape) != len(index.shape) or source.shape[-1] != 1 \
            or tuple(source.shape[:-1]) != tuple(index.shape[:-1]):
        return None
    return source


@dataclass
class RowsUse:
    """How the open device loop uses one buffer (by its root's name): the rows view it reads
    or writes the buffer through, if any, whether it writes through that view, and the
    tensors it has written the buffer through (every store passes `check_access`)."""

    view: TensorSymbol | None = None
    written: bool = False
    writers: set = field(default_factory=set)  # ids of the symbols stored into


def check_access(recorder: Any, symbol: TensorSymbol, write: bool) -> None:
    """A device loop reads or writes `symbol` (a store through a rows view included): raise
    `RowsReadConflict` when it also reads or writes the buffer through another rows view and
    either writes it (the view is a separate operand, so one side would not see the other's
    writes); record a write."""
    root = recorder.host.root_of(symbol).name
    use = recorder.rows_uses.get(root)
    if use is not None and use.view is not None and use.view is not symbol and (write or use.written):
        raise RowsReadConflict(root)
    if write:
        recorder.rows_uses.setdefault(root, RowsUse()).writers.add(symbol.id)


def may_use_view(recorder: Any, symbol: TensorSymbol, write: bool) -> bool:
    """Whether this loop may read (or write) `symbol`'s buffer through a rows view: not
    disabled for the kernel, and not written earlier in the loop through another tensor
    (an earlier read through another tensor is refused by frontend/view_aliasing.py unless
    the rows view is that tensor itself). Records the use."""
    root = recorder.host.root_of(symbol).name
    if root in recorder.rows_disabled:
        return False
    use = recorder.rows_uses.setdefault(root, RowsUse())
    if any(writer != (use.view.id if use.view is not None else None) for writer in use.writers):
        return False
    use.written = use.written or write
    return True


def _rows_view(recorder: Any, tensor: HostTensor, width: int) -> HostTensor:
    """`tensor.reshape(n // width, width)`, recorded as host code before the device loop
    (once per loop and width); the loop's reads and writes of the buffer then go through it."""
    return shaped_view(recorder, tensor, (_quotient(tensor.symbol.shape[0], width), width), "rows")


def shaped_view(recorder: Any, tensor: HostTensor, shape: tuple, suffix: str) -> HostTensor:
    """`tensor.reshape(*shape)` (named `<tensor>_<suffix>`), recorded as host code before the
    device loop, once per loop and shape; the loop's reads and writes of the buffer then go
    through it (one view per buffer and loop: another one is a `RowsReadConflict`)."""
    key = (recorder.device.index, tensor.symbol.id, str(shape))  # a size's formula, not its value
    view = recorder.rows_views.get(key)
    if view is None:
        same = recorder.host.same_order_view(tensor.symbol, shape)
        if same is not None:  # `x` itself for `x.view(-1)`: one operand, so the planner sees
            view = HostTensor(recorder, same)  # its reads and writes together
        else:
            with recorder.host_step():
                view = tensor.reshape(*shape)
            view.symbol.name = f"{tensor.symbol.name}_{suffix}"
        recorder.rows_views[key] = view
    use = recorder.rows_uses[recorder.host.root_of(tensor.symbol).name]
    if use.view not in (None, view.symbol):
        raise RowsReadConflict(recorder.host.root_of(tensor.symbol).name)  # two views of one buffer
    use.view = view.symbol
    return view
