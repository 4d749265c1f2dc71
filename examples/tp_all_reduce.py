"""A tensor-parallel residual stack: per layer, a row-parallel GEMV and `hl.all_reduce`.

Every device of a 1-D mesh holds the same activations `x` ([m, h]) and its own shard of
each layer's weight (`w`: [layers, h, h], a different slice of the model per device).
Layer i computes the device's partial product `res @ w[i]` in float32, sums the
partials of all devices with `hl.all_reduce` (in float32, cast to x's dtype), and adds
the sum to the residual stream, which stays identical on every device.

`peers` is a [1, devices - 1] int32 table of the other devices' flat ranks and `rank`
this device's ([1]), both sharded like the data (`run_on_mesh` below). The kernel runs
under `jax.shard_map`; called directly on torch tensors it raises.
"""
from __future__ import annotations

import numpy as np
import torch

import pallasite
import pallasite.language as hl


@pallasite.kernel(static_shapes=True)
def tp_all_reduce(x: torch.Tensor, w: torch.Tensor, peers: torch.Tensor, rank: torch.Tensor,
                      algorithm: hl.constexpr = None) -> torch.Tensor:
    m, h = x.shape
    res = torch.empty_like(x)
    partial = torch.empty([m, h], dtype=torch.float32, device=x.device)
    total = torch.empty([m, h], dtype=x.dtype, device=x.device)
    for tm, tn in hl.tile([m, h]):
        res[tm, tn] = x[tm, tn]
    for i in range(w.size(0)):
        for tm, tn in hl.tile([m, h]):
            acc = hl.zeros([tm, tn], dtype=torch.float32)
            for tk in hl.tile(h):
                acc = hl.dot(res[tm, tk], w[i, tk, tn], acc=acc)
            partial[tm, tn] = acc
        hl.all_reduce(total, partial, peers[0, :], rank[0], algorithm=algorithm)
        for tm, tn in hl.tile([m, h]):
            res[tm, tn] = res[tm, tn] + total[tm, tn]
    return res


def peer_tables(devices: int) -> tuple[np.ndarray, np.ndarray]:
    """Each device's `peers` ([1, devices - 1]: the others, starting from its right) and
    `rank` ([1]), stacked along a leading mesh axis."""
    peers = np.array([[[(rank + off) % devices for off in range(1, devices)]] for rank in range(devices)],
                     dtype=np.int32)
    return peers, np.arange(devices, dtype=np.int32)[:, None]


def run_on_mesh(x: torch.Tensor, w: torch.Tensor, algorithm: str | None = None,
                kernel=tp_all_reduce) -> np.ndarray:
    """`w` is [devices, layers, h, h] (device d's shards); returns every device's result,
    stacked: [devices, m, h], as float32."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    devices = w.shape[0]
    mesh = jax.make_mesh((devices,), ("x",), devices=jax.devices()[:devices])

    def body(x_all, w_shard, peers_shard, rank_shard):
        return kernel.jax_fn(x_all, w_shard[0], peers_shard[0], rank_shard[0], algorithm)[None]

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P("x"), P("x"), P("x")), out_specs=P("x"),
                                 check_vma=False))
    peers, rank = peer_tables(devices)
    dtype = jnp.bfloat16 if x.dtype == torch.bfloat16 else jnp.float32
    args = [(jnp.asarray(x.float().numpy(), dtype), P()), (jnp.asarray(w.float().numpy(), dtype), P("x")),
            (jnp.asarray(peers), P("x")), (jnp.asarray(rank), P("x"))]
    out = step(*(jax.device_put(a, NamedSharding(mesh, spec)) for a, spec in args))
    return np.asarray(out.astype(jnp.float32))


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The stack in torch: each layer's partials summed over the devices in float32."""
    res = x
    for i in range(w.shape[1]):
        total = sum(torch.mm(res.float(), w[d, i].float()) for d in range(w.shape[0]))
        res = res + total.to(x.dtype)
    return res.float()


def example_inputs(devices: int = 4, m: int = 8, h: int = 512, layers: int = 3,
                   dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(m, h, generator=gen).to(dtype)
    w = (torch.randn(devices, layers, h, h, generator=gen) * h ** -0.5 / devices).to(dtype)
    return x, w


# A mesh example: check() needs this many JAX devices (on a CPU, XLA_FLAGS=
# --xla_force_host_platform_device_count=9 before importing JAX, one spare:
# runtime/cpu_devices.py; run_all.py and tests/test_examples.py run it in a subprocess so).
DEVICES = 8
MESH_SHAPE = (4,)  # the mesh shard_inputs() is one device of (for to_code and TPU lowering)
TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}
# (devices, m, h, dtype, algorithm): one-shot and reduce-scatter given, and chosen by
# payload (a one-row decode step is one-shot, 64 rows of h = 1024 on 4 devices
# reduce-scatter; on 2 devices reduce-scatter saves nothing).
CASES = [(4, 8, 512, torch.float32, "one_shot"), (8, 3, 1024, torch.bfloat16, "reduce_scatter"),
         (4, 1, 512, torch.bfloat16, None), (4, 64, 1024, torch.float32, None), (2, 16, 512, torch.float32, None)]


def shard_inputs() -> tuple:
    """One device's arguments on a 4-device mesh (torch), to generate or lower the kernel."""
    return (torch.zeros(8, 512, dtype=torch.bfloat16), torch.zeros(2, 512, 512, dtype=torch.bfloat16),
            torch.zeros(1, 3, dtype=torch.int32), torch.zeros(1, dtype=torch.int32))


def check(cases=CASES) -> float:
    """Every case matches torch, and every device holds the same bits."""
    worst = 0.0
    for devices, m, h, dtype, algorithm in cases:
        x, w = example_inputs(devices, m, h, dtype=dtype)
        result = run_on_mesh(x, w, algorithm)
        assert all(np.array_equal(result[0], result[d]) for d in range(devices)), "devices disagree"
        atol, rtol = TOLERANCES[dtype]
        expected = reference(x, w)
        torch.testing.assert_close(torch.from_numpy(result[0]), expected, atol=atol, rtol=rtol)
        worst = max(worst, float((torch.from_numpy(result[0]) - expected).abs().max()))
    return worst


if __name__ == "__main__":
    from pallasite.runtime.cpu_devices import request_cpu_devices
    request_cpu_devices(DEVICES)
    print(f"tp_all_reduce: max abs error {check():.2e}")
