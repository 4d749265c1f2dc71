"""Concatenation along a minor axis at offsets Mosaic's concatenate does not take.

Mosaic concatenates vectors whose pieces fill whole (sublane, lane) tiles along the
concatenated axis: lane pieces of multiples of 128, sublane pieces of multiples of the
dtype's sublane tile (8 rows of 32-bit values, 16 of 16-bit, 32 of 8-bit). Any other
piece along one of the two minor axes would start mid-tile, so its lanes would have to
be shifted into place. `concatenate` builds the result from operations Mosaic lowers
everywhere, the ones torch.gather's lowering uses: each output position compares an
iota with the positions of each piece, selects the one matching element and sums it
with zeros. The sum runs on the elements' 32-bit patterns (floats bitcast, 16-bit floats
widened first), so every value arrives bit for bit: -0.0, inf and NaN included. It costs
one select per (output position, piece position) pair along the axis: fine for the
tile widths kernels concatenate (RoPE halves, a head's pieces), and the aligned case
never comes here.
"""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax


def concatenate(pieces, axis: int):
    """`jnp.concatenate(pieces, axis)`, built by selects (see the module docstring)."""
    dtype = pieces[0].dtype
    total = sum(piece.shape[axis] for piece in pieces)
    result = None
    offset = 0
    for piece in pieces:
        placed = _placed(piece, axis, total, offset)
        result = placed if result is None else (result | placed if dtype == jnp.bool_ else result + placed)
        offset += piece.shape[axis]
    return result if dtype == jnp.bool_ else _from_bits(result, dtype)


def _placed(piece, axis: int, total: int, offset: int):
    """The 32-bit patterns of `piece` at positions offset.. of an axis of `total` positions,
    zeros (False for bools) elsewhere."""
    size = piece.shape[axis]
    shape = (*piece.shape[:axis], total, size, *piece.shape[axis + 1:])
    hot = lax.broadcasted_iota(jnp.int32, shape, axis) == lax.broadcasted_iota(jnp.int32, shape, axis + 1) + offset
    spread = jnp.expand_dims(piece, axis)
    if piece.dtype == jnp.bool_:
        return jnp.any(hot & spread, axis=axis + 1)
    return jnp.sum(jnp.where(hot, _bits(spread), 0), axis=axis + 1)


def _bits(x):
    """Int32 values that hold `x` exactly: a float's bit pattern, a narrow integer widened."""
    if jnp.issubdtype(x.dtype, jnp.floating):
        wide = x if x.dtype == jnp.float32 else x.astype(jnp.float32)
        return lax.bitcast_convert_type(wide, jnp.int32)
    return x if x.dtype == jnp.int32 else x.astype(jnp.int32)


def _from_bits(bits, dtype):
    if jnp.issubdtype(dtype, jnp.floating):
        wide = lax.bitcast_convert_type(bits, jnp.float32)
        return wide if dtype == jnp.float32 else wide.astype(dtype)
    return bits if dtype == jnp.int32 else bits.astype(dtype)
