"""Host-code subscripts whose positions only the data knows.

Host code indexes whole tensors with JAX, which clamps an out-of-range index
where torch raises. Each index tensor or runtime scalar of a host subscript
(`x[idx]`, `out[idx, :] = v`, `x[i]`) becomes a `RangeCheck` that interpret
mode runs before the indexing, so a bad index is `exc.ShapeMismatch` at the
user's line instead of a silently clamped result.
"""
from __future__ import annotations

from typing import Iterator

from ..ir import HostOp, HostStore, KernelIR, ScalarSymbol, TensorSymbol
from .plans import RangeCheck


def plan_host_index_checks(ir: KernelIR, check_ids: Iterator[int]) -> tuple[RangeCheck, ...]:
    checks = []
    for step in ir.steps:
        if isinstance(step, HostOp) and step.op == "getitem" and isinstance(step.args[0], TensorSymbol):
            tensor, key = step.args[0], step.kwargs["key"]
        elif isinstance(step, HostStore):
            tensor, key = step.tensor, step.key
        else:
            continue
        for position, axis, index in _data_indices(key, len(tensor.shape)):
            size = tensor.shape[axis]
            what = f"index tensor '{index.name}'" if isinstance(index, TensorSymbol) else f"scalar '{index.name}'"
            message = (f"{tensor.name}[...]: {what} holds {{lo}}, outside axis {axis} of '{tensor.name}' "
                       "(size {limit}); indices must lie in [-{limit}, {limit}).")
            checks.append(RangeCheck(next(check_ids), size, message, step.location,
                                     host_index=(step.id, position)))
    return tuple(checks)


def _data_indices(key, rank: int):
    """(position in the key, tensor axis, symbol) of each index the data decides."""
    items = key if isinstance(key, tuple) else (key,)
    consumed = sum(1 for item in items if item is not None and item is not Ellipsis)
    axis = 0
    for position, item in enumerate(items):
        if item is Ellipsis:
            axis += rank - consumed
        elif item is None:
            continue
        else:
            if isinstance(item, (TensorSymbol, ScalarSymbol)):
                yield position, axis, item
            axis += 1
