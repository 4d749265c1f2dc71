"""Reductions generated kernels call that Mosaic has no primitive for.

`prod_by_halves`: Mosaic lowers no `reduce_prod`, so `x.prod(dim)` multiplies
the two halves of the axis until one element is left (padding it with ones to a
power of two first). Static slices and multiplies lower on every chip; the
products are associated as a balanced tree, not left to right, so float
results may differ from torch's in the last bits (as any reordered reduction).
"""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax


def prod_by_halves(x, axis=None, keepdims: bool = False):
    """The product of `x` along `axis` (an int, a tuple of ints, or None for all)."""
    x = jnp.asarray(x)
    axes = tuple(range(x.ndim)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(sorted(a % x.ndim for a in axes)) if x.ndim else ()
    for a in axes:
        x = _halve_until_one(x, a)
    return x if keepdims else jnp.squeeze(x, axes)


def _halve_until_one(x, axis: int):
    size = x.shape[axis]
    if size == 0:
        return jnp.ones(x.shape[:axis] + (1,) + x.shape[axis + 1:], x.dtype)
    width = 1
    while width < size:
        width *= 2
    if width != size:  # pad with the identity
        ones = jnp.ones(x.shape[:axis] + (width - size,) + x.shape[axis + 1:], x.dtype)
        x = jnp.concatenate([x, ones], axis=axis)
    while width > 1:
        width //= 2
        x = lax.slice_in_dim(x, 0, width, axis=axis) * lax.slice_in_dim(x, width, 2 * width, axis=axis)
    return x
