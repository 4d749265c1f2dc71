"""`hl.atomic_add(x, [index...], v)` while tracing.

With tile, ':' and scalar indices every element of `x[index]` belongs to the
one program that owns those tiles, so the add is a load, an `add` and a store
there, planned like `x[tile] += v`. The store is marked `kwargs["atomic"]`: a
target that accumulates across programs (indexed by no tile of an outer grid
axis) keeps one resident block (`plan/scatters.py:widened_for_scatter`).
Through an index tensor, duplicate indices would have to add up, which TPU
programs cannot do atomically: an error says what to write instead.
"""
from __future__ import annotations

from typing import Any

from .. import exc
from ..ir import GatherIndex
from ..language import atomic_add_index_tensor_error
from .indexing import normalize_subscript
from .proxies import DeviceTensor, HostTensor


def atomic_add(recorder: Any, tensor: Any, key: tuple, value: Any) -> DeviceTensor:
    """Record `tensor[key] += value`; return the values before the add."""
    if recorder.device is None or not isinstance(tensor, HostTensor):
        raise exc.UnsupportedSyntax("hl.atomic_add(tensor, [index...], value) adds into a kernel "
                                    "tensor inside a device loop.")
    symbol = tensor.symbol
    index = normalize_subscript(key, symbol.shape, symbol.name, recorder.scalar_value, store=True)
    if any(isinstance(item, GatherIndex) for item in index):
        raise atomic_add_index_tensor_error(symbol.name)
    old = recorder.subscript(tensor, key)
    recorder.store(tensor, key, old + value, atomic=True)
    return old
