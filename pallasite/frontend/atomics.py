"""Helion's atomics (`hl.atomic_add`, `atomic_max`, `atomic_cas`, ...) while tracing.

With tile, ':' and scalar indices every element of `x[index]` belongs to the
one program that owns those tiles, so an atomic is a load, the update (torch code on
the old values, given by `pallasite.language`) and a store there, planned like
`x[tile] += v`. The store is marked `kwargs["atomic"]`: a target combined across
programs (indexed by no tile of an outer grid axis) keeps one resident block
(`plan/scatters.py:widened_for_scatter`). Through an index tensor, lanes naming the same
element would race, which TPU programs cannot do atomically: an error says what to
write instead.
"""
from __future__ import annotations

from typing import Any, Callable

from .. import exc
from ..ir import GatherIndex
from ..language import atomic_index_tensor_error
from .indexing import normalize_subscript
from .proxies import DeviceTensor, HostTensor


def atomic_update(recorder: Any, name: str, tensor: Any, key: tuple, combine: Callable) -> DeviceTensor:
    """Record `tensor[key] = combine(tensor[key])`; return the values before."""
    if recorder.device is None or not isinstance(tensor, HostTensor):
        raise exc.UnsupportedSyntax(f"hl.{name}(tensor, [index...], value) updates a kernel "
                                    "tensor inside a device loop.")
    symbol = tensor.symbol
    index = normalize_subscript(key, symbol.shape, symbol.name, recorder.scalar_value, store=True)
    if any(isinstance(item, GatherIndex) for item in index):
        raise atomic_index_tensor_error(name, symbol.name)
    old = recorder.subscript(tensor, key)
    recorder.store(tensor, key, combine(old), atomic=True)
    return old
