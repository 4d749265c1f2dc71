"""Multi-device cases of `hl.all_reduce` for tests/test_all_reduce.py, run in a subprocess
(8 CPU devices, race detector on, each run once per seed of `SEEDS` under a seeded
interleaving: tests/remote_dma_cases.py says why). Each case raises on a mismatch, a race
report, or devices that disagree; every variant it compiles also lowers to Mosaic.

    python -m tests.all_reduce_cases "sums 8 one_shot f32 16x256" ...
"""
from __future__ import annotations

import os
import sys

from tests.remote_dma_cases import _race_free, run_cases  # noqa: I001 - starts JAX with 8 devices first

import numpy as np  # noqa: E402
import torch  # noqa: E402

import pallasite  # noqa: E402
import pallasite.language as hl  # noqa: E402

_DTYPES = {"f32": (np.float32, "float32"), "bf16": (None, "bfloat16"), "i32": (np.int32, "int32"),
           "f16": (np.float16, "float16")}


@pallasite.kernel(static_shapes=True)
def summed(x: torch.Tensor, peers: torch.Tensor, rank: torch.Tensor, algorithm: hl.constexpr = None,
           out_dtype: hl.constexpr = None) -> torch.Tensor:
    """Every device's x, summed, in `out_dtype` (x's by default)."""
    out = torch.empty(x.shape, dtype=out_dtype or x.dtype, device=x.device)
    hl.all_reduce(out, x, peers[0, :], rank[0], algorithm=algorithm)
    return out


def _peers(devices: int) -> tuple[np.ndarray, np.ndarray]:
    """The other devices, in an order that differs per device (rank r lists r+1, r+2, ...)."""
    peers = np.array([[[(r + off) % devices for off in range(1, devices)]] for r in range(devices)], np.int32)
    return peers, np.arange(devices, dtype=np.int32)[:, None]


def _run(xs, devices: int, algorithm, out_dtype=None, tables=None) -> np.ndarray:
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((devices,), ("x",), devices=jax.devices()[:devices])

    def body(x, peers, rank):
        return summed.jax_fn(x[0], peers[0], rank[0], algorithm, out_dtype)[None]

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"),) * 3, out_specs=P("x"), check_vma=False))
    peers, rank = _peers(devices) if tables is None else tables
    sharding = NamedSharding(mesh, P("x"))
    return np.asarray(step(*(jax.device_put(jnp.asarray(a), sharding) for a in (xs, peers, rank))))


def sums(devices: str, algorithm: str, dtype: str, shape: str, out_dtype: str = "same") -> None:
    """hl.all_reduce of each device's own values: the float32 (int32) sum of all of them, the
    same bits on every device, for either algorithm or the one chosen by payload."""
    import jax.numpy as jnp

    n = int(devices)
    dims = tuple(int(size) for size in shape.split("x"))
    rng = np.random.default_rng(n + len(dims))
    values = rng.integers(-1000, 1000, (n, *dims)) if dtype == "i32" else rng.standard_normal((n, *dims))
    xs = jnp.asarray(values, getattr(jnp, _DTYPES[dtype][1]))
    out = None if out_dtype == "same" else getattr(torch, out_dtype)
    result = _race_free(_run, xs, n, None if algorithm == "auto" else algorithm, out)
    wide = np.asarray(xs).astype(np.int64 if dtype == "i32" else np.float32)
    expected = wide.sum(0)
    for device in range(1, n):
        np.testing.assert_array_equal(result[device], result[0])
    got = np.asarray(result[0]).astype(np.float64)
    if dtype == "i32" and out_dtype == "same":
        np.testing.assert_array_equal(got, expected)
    else:
        narrow = jnp.asarray(expected, result.dtype).astype(jnp.float32)  # the cast of the exact sum
        np.testing.assert_allclose(got, np.asarray(narrow), rtol=1e-2 if result.dtype != np.float32 else 1e-5,
                                   atol=1e-2 if result.dtype != np.float32 else 1e-5)


def algorithms_agree(devices: str) -> None:
    """One-shot and reduce-scatter both add the devices' values in rank order, one add each:
    the same bits as numpy's float32 x[0] + x[1] + ... (a sum over the slot axis left the
    order to XLA: on 8 devices [8, 256] differed in 940 of 2048 lanes, trial O)."""
    import jax.numpy as jnp

    n = int(devices)
    values = np.random.default_rng(7).standard_normal((n, 8, 32 * n)).astype(np.float32)
    one_shot = _race_free(_run, jnp.asarray(values), n, "one_shot")
    scattered = _race_free(_run, jnp.asarray(values), n, "reduce_scatter")
    in_order = values[0].copy()
    for device in range(1, n):
        in_order = in_order + values[device]
    for result in (one_shot, scattered):
        for device in range(n):
            np.testing.assert_array_equal(result[device], in_order)


def bad_tables(devices: str) -> None:
    """A peers table that names one device twice (on one device), or every device calling
    itself rank 0: the barrier's check sees it before any signal, and inside
    pallasite.range_checked() the call raises exc.ShapeMismatch at the all_reduce line
    (unchecked, the first gave a wrong sum and the second a hang: trial O). A table for a
    bigger mesh is an error when traced. A good call still runs after them."""
    import jax.numpy as jnp

    n = int(devices)
    xs = jnp.asarray(np.random.default_rng(3).standard_normal((n, 8, 128)), jnp.float32)
    peers, rank = _peers(n)
    repeated = peers.copy()
    repeated[1, 0, 0] = repeated[1, 0, 1]
    line = "hl.all_reduce(out, x, peers[0, :], rank[0], algorithm=algorithm)"
    for tables, what in (((repeated, rank), "repeated peer"), ((peers, np.zeros_like(rank)), "rank 0 everywhere")):
        for algorithm in ("one_shot", "reduce_scatter"):
            try:
                with pallasite.range_checked():
                    _run(xs, n, algorithm, tables=tables)
            except pallasite.exc.ShapeMismatch as err:
                assert f"must name every device of the {n}-device mesh once" in str(err), str(err)
                assert line in str(err), str(err)
            else:
                raise AssertionError(f"{what}, {algorithm}: no error")
    wider = np.array([[[(r + off) % (n + 1) for off in range(1, n + 1)]] for r in range(n)], np.int32)
    try:
        _run(xs, n, "one_shot", tables=(wider, rank))
    except pallasite.exc.IndexingError as err:
        assert f"{n}-device mesh once, the rank this device's own; got {n} peers" in str(err), str(err)
        assert line in str(err), str(err)
    else:
        raise AssertionError("a table of the wrong size was traced")
    expected = np.asarray(xs).sum(0)
    np.testing.assert_allclose(_race_free(_run, xs, n, None)[n - 1], expected, rtol=1e-5, atol=1e-5)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    run_cases(sys.argv[1:], globals())
