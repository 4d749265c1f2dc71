"""`hl.load` and `hl.store`: subscripts with Helion's masks (`extra_mask`), as torch ops
on the active tracer's values, so the tracer and reference mode share them."""
from __future__ import annotations

from typing import Any, Sequence

import torch

from .. import exc
from ..ir.sizes import broadcast_shape
from .tracing import _tracer


def _is_index_vector(item: Any) -> bool:
    """An index tensor in a subscript (not a tile, an int, a slice or a 0-d scalar)."""
    shape = getattr(item, "shape", None)  # tiles (the tracer's and reference mode's) have none
    return shape is not None and len(shape) > 0 and not isinstance(getattr(type(item), "block_size", None),
                                                                     property)


def load(tensor: Any, index: Sequence[Any], extra_mask: Any = None, eviction_policy: Any = None) -> Any:
    """`hl.load(x, [tile_m, tile_n])` is `x[tile_m, tile_n]`.

    `extra_mask` (a bool tensor shaped like the result) keeps the loaded values where it
    is true and gives 0 elsewhere, as Helion's masked load does; an index tensor the mask
    broadcasts to reads row 0 where the mask is false, so masked-off lanes may hold any
    index (a jagged row past its segment) — but a shifted tile (`tile.index - 3`) stays
    one, since it reads 0 outside the tensor anyway. A tile whose loop runs past the
    tensor's end (`hl.load(x, [t0, t1], extra_mask=t1.index < x.size(1))` over a wider
    output: Helion's concatenation) reads 0 there too, where a plain `x[t0, t1]` is a
    bounds error. `eviction_policy` is a GPU cache hint: a TPU kernel moves whole blocks,
    so it changes nothing. Inside `hl.jagged_tile` loops the loop's implicit mask joins
    `extra_mask` (frontend/jagged.py)."""
    key = tuple(index)
    tracer = _tracer("load")
    extra_mask = _with_jagged_mask(tracer, tensor, key, extra_mask)
    with tracer.jagged_access():
        if extra_mask is None:
            return tensor[key]
        masks = _index_masks(key, extra_mask)
        # a shifted tile (`tile.index - 3`) reads 0 outside the tensor by itself: its lanes stay
        kept = [mask is None or getattr(item, "tile_shift", None) is not None for item, mask in zip(key, masks)]
        key = tuple(item if keep else torch.where(mask, item, 0) for item, mask, keep in zip(key, masks, kept))
        # the items masked here read position 0 where the mask is off, and the where below gives 0 there
        masked = tuple(item for item, keep in zip(key, kept) if not keep)
        return torch.where(extra_mask, tracer.masked_read(tensor, key, masked), 0)


def _with_jagged_mask(tracer: Any, tensor: Any, key: tuple, extra_mask: Any) -> Any:
    """`extra_mask` and the implicit mask of the `hl.jagged_tile` loops around the access."""
    jagged = tracer.jagged_mask(tensor, key)
    if jagged is None:
        return extra_mask
    return jagged if extra_mask is None else extra_mask & jagged


def _index_masks(key: tuple, extra_mask: Any) -> list[Any]:
    """Per item of `key`, the part of `extra_mask` that masks it (None: the item is not an
    index vector, or the mask does not decide its lanes alone).

    An index vector gives the result the axes of its own shape, where the subscript puts
    them (Helion's positional indexing: `x[tile_b.begin, tile_d, seq_idx - 3]` is shaped
    [tile_d, seq]); a mask that is 1 on every other axis of the result
    (`(seq_idx >= 3)[None, :]`) is a mask of the index's lanes, so a masked-off lane reads
    row 0 instead of an out-of-range index. Several index vectors pair as torch does: a mask
    that broadcasts to one of them masks it."""
    if not hasattr(extra_mask, "reshape"):  # a Python bool masks no lane of its own
        return [None] * len(key)
    mask_shape = tuple(extra_mask.shape)
    vectors = [item for item in key if _is_index_vector(item)]
    if len(vectors) != 1 or any(item is Ellipsis for item in key):
        return [extra_mask if _is_index_vector(item) and _covers(item.shape, mask_shape) else None
                for item in key]
    result_rank = sum(_result_axes(item) for item in key)
    if len(mask_shape) > result_rank:
        return [None] * len(key)
    full_mask_shape = (1,) * (result_rank - len(mask_shape)) + mask_shape
    masks, axis = [], 0
    for item in key:
        width = _result_axes(item)
        if _is_index_vector(item):
            own = full_mask_shape[axis:axis + width]
            others = full_mask_shape[:axis] + full_mask_shape[axis + width:]
            fits = all(size == 1 for size in others) and _covers(item.shape, own)
            masks.append(extra_mask.reshape(own) if fits else None)
        else:
            masks.append(None)
        axis += width
    return masks


def _result_axes(item: Any) -> int:
    """How many axes of a subscript's result one item of its key gives."""
    if item is None or isinstance(item, slice):
        return 1
    if isinstance(item, (bool, int)):
        return 0
    shape = getattr(item, "shape", None)
    if shape is None:  # a tile
        return 1
    return len(shape)


def _covers(shape: Sequence[int], mask_shape: Sequence[int]) -> bool:
    """Whether a mask of `mask_shape` broadcasts to `shape` (so it masks each index)."""
    try:
        return broadcast_shape(tuple(shape), tuple(mask_shape)) == tuple(shape)
    except ValueError:
        return False


def store(tensor: Any, index: Sequence[Any], value: Any, extra_mask: Any = None) -> None:
    """`hl.store(x, [tile], v)` is `x[tile] = v`.

    `extra_mask` (a bool tensor shaped like the stored window) stores `v` where it is true
    and keeps the old contents elsewhere. Through an index tensor (a scatter) the mask
    must decide the index's lanes alone (1 on the window's other axes, as `_index_masks`
    says): a masked-off lane writes nothing, so its index may be anything (a jagged row
    past its segment's end). A mask that varies along the other axes too is refused: the
    lane would still name a row, and rewriting part of it with its old contents could undo
    another lane's write. An N-D index tensor that is the whole subscript
    (`hl.store(out_flat, [flat_indices], v)`) scatters through its flat vector. Inside
    `hl.jagged_tile` loops the loop's implicit mask joins `extra_mask`."""
    key = tuple(index)
    tracer = _tracer("store")
    extra_mask = _with_jagged_mask(tracer, tensor, key, extra_mask)
    with tracer.jagged_access():
        _store(tracer, tensor, key, value, extra_mask)


def _store(tracer: Any, tensor: Any, key: tuple, value: Any, extra_mask: Any) -> None:
    vectors = [item for item in key if _is_index_vector(item)]
    if not vectors:
        if extra_mask is None:
            tensor[key] = value
        else:
            tensor[key] = torch.where(extra_mask, value, tensor[key])
        return
    lane_mask = None
    if extra_mask is not None:
        (lane_mask,) = [mask for item, mask in zip(key, _index_masks(key, extra_mask)) if _is_index_vector(item)] \
            if len(vectors) == 1 else [None]
        if lane_mask is None:
            raise exc.UnsupportedOperation(
                "hl.store(x, [..., idx, ...], v, extra_mask=m) through an index tensor needs a mask of the "
                "index's lanes: 1 on every other axis of the stored window (e.g. `m[:, None]` for "
                "`x[idx, :]`). A lane the mask keeps only in part would still name a row, and writing back "
                "its old contents could undo another lane's store.")
        lane_mask = lane_mask.expand(vectors[0].shape)
    key, value, lane_mask = _flat_scatter(key, value, lane_mask)
    if lane_mask is None:
        tensor[key] = value
    else:
        tracer.masked_scatter(tensor, key, value, lane_mask)


def _flat_scatter(key: tuple, value: Any, lane_mask: Any) -> tuple[tuple, Any, Any]:
    """A scatter through an N-D index tensor that is the whole subscript, as one through its
    flat vector (its value broadcast to the index's shape, then flattened like it)."""
    if len(key) != 1 or not _is_index_vector(key[0]) or len(key[0].shape) == 1:
        return key, value, lane_mask
    (index,) = key
    if isinstance(value, torch.Tensor) or hasattr(value, "shape"):
        value = value.expand(index.shape).reshape(-1)
    return (index.reshape(-1),), value, None if lane_mask is None else lane_mask.reshape(-1)


def build_mask(decision: Any, loops: list[tuple[Any, Any]]) -> Any:
    """The implicit mask of an access inside `hl.jagged_tile` loops: for each part of
    `decision` (an `ir.JaggedMask`, frontend/jagged.py), the loop's tile.index < its
    lengths, laid along the result's axes; `loops`: each enclosing jagged loop's (tile,
    lengths), the tracer's proxies or reference mode's tensors alike."""
    mask = None
    for position, r_axis, k_axis in decision.parts:
        tile, lengths = loops[position]
        positions = tile.index[_along(k_axis, decision.rank)]
        # subscripts with None, not reshapes: reference mode then knows which unit axis a
        # one-position tile's lane is (reference/lanes.py)
        bound = lengths[(None,) * decision.rank] if r_axis is None else lengths[_along(r_axis, decision.rank)]
        part = positions < bound
        mask = part if mask is None else mask & part
    return mask


def _along(axis: int, rank: int) -> tuple:
    """The subscript putting a vector's one axis at `axis` of `rank` axes."""
    return (None,) * axis + (slice(None),) + (None,) * (rank - axis - 1)
