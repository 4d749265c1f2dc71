"""Composites that order a tile's elements: torch.sort / argsort / msort / topk by ranks, and
torch.cummax / cummin by a scan of (value, index) pairs.

Mosaic has no sort, top-k or cumulative-max primitive. A tile's axis is short (a block),
so sorting is counting: along the sorted axis each element's rank is the number of
elements that come before it, compared all against all (an `n x n` block of compares,
the last two axes), ties broken by position, so the order is stable (torch's
`stable=True`; torch's unstable order of equal elements is unspecified). Element `r` of
the result is then the one whose rank is `r`: a max over a one-hot select, exact bit for
bit (-0.0 and NaN included). NaN sorts above every number, as in torch.

A partial tile's padding takes part in neither step: the rank's count and the select are
reductions over the tile's axis, whose padding the mask planner drops like any reduction's.
So a valid element's rank counts only valid elements. `topk` of more elements than a
partial tile may hold is refused when compiling (`Call.fewest_valid`), as torch refuses it.
"""
from __future__ import annotations

from typing import Any

import torch

from ... import exc
from .binders import dtype_refusal, normalize_dims
from .definition import EVERY_DTYPE, NUMBERS, Call, Composite, Record
from .pointwise_composites import bound_arguments
from .scans import scan


def _source(call: Call, x: Any) -> torch.Tensor:
    meta = call.meta_of(x)
    if not isinstance(meta, torch.Tensor) or meta.dim() == 0:
        raise exc.UnsupportedOperation(f"{call.display} needs a device value with at least one dim, got {x!r}.")
    return meta


def _lowest(dtype: torch.dtype) -> Any:
    """The select's fill: below every value of `dtype` (the max then picks the one hit)."""
    return float("-inf") if dtype.is_floating_point else torch.iinfo(dtype).min


def _comes_before(record: Record, earlier: Any, later: Any, descending: bool, floating: bool) -> Any:
    """Whether `earlier`'s value sorts strictly before `later`'s (NaN above every number)."""
    first, second = (later, earlier) if descending else (earlier, later)
    before = record("lt", first, second)
    if floating:  # NaN is above every number: before a NaN in ascending order, after it descending
        nan_first, nan_second = record("isnan", first), record("isnan", second)
        before = record("logical_or", before, record("logical_and", nan_second, record("logical_not", nan_first)))
    return before


def _ties(record: Record, a: Any, b: Any, floating: bool) -> Any:
    same = record("eq", a, b)
    if floating:
        same = record("logical_or", same, record("logical_and", record("isnan", a), record("isnan", b)))
    return same


def _ordered(record: Record, x: Any, meta_dtype: torch.dtype, length: int, count: int,
             descending: bool) -> tuple[Any, Any]:
    """The first `count` elements of `x`'s last axis (of `length`) in sorted order, and their
    positions (int32, marked as torch's int64)."""
    work = record("to", x, torch.int32) if meta_dtype == torch.bool else x
    floating = meta_dtype.is_floating_point
    rows = record("unsqueeze", work, -1)  # [..., n (this element), 1]
    columns = record("unsqueeze", work, -2)  # [..., 1, n (each other element)]
    position = record.named(record.arange(length), "sort_position")
    this = record("reshape", position, [length, 1])
    other = record("reshape", position, [1, length])
    before = _comes_before(record, columns, rows, descending, floating)
    earlier_tie = record("logical_and", _ties(record, columns, rows, floating), record("lt", other, this))
    rank = record.named(record("sum", record("logical_or", before, earlier_tie), -1, dtype=torch.int32), "sort_rank")
    slot = record("reshape", record.arange(count), [1, count])  # [n (element), k (result slot)]
    hit = record("eq", record("unsqueeze", rank, -1), slot)
    fill = _lowest(torch.int32 if meta_dtype == torch.bool else meta_dtype)
    values = record("amax", record("where", hit, record("unsqueeze", work, -1), fill), -2)
    indices = record("amax", record("where", hit, this, -1), -2)
    if meta_dtype == torch.bool:
        values = record("to", values, torch.bool)
    return values, record("to", indices, torch.int64)  # torch's int64 positions, held in int32


def _along(record: Record, x: Any, dim: int, rank: int, compute) -> tuple[Any, Any]:
    """`compute(x)` along `dim`: the axis is moved last and back (the compares use the last two)."""
    if dim == rank - 1:
        return compute(x)
    values, indices = compute(record("transpose", x, dim, -1))
    return record("transpose", values, dim, -1), record("transpose", indices, dim, -1)


def _sort(call: Call, record: Record, x: Any, dim: Any, descending: Any) -> tuple[Any, Any]:
    source = _source(call, x)
    (dim,) = normalize_dims(dim, source.dim())
    length = source.shape[dim]
    return _along(record, x, dim, source.dim(),
                  lambda moved: _ordered(record, moved, source.dtype, length, length, bool(descending)))


def _sort_call(call: Call, record: Record) -> Any:
    x, dim, descending, _ = bound_arguments(call, ("input", "dim", "descending", "stable"),
                                            {"dim": -1, "descending": False, "stable": False},
                                            numbers=("dim", "descending", "stable"))
    return torch.return_types.sort(_sort(call, record, x, dim, descending))


def _argsort(call: Call, record: Record) -> Any:
    x, dim, descending, _ = bound_arguments(call, ("input", "dim", "descending", "stable"),
                                            {"dim": -1, "descending": False, "stable": False},
                                            numbers=("dim", "descending", "stable"))
    return _sort(call, record, x, dim, descending)[1]


def _msort(call: Call, record: Record) -> Any:
    (x,) = bound_arguments(call, ("input",), {})
    return _sort(call, record, x, 0, False)[0]


def _topk(call: Call, record: Record) -> Any:
    x, k, dim, largest, _ = bound_arguments(call, ("input", "k", "dim", "largest", "sorted"),
                                            {"dim": -1, "largest": True, "sorted": True},
                                            numbers=("k", "dim", "largest", "sorted"))
    source = _source(call, x)
    if source.dtype == torch.bool:  # torch's CPU kernel refuses it (its meta function does not)
        raise dtype_refusal(call.display, (source,), RuntimeError("topk does not support bool dtypes on CPU"))
    if not isinstance(k, int) or isinstance(k, bool):
        raise exc.UnsupportedOperation(f"{call.display} needs k as an int known when compiling, got {k!r}.")
    call.run_meta(lambda t: torch.topk(t, k, dim, largest), (x,), {})  # k within the axis, as torch checks
    (dim,) = normalize_dims(dim, source.dim())
    fewest = call.fewest_valid(x, dim)
    if fewest is not None and k > fewest:  # torch's check on the tile's valid part (reference mode's)
        raise exc.ShapeMismatch(
            f"{call.display}: k={k}, but a partial tile along dim {dim} may hold only {fewest} valid "
            "element(s) (torch refuses a k past them); choose block sizes whose last tile holds at least k "
            "(a block dividing the dim), or take the top k of the whole axis.")
    length = source.shape[dim]
    result = _along(record, x, dim, source.dim(), lambda moved: _ordered(record, moved, source.dtype, length, k,
                                                                        bool(largest)))
    return torch.return_types.topk(result)


def _cumulative_extreme(spelling: str):
    """torch.cummax / cummin: the running extreme and the position of its latest occurrence
    (a later equal one replaces it; a NaN stays once seen, the latest NaN's position)."""

    def expand(call: Call, record: Record) -> Any:
        x, dim = bound_arguments(call, ("input", "dim"), {}, numbers=("dim",))
        source = _source(call, x)
        call.run_meta(lambda t: getattr(torch, spelling)(t, dim), (x,), {})
        (dim,) = normalize_dims(dim, source.dim())
        length = source.shape[dim]
        position = record("reshape", record.arange(length), [length if a == dim else 1 for a in range(source.dim())])
        position = record("broadcast_to", position, list(source.shape))
        work = record("to", x, torch.int32) if source.dtype == torch.bool else x
        compare = "ge" if spelling == "cummax" else "le"

        def combine(earlier: list, later: list) -> list:
            take = record(compare, later[0], earlier[0])
            if source.dtype.is_floating_point:
                take = record("logical_or", take, record("isnan", later[0]))
            return [record("where", take, b, a) for a, b in zip(earlier, later)]

        values, indices = scan(record, [work, position], dim, False, combine)
        if source.dtype == torch.bool:
            values = record("to", values, torch.bool)
        result_type = getattr(torch.return_types, spelling)
        return result_type((values, record("to", indices, torch.int64)))

    return expand


_ORDER = "ties in position order (torch's stable=True); NaN above every number"
_RANKS = "ranks by an all-pairs compare of the axis (n x n per row: keep the axis a few hundred long)"

ORDERING_DEFINITIONS = (
    Composite("sort", ("sort",), _sort_call, dtypes=EVERY_DTYPE,
              note=f"(values, indices) along dim=; descending=; {_ORDER}; {_RANKS}"),
    Composite("argsort", ("argsort",), _argsort, dtypes=EVERY_DTYPE, note=f"the indices of torch.sort; {_ORDER}"),
    Composite("msort", ("msort",), _msort, dtypes=EVERY_DTYPE, note="torch.sort's values along dim 0"),
    Composite("topk", ("topk",), _topk, dtypes=NUMBERS,
              note=f"(values, indices) of the k largest (largest=False: smallest), sorted; k an int known when "
                   f"compiling; {_ORDER}; {_RANKS}"),
    Composite("cummax", ("cummax",), _cumulative_extreme("cummax"), dtypes=EVERY_DTYPE,
              note="(values, indices): the running max and its latest position; a log-step scan of (value, index)"),
    Composite("cummin", ("cummin",), _cumulative_extreme("cummin"), dtypes=EVERY_DTYPE,
              note="(values, indices): the running min and its latest position; a log-step scan of (value, index)"),
)
