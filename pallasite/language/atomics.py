"""The atomics (`hl.atomic_add`, ..., `hl.atomic_cas`): read-modify-writes in the program
that owns the element, and the sort-free combination through one index tensor."""
from __future__ import annotations

from typing import Any, Sequence

import torch

from .. import exc
from ..ir import SCATTER_DTYPES
from .memory_ops import _flat_scatter, _is_index_vector, _result_axes
from .tracing import _tracer

ATOMIC_SEMANTICS = ("relaxed", "acquire", "release", "acq_rel")


def _atomic(name: str, target: Any, index: Sequence[Any], combine, sem: str) -> Any:
    """`target[index] = combine(old)` in the program that owns `index`; returns `old`.

    With tile, ':' and scalar indices each element belongs to one program (the one
    owning its tiles), so an atomic is a read-modify-write there, planned like
    `x[tile] += v` (a target combined across programs keeps one resident block and its
    grid axis runs in sequence); `sem` is accepted for Helion compatibility and changes
    nothing. `combine` is torch code on the old values, recorded like the user's own
    (reference mode runs it on the real tensors). Through an index tensor duplicates
    would race, which TPU programs cannot do atomically: an error says what to write.
    """
    if sem not in ATOMIC_SEMANTICS:
        raise exc.UnsupportedOperation(
            f"hl.{name}(sem={sem!r}): sem must be one of {', '.join(map(repr, ATOMIC_SEMANTICS))}.")
    return _tracer(name).atomic_update(name, target, tuple(index), combine)


def _atomic_scatter(name: str, target: Any, index: Sequence[Any], value: Any, sem: str) -> Any:
    """`hl.atomic_add/max/min/and/or/xor(target, [..., idx, ...], v)` through one index vector: every
    lane's value reaches its row, duplicates within the tile included; returns each lane's
    row before its own update, the lanes updating in order (a lane sees the earlier lanes'
    values: `slot = hl.atomic_add(counter, [bucket[t]], 1)` hands out distinct slots).

    Sort-free, in the tile: `hit[i, j]` says lanes i and j name the same row, and lane i's
    total is the combination of the values of every lane j it hits, its old value that of
    the lanes j < i (`_combined`: float sums on the MXU, exact; a select-and-reduce otherwise,
    `hl.reduce` of the bitwise combines). Lanes
    naming one row then all hold the same new row, `combine(old, total)`, so the ordinary
    scatter (the last lane's value wins, `plan/scatters.py`) writes it whatever lane wins; its
    window is resident and the grid axes that do not choose it run in order (`arbitrary`), so
    programs never race.
    A partial tile's padding lanes are masked out of the combination like any padding."""
    if sem not in ATOMIC_SEMANTICS:
        raise exc.UnsupportedOperation(
            f"hl.{name}(sem={sem!r}): sem must be one of {', '.join(map(repr, ATOMIC_SEMANTICS))}.")
    if target.dtype not in SCATTER_DTYPES:
        kinds = ", ".join(str(dtype).replace("torch.", "") for dtype in SCATTER_DTYPES)
        raise exc.UnsupportedOperation(
            f"hl.{name} through an index tensor into a tensor of {str(target.dtype).replace('torch.', '')}: the "
            f"update gathers and scatters the rows its lanes name, and a scatter writes {kinds} tensors only. "
            "Keep the target in int32 (or float32) on the host and convert it back after the call.",
            forms_anchor="hl")
    key, value, _ = _flat_scatter(tuple(index), value, None)
    (position,) = [p for p, item in enumerate(key) if _is_index_vector(item)]
    idx = key[position]
    if len(idx.shape) != 1:
        raise exc.UnsupportedOperation(
            f"hl.{name} through a {len(idx.shape)}-D index tensor: flatten it (and the values) with "
            "`.reshape(-1)`, or make it the whole subscript of a flat view of the target.")
    old = target[key]
    if _tracer(name).distinct_positions(idx):  # `start + tile.index`: no two lanes name one row
        target[key] = _COMBINES[name](old, _filled_like(old, value).expand(old.shape).to(old.dtype))
        return old
    axis = sum(_result_axes(item) for item in key[:position])
    rank, lanes = len(old.shape), idx.shape[0]
    values = _filled_like(old, value).expand(old.shape).to(old.dtype)
    order = [axis] + [a for a in range(rank) if a != axis]
    moved = values.permute(order) if axis else values
    hit = idx[:, None] == idx[None, :]
    total = _combined(name, hit, moved, old.dtype, rank, lanes)
    # lane i's old row: as the lanes before it left it (the updates in lane order)
    position = _tracer(name).arange((lanes,), torch.int32)
    earlier = hit & (position[None, :] < position[:, None])
    prior = _combined(name, earlier, moved, old.dtype, rank, lanes)
    if axis:
        total = total.permute([order.index(a) for a in range(rank)])
        prior = prior.permute([order.index(a) for a in range(rank)])
    if name == "atomic_add" and old.dtype.is_floating_point:  # float32 sums: rounded once into the row
        target[key] = (old.to(torch.float32) + total).to(old.dtype)
        return (old.to(torch.float32) + prior).to(old.dtype)
    target[key] = _COMBINES[name](old, total)
    return _COMBINES[name](old, prior)


def _combined(name: str, hit: Any, moved: Any, dtype: torch.dtype, rank: int, lanes: int) -> Any:
    """Per lane i, the combination of the values of the lanes j with `hit[i, j]` (the
    operation's identity where none): float sums on the MXU (`_float_sums`), the others a
    select over [lanes, lanes, ...] and a reduction over j."""
    if name == "atomic_add" and dtype.is_floating_point:
        return _float_sums(hit, moved, lanes)
    spread = hit.reshape((lanes, lanes) + (1,) * (rank - 1))
    if name == "atomic_add":
        return torch.where(spread, moved[None], 0).sum(1).to(dtype)
    if name in _BITWISE:
        chosen = torch.where(spread, moved[None], _all_ones(dtype) if name == "atomic_and" else 0)
        return _tracer("reduce").reduce(_BITWISE[name], chosen, 1, 0, False)
    fill = _lowest(dtype) if name == "atomic_max" else _highest(dtype)
    chosen = torch.where(spread, moved[None], fill)
    return chosen.amax(1) if name == "atomic_max" else chosen.amin(1)


def _float_sums(hit: Any, moved: Any, lanes: int) -> Any:
    """`hit` as 0/1 @ the values in float32, exact (HIGHEST precision: a TPU's default is one
    bfloat16 pass), kept in float32 for the add into the row. Non-finite values stay out of
    the product (0 * inf is NaN in every row they do not hit): a row's inf, -inf or NaN lanes
    are counted by products of their own (0/1 factors, exact in any precision)."""
    flat = moved.reshape(lanes, -1).to(torch.float32)
    pick = torch.where(hit, 1.0, 0.0)
    with _tracer("atomic_add").exact_products():
        total = pick @ torch.where(torch.isfinite(flat), flat, 0.0)
    nan, up, down = (pick @ torch.where(flag, 1.0, 0.0) > 0
                     for flag in (torch.isnan(flat), flat == float("inf"), flat == float("-inf")))
    total = torch.where(up, float("inf"), torch.where(down, float("-inf"), total))
    return torch.where(nan | (up & down), float("nan"), total).reshape(moved.shape)


_BITWISE = {"atomic_and": lambda a, b: a & b, "atomic_or": lambda a, b: a | b, "atomic_xor": lambda a, b: a ^ b}
_COMBINES = {**_BITWISE, "atomic_add": lambda a, b: a + b, "atomic_max": torch.maximum, "atomic_min": torch.minimum}


def _all_ones(dtype: torch.dtype) -> Any:
    """`&`'s identity: every bit set."""
    if dtype == torch.bool:
        return True
    if dtype.is_floating_point:
        return 0  # torch refuses `&` of floats: the combine below says so at the user's line
    return -1 if dtype.is_signed else torch.iinfo(dtype).max


def _lowest(dtype: torch.dtype) -> Any:
    return float("-inf") if dtype.is_floating_point else torch.iinfo(dtype).min


def _highest(dtype: torch.dtype) -> Any:
    return float("inf") if dtype.is_floating_point else torch.iinfo(dtype).max


def _through_index_tensor(index: Sequence[Any]) -> bool:
    return sum(1 for item in index if _is_index_vector(item)) == 1


def _filled_like(old: Any, value: Any) -> Any:
    """`value` as a tensor shaped like `old` when it is a Python number."""
    if isinstance(value, (bool, int, float)):
        return torch.full_like(old, value)
    return value


def atomic_add(target: Any, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
    """`target[index] += value`; returns the values before the add. Through an index tensor
    (`hl.atomic_add(out, [segment[tile], slice(None)], v)`: `:` is not Python outside a
    subscript), lanes naming the same row all add up, and each lane gets its row as the
    lanes before it left it (the adds in lane order: `hl.atomic_add(counter, [bucket[t]], 1)`
    hands out distinct slots); the values are converted to the target's dtype first (as
    Triton's atomics convert them), then float lanes are summed exactly in float32 and rounded
    once into the row (torch's index_add_ rounds after each add)."""
    if _through_index_tensor(index):
        return _atomic_scatter("atomic_add", target, index, value, sem)
    return _atomic("atomic_add", target, index, lambda old: old + value, sem)


def atomic_and(target: Any, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
    """`target[index] &= value` (integers and bools); returns the values before.
    Through an index tensor, the lanes naming a row all combine into it."""
    if _through_index_tensor(index):
        return _atomic_scatter("atomic_and", target, index, value, sem)
    return _atomic("atomic_and", target, index, lambda old: old & value, sem)


def atomic_or(target: Any, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
    """`target[index] |= value` (integers and bools); returns the values before.
    Through an index tensor, the lanes naming a row all combine into it."""
    if _through_index_tensor(index):
        return _atomic_scatter("atomic_or", target, index, value, sem)
    return _atomic("atomic_or", target, index, lambda old: old | value, sem)


def atomic_xor(target: Any, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
    """`target[index] ^= value` (integers and bools); returns the values before.
    Through an index tensor, the lanes naming a row all combine into it."""
    if _through_index_tensor(index):
        return _atomic_scatter("atomic_xor", target, index, value, sem)
    return _atomic("atomic_xor", target, index, lambda old: old ^ value, sem)


def atomic_max(target: Any, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
    """`target[index] = torch.maximum(target[index], value)`; returns the values before.
    Through an index tensor, the largest of the lanes naming a row reaches it."""
    if _through_index_tensor(index):
        return _atomic_scatter("atomic_max", target, index, value, sem)
    return _atomic("atomic_max", target, index, lambda old: torch.maximum(old, _filled_like(old, value)), sem)


def atomic_min(target: Any, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
    """`target[index] = torch.minimum(target[index], value)`; returns the values before.
    Through an index tensor, the smallest of the lanes naming a row reaches it."""
    if _through_index_tensor(index):
        return _atomic_scatter("atomic_min", target, index, value, sem)
    return _atomic("atomic_min", target, index, lambda old: torch.minimum(old, _filled_like(old, value)), sem)


def atomic_xchg(target: Any, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
    """`target[index] = value`; returns the values before."""
    return _atomic("atomic_xchg", target, index, lambda old: _filled_like(old, value), sem)


def atomic_cas(target: Any, index: Sequence[Any], expected: Any, value: Any, sem: str = "relaxed") -> Any:
    """Compare and swap: `value` where `target[index] == expected`, the old value elsewhere;
    returns the values before."""
    return _atomic("atomic_cas", target, index,
                   lambda old: torch.where(old == expected, _filled_like(old, value), old), sem)


def atomic_index_tensor_error(name: str, target: str) -> exc.UnsupportedOperation:
    """The error for `hl.<name>(target, [idx, ...], v)` with an index tensor that
    `_atomic_scatter` does not take (tracer and reference mode)."""
    if name in ("atomic_add", "atomic_max", "atomic_min", *_BITWISE):
        return exc.UnsupportedOperation(
            f"hl.{name}({target}, [...], v) through several index tensors is not supported: it takes "
            f"one index tensor. Index a flat view of {target} with one combined index "
            "(`flat = t.view(-1)` in host code, then `[idx_a * size_b + idx_b]`).", forms_anchor="hl")
    return exc.UnsupportedOperation(
        f"hl.{name}({target}, [...], v) through an index tensor is not supported: which lane's value a "
        "row keeps would depend on the order the lanes naming it go in, and a TPU has no atomic scatter "
        "(hl.atomic_add, max, min, and, or and xor take one index tensor: their lanes commute). Index the "
        "target with tiles (each element then belongs to one program), or store through the index "
        f"(`{target}[idx[tile], ...] = v`: of lanes naming one row, the highest writes, deterministically).",
        forms_anchor="hl")
