"""`hl.split` / `hl.join` and the lane-pair reshapes they come with (RoPE's interleaved halves).

Helion's RoPE views a row of d lanes as d/2 pairs, `x.reshape(m, d // 2, 2)`, splits the
pairs (`hl.split`: lanes 0, 2, 4, ... and 1, 3, 5, ...), rotates them, and joins the
halves back (`hl.join(a, b)`, a new last axis of size 2) into `reshape(m, d)`. On a TPU a
value of shape (..., d/2, 2) puts its pairs across sublanes and two lanes: neither the
reshapes into it nor the selects out of it are layouts Mosaic builds. So the frontend
records what the program means instead, on the d-lane rows themselves:

- `hl.split` of a value that a reshape made from (..., d) by splitting its last axis into
  (d/2, 2) is two strided lane gathers of that (..., d) value (even and odd lanes:
  `torch.gather` with an iota index, whose lowering is Mosaic's iota compare, select and
  sum); the reshape itself is then unused, and codegen drops it;
- `hl.split` of `hl.join(a, b)` (or of `torch.stack([a, b], -1)`) is `(a, b)`;
- a reshape (or view/flatten) of `hl.join(a, b)` merging its last two axes into d lanes
  interleaves them: lane q takes lane q // 2 of `a` where q is even, of `b` where odd.

A subscript of such pairs that picks one half (`x[..., 0]`, `x[:, :, 1]`, `x.unbind(-1)`) is the
same lane gather. Any other (..., 2) value splits by a subscript, as torch does.
"""
from __future__ import annotations

from typing import Any

from .. import exc
from ..ir import Value
from .proxies import DeviceTensor


def split(record: Any, x: Any) -> tuple[DeviceTensor, DeviceTensor]:
    """`hl.split(x)`: the two halves of x's last axis of size 2, each without that axis."""
    if not isinstance(x, DeviceTensor):
        raise exc.UnsupportedOperation(f"hl.split takes a device value computed in the device loop, got {x!r}.")
    shape = tuple(x.shape)
    if not shape or shape[-1] != 2:
        raise exc.ShapeMismatch(
            f"hl.split splits a last dim of size 2, but the value has shape {list(shape)}; reshape it to "
            "(..., n // 2, 2) first, e.g. x.reshape(m, d // 2, 2).")
    pieces = _joined_pieces(x.value)
    if pieces is not None:
        return tuple(_squeezed(record, piece) for piece in pieces)
    source = _split_source(x.value)
    if source is not None:
        rows = DeviceTensor(record.recorder, source)
        return tuple(_strided_lanes(record, rows, parity) for parity in (0, 1))
    return x[..., 0], x[..., 1]


def pair_half(record: Any, x: Any, key: Any) -> DeviceTensor | None:
    """`x[..., 0]`, `x[:, :, 1]` (also `x.unbind(-1)`'s parts) of lane pairs a reshape made:
    the strided lane gather hl.split records; None for any other subscript."""
    if not isinstance(x, DeviceTensor) or not x.shape or x.shape[-1] != 2:
        return None
    items = key if isinstance(key, tuple) else (key,)
    if not items or isinstance(items[-1], bool) or not isinstance(items[-1], int) or not -2 <= items[-1] <= 1:
        return None
    rest = items[:-1]
    whole = all(isinstance(item, slice) and item == slice(None) for item in rest)
    if not (rest == (Ellipsis,) or (whole and len(rest) == len(x.shape) - 1)):
        return None
    source = _split_source(x.value)
    if source is None:
        return None
    return _strided_lanes(record, DeviceTensor(record.recorder, source), items[-1] % 2)


def join(record: Any, a: Any, b: Any) -> DeviceTensor:
    """`hl.join(a, b)`: a and b (broadcast to one shape) along a new last axis of size 2."""
    if not isinstance(a, DeviceTensor) and not isinstance(b, DeviceTensor):
        raise exc.UnsupportedOperation("hl.join takes device values computed in the device loop.")
    if tuple(getattr(a, "shape", ())) != tuple(getattr(b, "shape", ())):
        a, b = record("broadcast_tensors", a, b)
    return record("stack", [a, b], -1)


def merged(record: Any, source: Any, shape: tuple) -> DeviceTensor | None:
    """A reshape of `source` to `shape` that merges the lane pairs of `hl.join(a, b)` into
    one axis, recorded as the interleave of a and b; None for any other reshape."""
    if not isinstance(source, Value) or len(source.shape) < 2:
        return None
    pairs, lanes = (int(size) for size in source.shape[-2:])
    # sizes may be symbolic (static_shapes=False): compared by their values
    if lanes != 2 or [int(size) for size in shape] != [*(int(size) for size in source.shape[:-2]), 2 * pairs]:
        return None
    pieces = _joined_pieces(source)
    if pieces is None:
        return None
    a, b = (_squeezed(record, piece) for piece in pieces)
    width = 2 * pairs
    rank = len(shape)
    half = record("floor_divide", record.named(record.arange(width), "lane"), 2)
    index = record.named(record("broadcast_to", record("reshape", half, [1] * (rank - 1) + [width]), list(shape)),
                         "pair_index")
    even = record("reshape", record("eq", record("remainder", record.arange(width), 2), 0), [1] * (rank - 1) + [width])
    return record("where", even, record("gather", a, -1, index), record("gather", b, -1, index))


def _joined_pieces(value: Value) -> tuple[Value, Value] | None:
    """(a, b) with shape (..., 1) each if `value` is their concatenation along its last axis
    (hl.join, torch.stack([a, b], -1)), else None."""
    node = value.producer
    if node is None or getattr(node, "op", None) != "cat" or len(node.args) != 2:
        return None
    if node.kwargs["dim"] != len(value.shape) - 1 or any(arg.shape[-1] != 1 for arg in node.args):
        return None
    return tuple(node.args)


def _squeezed(record: Any, piece: Value) -> DeviceTensor:
    """A (..., 1) piece without its last axis: the value it was unsqueezed from, if it was."""
    node = piece.producer
    if getattr(node, "op", None) == "reshape" and tuple(node.args[0].shape) == tuple(piece.shape[:-1]):
        return DeviceTensor(record.recorder, node.args[0])
    return record("reshape", DeviceTensor(record.recorder, piece), list(piece.shape[:-1]))


def _split_source(value: Value) -> Value | None:
    """The (..., 2n) value a reshape split into `value`'s (..., n, 2), else None."""
    node = value.producer
    if getattr(node, "op", None) != "reshape":
        return None
    source = node.args[0]
    if not isinstance(source, Value) or not source.shape:
        return None
    pairs = int(value.shape[-2])
    if [int(size) for size in source.shape] != [*(int(size) for size in value.shape[:-2]), 2 * pairs]:
        return None
    return source


def _strided_lanes(record: Any, rows: DeviceTensor, parity: int) -> DeviceTensor:
    """Lanes parity, parity + 2, ... of `rows` along its last axis."""
    shape = list(rows.shape)
    pairs = int(shape[-1]) // 2
    lanes = record("add", record("mul", record.arange(pairs), 2), parity)
    index = record.named(record("broadcast_to", record("reshape", lanes, [1] * (len(shape) - 1) + [pairs]),
                                shape[:-1] + [pairs]), "odd_lanes" if parity else "even_lanes")
    return record("gather", rows, -1, index)

