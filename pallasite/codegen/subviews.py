"""Narrowing reads (`subview` nodes) as plan/subviews.py decided them (`SubviewRead`):
a read of a VMEM ref with `pl.ds` runs, or a static slice of a value. Nothing is
re-derived here."""
from __future__ import annotations

import torch

from ..plan.plans import RefOffset
from .lowering import jnp_dtype, literal


def offset_text(emitter, item: RefOffset) -> str:
    """A position, a static slice `a:b`, or a run `pl.ds(start, size)`."""
    constant = sum(t for t in item.terms if isinstance(t, int))
    values = [emitter.render(t) for t in item.terms if not isinstance(t, int)]
    if not values and item.size is not None:
        return f"{constant}:{constant + item.size}"
    start = " + ".join(values + ([str(constant)] if constant or not values else []))
    return start if item.size is None else f"pl.ds({start}, {item.size})"


def subview_text(emitter, node) -> str:
    """The expression of one narrowing read (the `subview` structural rule)."""
    read = emitter.plan.subviews[node.id]
    if read.ref_name is None:
        key = ", ".join(":" if k == slice(None) else f"{k.start}:{k.stop}" if isinstance(k, slice) else str(k)
                        for k in read.static_key)
        source = emitter.render(read.source)
        out = node.outputs[0]
        if out.shape == () and out.dtype in (torch.bfloat16, torch.float16):
            # Mosaic has no 16-bit scalars: the element is read from the float32 vector, then rounded
            return f"{source}.astype(jnp.float32)[{key}].astype({jnp_dtype(out.dtype)})"
        return f"{source}[{key}]"
    parts = ", ".join(emitter.ref_subscript(_Items((item,))) for item in read.ref_index) or "..."
    text = f"{read.ref_name}[{parts}]"
    if tuple(read.ref_shape) != tuple(read.value_shape):
        text = f"{text}.reshape({literal(tuple(read.value_shape))})"
    return text


def emit_spill(emitter, node) -> None:
    """A computed value read at a moving offset: its current contents go to VMEM scratch first."""
    read = emitter.plan.subviews[node.id]
    if read.spill_from is not None:
        emitter.emit(f"{read.ref_name}[...] = {emitter.render(read.spill_from)}")


class _Items:
    """One ref item, in the shape `KernelEmitter.ref_subscript` renders."""

    def __init__(self, ref_index: tuple):
        self.ref_index = ref_index
