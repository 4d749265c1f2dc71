"""Ring attention with in-kernel remote DMA: 1-D ring and 2-D (inner axis, then outer).

q, k and v are sharded along the sequence: flat rank r holds rows [r * s, (r + 1)
* s). Each device computes attention for its q rows with an online softmax over
the n K/V blocks; the blocks travel around the ring inside the kernel. Two slots
per buffer (`k_buf`, `v_buf`: [2, s, d]) double-buffer them: at hop h the block
in slot h % 2 is pushed to the next device's other slot *before* this hop's
compute, and waited after it, before the slots swap. A barrier with the two
devices this hop exchanges with comes first: the receiver has finished reading
the slot it is about to be sent (its previous hop; at hop 0, has filled its
buffers), and a receive semaphore, which counts bytes, never sees the next
hop's bytes early.

2-D: with `inner` < n the mesh is (n // inner) x inner, row-major; a block moves
`inner - 1` hops along its row, then one hop to the next row (same column), so
row after row every block passes by. `inner == n` is the 1-D ring.

Causal attention uses global positions: a block from a later rank lies wholly in
the future and is skipped (its hop still forwards it); the diagonal block is
masked. The hops are a Python loop (unrolled while tracing), so slots, peers
and the last hop (which sends nothing) are fixed in the generated code.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import torch

import pallasite
import pallasite.language as hl


@pallasite.kernel(config=pallasite.Config(block_sizes=[]))
def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor,
                   rank: torch.Tensor, n: hl.constexpr, inner: hl.constexpr, causal: hl.constexpr) -> torch.Tensor:
    s, d = q.size()
    outer = n // inner
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(d)
    for _ in hl.grid(1):
        me = rank[0]
        row, col = me // inner, me % inner
        inner_right = row * inner + (col + 1) % inner
        inner_left = row * inner + (col + inner - 1) % inner
        outer_right = ((row + 1) % outer) * inner + col
        outer_left = ((row + outer - 1) % outer) * inner + col
        k_buf[0, :, :] = k[:, :]
        v_buf[0, :, :] = v[:, :]
        q_blk = q[:, :]
        q_pos = me * s + hl.arange(s)
        m_i = hl.full([s], float("-inf"), dtype=torch.float32)
        l_i = hl.zeros([s], dtype=torch.float32)
        acc = hl.zeros([s, d], dtype=torch.float32)
        for hop in range(n):
            slot, other = hop % 2, (hop + 1) % 2
            sends = hop < n - 1
            if sends:  # the next hop's block starts moving before this hop's compute
                along_row = (hop + 1) % inner != 0
                to_peer = inner_right if along_row else outer_right
                from_peer = inner_left if along_row else outer_left
                hl.remote_barrier([from_peer, to_peer])
                k_copy = hl.make_async_remote_copy(k_buf, slot, to_peer, k_buf, other)
                v_copy = hl.make_async_remote_copy(v_buf, slot, to_peer, v_buf, other)
                k_copy.start()
                v_copy.start()
            # the block in this slot came from rank `origin` (phase r of the 2-D walk, step j in it)
            r, j = hop // inner, hop % inner
            origin = ((row + outer - r % outer) % outer) * inner + (col + r + inner - j) % inner
            if not causal or origin <= me:  # causal: a later rank's block is all in the future
                k_blk = k_buf[slot, :, :]
                v_blk = v_buf[slot, :, :]
                qk = hl.dot(q_blk, k_blk.transpose(0, 1)) * scale
                if causal:
                    k_pos = origin * s + hl.arange(s)
                    qk = torch.where(q_pos[:, None] >= k_pos[None, :], qk, float("-inf"))
                m_new = torch.maximum(m_i, torch.amax(qk, -1))
                p = torch.exp(qk - m_new[:, None])
                alpha = torch.exp(m_i - m_new)
                l_i = l_i * alpha + torch.sum(p, -1)
                acc = hl.dot(p.to(v_blk.dtype), v_blk, acc=acc * alpha[:, None])
                m_i = m_new
            if sends:
                k_copy.wait()
                v_copy.wait()
        out[:, :] = (acc / l_i[:, None]).to(out.dtype)
    return out


@functools.lru_cache(maxsize=None)
def mesh_step(mesh_shape: tuple[int, ...], causal: bool, kernel=ring_attention):
    """The jitted, shard_mapped ring attention on a mesh of `mesh_shape` (1 or 2 axes; the
    sequence is split over the flat ranks, row-major) and the sharding of its inputs."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    n = math.prod(mesh_shape)
    names = ("x", "y")[:len(mesh_shape)]
    mesh = jax.make_mesh(mesh_shape, names, devices=jax.devices()[:n])
    spec = P(names)  # the leading axis split over every mesh axis, row-major
    inner = mesh_shape[-1]

    def body(q_shard, k_shard, v_shard, rank_shard):
        buffers = jnp.zeros((2, *q_shard.shape), q_shard.dtype)
        return kernel.jax_fn(q_shard, k_shard, v_shard, buffers, buffers, rank_shard, n, inner, causal)[0]

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(spec,) * 4, out_specs=spec, check_vma=False))
    return step, NamedSharding(mesh, spec)


def run_on_mesh(q, k, v, mesh_shape: tuple[int, ...], causal: bool = False, kernel=ring_attention):
    """Ring attention of full-sequence q, k, v ([S, d] jax or numpy arrays) on a mesh."""
    import jax
    import jax.numpy as jnp

    step, sharding = mesh_step(tuple(mesh_shape), causal, kernel)
    args = (*(jnp.asarray(a) for a in (q, k, v)), jnp.arange(math.prod(mesh_shape), dtype=jnp.int32))
    return step(*(jax.device_put(a, sharding) for a in args))


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Unsharded attention over the whole sequence (torch)."""
    out = torch.nn.functional.scaled_dot_product_attention(q.float()[None], k.float()[None], v.float()[None],
                                                           is_causal=causal)[0]
    return out.to(q.dtype)


def example_inputs(devices: int = 4, dtype: torch.dtype = torch.float32, rows: int = 32, head_dim: int = 128):
    torch.manual_seed(0)
    return tuple(torch.randn(devices * rows, head_dim).to(dtype) for _ in range(3))


TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}
# (mesh, dtype, causal) that check() runs: 1-D rings of 4 and 8, the 2-D ring on 2x2
CASES = (((4,), torch.float32, False), ((4,), torch.bfloat16, True), ((8,), torch.float32, True),
         ((2, 2), torch.bfloat16, True), ((2, 2), torch.float32, False))
# A mesh example: check() needs this many JAX devices (see examples/ring_all_gather.py).
DEVICES = 8
MESH_SHAPE = (2, 2)  # the mesh shard_inputs() is one device of (for to_code and TPU lowering)


def shard_inputs() -> tuple:
    """One device's arguments on the 2x2 mesh, causal (torch), to generate or lower the kernel."""
    shard, buffers = torch.zeros(32, 128, dtype=torch.bfloat16), torch.zeros(2, 32, 128, dtype=torch.bfloat16)
    return shard, shard, shard, buffers, buffers, torch.zeros(1, dtype=torch.int32), 4, 2, True


def to_jax(tensor: torch.Tensor):
    import jax.numpy as jnp
    return jnp.asarray(tensor.float().numpy()).astype(jnp.bfloat16 if tensor.dtype == torch.bfloat16 else jnp.float32)


def check(cases=CASES) -> float:
    worst = 0.0
    for mesh_shape, dtype, causal in cases:
        q, k, v = example_inputs(math.prod(mesh_shape), dtype)
        result = run_on_mesh(to_jax(q), to_jax(k), to_jax(v), mesh_shape, causal)
        result = torch.from_numpy(np.asarray(result, dtype=np.float32))
        expected = reference(q, k, v, causal).float()
        atol, rtol = TOLERANCES[dtype]
        torch.testing.assert_close(result, expected, atol=atol, rtol=rtol)
        worst = max(worst, (result - expected).abs().max().item())
    return worst


if __name__ == "__main__":
    from pallasite.runtime.cpu_devices import request_cpu_devices
    request_cpu_devices(DEVICES)
    print(f"ring_attention: max abs error {check():.2e}")
