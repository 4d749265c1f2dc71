"""Scans and user-combined reductions in reference mode: the definitions, element by element.

A scan walks the axis in order (from the end in reverse), combining the running
value with each next element: `out[i] = combine(out[i - 1], x[i])`, reverse being
the forward scan of the flipped axis, as torch defines it. A reduce combines the
elements in order. Reference mode has no padding (a partial tile is its valid part),
so these see exactly the valid elements. Everything runs on plain torch tensors;
the results keep the source's lanes.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from .. import exc
from ..frontend.scans import combine_of
from . import lanes

_LOW_PRECISION = (torch.bfloat16, torch.float16)


def _items(values: Any, what: str) -> tuple[list[torch.Tensor], bool]:
    is_tuple = isinstance(values, (tuple, list))
    items = list(values) if is_tuple else [values]
    if not items or not all(lanes.is_device(v) for v in items):
        raise exc.UnsupportedOperation(
            f"{what} takes a device value (or a tuple of them) computed in the device loop, got {values!r}.")
    return items, is_tuple


def _scan(items: list[torch.Tensor], axis: int, reverse: bool, combine: Callable) -> list[torch.Tensor]:
    length = items[0].shape[axis]
    order = range(length - 1, -1, -1) if reverse else range(length)
    running, columns = None, {}
    for i in order:
        element = [item.narrow(axis, i, 1) for item in items]
        running = element if running is None else combine(running, element)
        columns[i] = running
    if not columns:
        return items
    return [torch.cat([columns[i][k] for i in range(length)], axis) for k in range(len(items))]


def associative_scan(combine_fn: Callable, values: Any, dim: int, reverse: bool) -> Any:
    what = "hl.associative_scan"
    items, is_tuple = _items(values, what)
    axis = dim % max(items[0].ndim, 1)
    out = _scan(items, axis, bool(reverse), combine_of(combine_fn, is_tuple, len(items), what))
    out = [lanes.mark(o, lanes.of(item)) for o, item in zip(out, items)]
    return tuple(out) if is_tuple else out[0]


def cumulative(spelling: str, value: torch.Tensor, dim: int, reverse: bool = False,
               dtype: torch.dtype | None = None) -> torch.Tensor:
    """torch.cumsum/cumprod (and hl's, with `reverse`): 16-bit floats accumulate in float32,
    rounded once, as the kernel does; integers give int32 (reference/int64.py asks torch's int64)."""
    function = getattr(torch, spelling)
    result_dtype = dtype or (value.dtype if value.dtype.is_floating_point else torch.int32)
    work = value.to(torch.float32 if result_dtype in _LOW_PRECISION else result_dtype)
    if reverse:
        out = function(work.flip(dim), dim).flip(dim)
    else:
        out = function(work, dim)
    return lanes.finish(out.to(result_dtype), lanes.of(value))


def reduce(combine_fn: Callable, values: Any, dim: Any, keep_dims: bool) -> Any:
    what = "hl.reduce"
    items, is_tuple = _items(values, what)
    rank = items[0].ndim
    axes = list(range(rank)) if dim is None else [dim % max(rank, 1)]
    combine = combine_of(combine_fn, is_tuple, len(items), what)
    kept = lanes.of(items[0])
    for axis in reversed(axes):  # the last axis first: row-major order, as a flat fold (and compiled)
        items = [column.narrow(axis, column.shape[axis] - 1, 1)
                 for column in _scan(items, axis, False, combine)]
    if not keep_dims:
        items = [item.squeeze(tuple(axes)) if axes else item for item in items]
        kept = {a - sum(1 for r in axes if r < a) for a in kept if a not in axes}
    out = [lanes.mark(item, kept) for item in items]
    return tuple(out) if is_tuple else out[0]


# torch's parameters of the orderings the compiled kernel sorts stably (ir/ops/orderings.py)
ORDERINGS = {"sort": ("input", "dim", "descending"), "argsort": ("input", "dim", "descending"),
             "msort": ("input",), "topk": ("input", "k", "dim", "largest", "sorted")}


def ordering(name: str, args: tuple, kwargs: dict) -> Any:
    """torch.sort / argsort / msort / topk in the compiled kernel's order: ties in position order
    (torch's `stable=True`; its unstable order of equal elements is unspecified)."""
    params = {**dict(zip(ORDERINGS[name], args)), **kwargs}
    x = params["input"]
    dim = params.get("dim", 0 if name == "msort" else -1)
    descending = params.get("largest", True) if name == "topk" else params.get("descending", False)
    axis = dim % max(x.ndim, 1)
    if name == "topk":  # torch's checks (dtype, k within the tile's valid part)
        torch.topk(x, params["k"], dim, bool(descending))
    values, indices = torch.sort(x, dim=dim, descending=bool(descending), stable=True)
    kept = lanes.of(x)
    if name == "topk":
        values, indices = values.narrow(axis, 0, params["k"]), indices.narrow(axis, 0, params["k"])
        return lanes.finish(torch.return_types.topk((values, indices)), kept - {axis})
    result = {"sort": torch.return_types.sort((values, indices)), "argsort": indices, "msort": values}[name]
    return lanes.finish(result, kept)
