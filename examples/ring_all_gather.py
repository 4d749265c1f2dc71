"""Ring all-gather with in-kernel remote DMA, on every device of a 1-D mesh.

Each device holds one shard `x` ([rows, cols]) and a buffer `out` ([n, rows,
cols]); after the kernel, every device's `out[d]` is device d's shard. The
kernel first puts its own shard in its slot, then runs n - 1 hops: at hop h it
forwards the slot it received last (its own at h = 0) to its right neighbour,
which stores it in the same slot. Before each hop it meets both neighbours at a
barrier, so a fast device never sends into a neighbour that is still waiting
for the previous hop (a receive semaphore counts bytes, not copies), nor, at
hop 0, into one that has not yet copied in `out`.

`rank` is a 1-element int32 shard: the device's flat position on the mesh
(`jnp.arange(n)` sharded like the data). The kernel runs under `jax.shard_map`
(`run_on_mesh` below); called directly on torch tensors it raises.
"""
from __future__ import annotations

import numpy as np
import torch

import pallasite
import pallasite.language as hl


@pallasite.kernel(config=pallasite.Config(block_sizes=[]))
def ring_all_gather(x: torch.Tensor, out: torch.Tensor, rank: torch.Tensor, n: hl.constexpr) -> torch.Tensor:
    for _ in hl.grid(1):
        me = rank[0]
        right = (me + 1) % n
        left = (me + n - 1) % n
        out[me, :, :] = x[:, :]
        for hop in hl.grid(n - 1):
            slot = (me - hop + n) % n  # what arrived last hop (at hop 0, my own shard)
            hl.remote_barrier([left, right])
            copy = hl.make_async_remote_copy(out, slot, right)
            copy.start()
            copy.wait()
    return out


def run_on_mesh(x: np.ndarray, devices: int, kernel=ring_all_gather) -> np.ndarray:
    """All-gather the `devices` row blocks of `x` ([devices * rows, cols]); returns every
    device's result stacked: [devices, devices, rows, cols]."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((devices,), ("x",), devices=jax.devices()[:devices])
    rows, cols = x.shape[0] // devices, x.shape[1]

    def body(x_shard, out_shard, rank_shard):
        return kernel.jax_fn(x_shard, out_shard[0], rank_shard, devices)[0][None]

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P("x"), P("x")), out_specs=P("x"),
                                 check_vma=False))
    sharding = NamedSharding(mesh, P("x"))
    args = (jnp.asarray(x), jnp.zeros((devices, devices, rows, cols), jnp.asarray(x).dtype),
            jnp.arange(devices, dtype=jnp.int32))
    return np.asarray(step(*(jax.device_put(a, sharding) for a in args)))


def reference(x: np.ndarray, devices: int) -> np.ndarray:
    blocks = x.reshape(devices, x.shape[0] // devices, x.shape[1])
    return np.stack([blocks] * devices)


def example_inputs(devices: int = 4) -> tuple:
    rng = np.random.default_rng(0)
    return rng.standard_normal((devices * 8, 128)).astype(np.float32), devices


# A mesh example: check() needs this many JAX devices (on a CPU, XLA_FLAGS=
# --xla_force_host_platform_device_count=8 before importing JAX; run_all.py and
# tests/test_examples.py run it in a subprocess so).
DEVICES = 8
MESH_SHAPE = (4,)  # the mesh shard_inputs() is one device of (for to_code and TPU lowering)


def shard_inputs() -> tuple:
    """One device's arguments on a 4-device mesh (torch), to generate or lower the kernel."""
    return torch.zeros(8, 128), torch.zeros(4, 8, 128), torch.zeros(1, dtype=torch.int32), 4


def check() -> float:
    worst = 0.0
    for devices in (4, 8):
        x, _ = example_inputs(devices)
        result = run_on_mesh(x, devices)
        expected = reference(x, devices)
        np.testing.assert_array_equal(result, expected)
        worst = max(worst, float(np.abs(result - expected).max()))
    return worst


if __name__ == "__main__":
    from pallasite.runtime.cpu_devices import request_cpu_devices
    request_cpu_devices(DEVICES)
    print(f"ring_all_gather: max abs error {check():.2e}")
