"""Bidirectional ring attention: half of each K/V block travels each way round the ring.

As `examples/ring_attention.py` (1-D), but each device's K/V block is split in
two halves of s/2 rows: the first half moves right (device r + 1), the second
left (device r - 1), so each hop sends half the bytes over each of the two links
instead of all of them over one. After hop h a device holds the first half of
rank (r - h)'s block and the second half of rank (r + h)'s, so over n hops it
folds every half of every block into its online softmax. Slots are
double-buffered the same way ([2 slots, 2 halves, s/2, d]); one barrier with
both neighbours per hop covers both directions.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import torch

import pallasite
import pallasite.language as hl
if not __package__:  # run as a script (`python examples/ring_attention_bidirectional.py`): make `examples` importable
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.ring_attention import TOLERANCES, example_inputs, reference, to_jax  # noqa: F401 (re-exported)


@pallasite.kernel(config=pallasite.Config(block_sizes=[]))
def ring_attention_bidirectional(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_buf: torch.Tensor,
                                 v_buf: torch.Tensor, rank: torch.Tensor, n: hl.constexpr,
                                 causal: hl.constexpr) -> torch.Tensor:
    s, d = q.size()
    half = s // 2
    k_halves = k.view(2, half, d)
    v_halves = v.view(2, half, d)
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(d)
    for _ in hl.grid(1):
        me = rank[0]
        right, left = (me + 1) % n, (me + n - 1) % n
        k_buf[0, :, :, :] = k_halves[:, :, :]
        v_buf[0, :, :, :] = v_halves[:, :, :]
        q_blk = q[:, :]
        q_pos = me * s + hl.arange(s)
        m_i = hl.full([s], float("-inf"), dtype=torch.float32)
        l_i = hl.zeros([s], dtype=torch.float32)
        acc = hl.zeros([s, d], dtype=torch.float32)
        for hop in range(n):
            slot, other = hop % 2, (hop + 1) % 2
            sends = hop < n - 1
            if sends:  # half 0 goes right, half 1 left; both start before this hop's compute
                hl.remote_barrier([left, right])
                copies = [hl.make_async_remote_copy(buf, (slot, part), peer, buf, (other, part))
                          for buf in (k_buf, v_buf) for part, peer in ((0, right), (1, left))]
                for copy in copies:
                    copy.start()
            for part in range(2):
                # half 0 came from the left (rank me - hop), half 1 from the right (me + hop)
                origin = (me - hop + n) % n if part == 0 else (me + hop) % n
                if not causal or origin <= me:  # causal: a later rank's block is all in the future
                    k_blk = k_buf[slot, part, :, :]
                    v_blk = v_buf[slot, part, :, :]
                    qk = hl.dot(q_blk, k_blk.transpose(0, 1)) * scale
                    if causal:
                        k_pos = origin * s + part * half + hl.arange(half)
                        qk = torch.where(q_pos[:, None] >= k_pos[None, :], qk, float("-inf"))
                    m_new = torch.maximum(m_i, torch.amax(qk, -1))
                    p = torch.exp(qk - m_new[:, None])
                    alpha = torch.exp(m_i - m_new)
                    l_i = l_i * alpha + torch.sum(p, -1)
                    acc = hl.dot(p.to(v_blk.dtype), v_blk, acc=acc * alpha[:, None])
                    m_i = m_new
            if sends:
                for copy in copies:
                    copy.wait()
        out[:, :] = (acc / l_i[:, None]).to(out.dtype)
    return out


@functools.lru_cache(maxsize=None)
def mesh_step(devices: int, causal: bool):
    """The jitted, shard_mapped kernel on a 1-D mesh and the sharding of its inputs."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((devices,), ("x",), devices=jax.devices()[:devices])

    def body(q_shard, k_shard, v_shard, rank_shard):
        s, d = q_shard.shape
        buffers = jnp.zeros((2, 2, s // 2, d), q_shard.dtype)
        return ring_attention_bidirectional.jax_fn(q_shard, k_shard, v_shard, buffers, buffers, rank_shard,
                                                   devices, causal)[0]

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"),) * 4, out_specs=P("x"), check_vma=False))
    return step, NamedSharding(mesh, P("x"))


def run_on_mesh(q, k, v, devices: int, causal: bool = False):
    """Bidirectional ring attention of full-sequence q, k, v ([S, d]) on a 1-D mesh."""
    import jax
    import jax.numpy as jnp

    step, sharding = mesh_step(devices, causal)
    args = (*(jnp.asarray(a) for a in (q, k, v)), jnp.arange(devices, dtype=jnp.int32))
    return step(*(jax.device_put(a, sharding) for a in args))


CASES = ((4, torch.float32, True), (8, torch.bfloat16, False))
DEVICES = 8  # a mesh example: check() needs this many JAX devices
MESH_SHAPE = (4,)


def shard_inputs() -> tuple:
    """One device's arguments on a 4-device mesh, causal (torch), to generate or lower the kernel."""
    shard, buffers = torch.zeros(32, 128, dtype=torch.bfloat16), torch.zeros(2, 2, 16, 128, dtype=torch.bfloat16)
    return shard, shard, shard, buffers, buffers, torch.zeros(1, dtype=torch.int32), 4, True


def check(cases=CASES) -> float:
    worst = 0.0
    for devices, dtype, causal in cases:
        q, k, v = example_inputs(devices, dtype)
        result = run_on_mesh(to_jax(q), to_jax(k), to_jax(v), devices, causal)
        result = torch.from_numpy(np.asarray(result, dtype=np.float32))
        expected = reference(q, k, v, causal).float()
        atol, rtol = TOLERANCES[dtype]
        torch.testing.assert_close(result, expected, atol=atol, rtol=rtol)
        worst = max(worst, (result - expected).abs().max().item())
    return worst


if __name__ == "__main__":
    from pallasite.runtime.cpu_devices import request_cpu_devices
    request_cpu_devices(DEVICES)
    print(f"ring_attention_bidirectional: max abs error {check():.2e}")
