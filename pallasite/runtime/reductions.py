"""Reductions generated kernels call that Mosaic has no primitive for.

`integer_arg_extreme`: Mosaic's argmax and argmin take float32 only, so an integer
argmax/argmin is the first index holding the max/min (a max, a compare, and a min of the
indices there), exact for every int32 (a cast to float32 would round values past 2^24).

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


def integer_arg_extreme(x, axis: int | None, keepdims: bool = False, largest: bool = True):
    """torch.argmax (`largest`) or torch.argmin of an integer `x` along `axis` (None: of the
    flattened array), as int32: the first index holding the extreme."""
    x = jnp.asarray(x)
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis %= x.ndim
    extreme = jnp.max(x, axis=axis, keepdims=True) if largest else jnp.min(x, axis=axis, keepdims=True)
    index = lax.broadcasted_iota(jnp.int32, x.shape, axis)
    return jnp.min(jnp.where(x == extreme, index, x.shape[axis]), axis=axis, keepdims=keepdims)
