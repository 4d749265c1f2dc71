"""The hash behind `hl.rand` and `torch.rand_like` in generated kernels.

Why a hash and not the TPU's hardware PRNG (`pltpu.prng_seed` /
`prng_random_bits`): JAX 0.10.2's TPU interpret mode returns zeros for
`prng_random_bits`, so kernels using it could not be tested off a TPU, and a
stateful generator's numbers would depend on the grid order and the block
sizes. A counter-based hash gives the same numbers on a TPU, in interpret mode
and in reference mode (`pallasite/reference/prng.py` computes it again in
PyTorch), for any config. It costs about a dozen int32 VPU ops per element.

`counter` numbers the element (built by `frontend/random_values.py`); `seed`
and `stream` make the key. Everything is int32 with wrapping multiplies and
logical shifts, which Mosaic lowers on vectors and scalars alike.
"""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax

# The xorshift-multiply finalizer known as lowbias32: a bijection of 32-bit words
# whose output bits each depend on every input bit.
_MULTIPLIERS = (0x7FEB352D, 0x846CA68B)
_GOLDEN = 0x9E3779B9  # spreads stream numbers over the key space
_KEY_OFFSET = 0x6A09E667  # so that seed 0, stream 0 is not the all-zero key

# Random bits kept per dtype: as many as its significand holds in [0.5, 1), so every
# value is exact and below 1.
SIGNIFICAND_BITS = {jnp.dtype(jnp.float32): 24, jnp.dtype(jnp.bfloat16): 8, jnp.dtype(jnp.float16): 11}


def as_int32(value: int) -> int:
    """A Python int's low 32 bits as a signed int32 value."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _mix(x):
    x = x ^ lax.shift_right_logical(x, 16)
    x = x * jnp.int32(as_int32(_MULTIPLIERS[0]))
    x = x ^ lax.shift_right_logical(x, 15)
    x = x * jnp.int32(as_int32(_MULTIPLIERS[1]))
    return x ^ lax.shift_right_logical(x, 16)


def random_bits(counter, seed, stream: int = 0):
    """32 random bits (as int32) per element of the int32 `counter`."""
    salt = jnp.int32(as_int32(stream * _GOLDEN + _KEY_OFFSET))
    key = _mix(jnp.asarray(seed, jnp.int32) ^ salt)
    return _mix(_mix(counter ^ key) + key)


def random_uniform(counter, seed, stream: int = 0, dtype=jnp.float32):
    """Uniform numbers in [0, 1) of `dtype`, one per element of `counter`."""
    bits = SIGNIFICAND_BITS[jnp.dtype(dtype)]
    kept = lax.shift_right_logical(random_bits(counter, seed, stream), 32 - bits)
    return (kept.astype(jnp.float32) * (1.0 / (1 << bits))).astype(dtype)
