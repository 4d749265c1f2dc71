"""Multi-device cases for tests/test_remote_dma.py, run in a subprocess.

JAX fixes the number of CPU devices when it is imported, so each case runs as
`python -m tests.remote_dma_cases NAME` with XLA_FLAGS asking for 8 devices and
the race detector on; the rest of the suite keeps one device. A case raises on
any mismatch or race report. A run that must be race-free runs once per seed of
`SEEDS`, each a seeded interleaving of the devices (pallasite/interleavings.py:
the outcome is a function of the seed, not of the machine's load); a failure
names the seed, and `PALLASITE_INTERPRET_SEED=s` replays that one.
"""
from __future__ import annotations

import os
import sys

from pallasite.runtime.cpu_devices import request_cpu_devices

request_cpu_devices(8)
os.environ["PALLASITE_INTERPRET_DETECT_RACES"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

import pallasite  # noqa: E402
import pallasite.language as hl  # noqa: E402
from pallasite.interleavings import install, race_free_under_seeds, seeded_interleaving  # noqa: E402
from pallasite.runtime.interpret import interpreter_reports  # noqa: E402

install()  # before any kernel is traced: the interpreter's callbacks are bound then

SEEDS = (0, 1, 2)
CASE_TIMEOUT_S = int(os.environ.get("CASE_TIMEOUT_S", "240"))  # one case's budget (~30 s idle, ~3 min on a machine loaded 5x)


def _race_free(fn, *args):
    """`fn(*args)` under each seed's interleaving: no race report, the same result each time."""
    return race_free_under_seeds(lambda: fn(*args), SEEDS)[-1]


def _race_free_between_collectives(fn, *args):
    """`fn(*args)` with the race detector, unscheduled: for a program whose devices meet in
    XLA collectives between kernel calls (ppermute). The seeded scheduler parks each device's
    thread at a kernel callback until every device waits there, which a device still inside
    XLA's collective (or waiting for a CPU thread to run it) never does: the ring benchmark
    hung so in full-suite runs on 2 cores. Its kernels exchange nothing themselves, so no
    interleaving of theirs can race; the detector's report and the result are the check."""
    with interpreter_reports() as reports:
        result = np.asarray(fn(*args))
    assert not reports, reports[0]
    return result


def all_gather(devices: str, loop_type: str = "unroll") -> None:
    """The example's hop loop (hl.grid(n - 1)) under each pallas_loop_type."""
    from examples import ring_all_gather as example
    kernel = pallasite.kernel(example.ring_all_gather.fn,
                              config=pallasite.Config(block_sizes=[], pallas_loop_type=loop_type))
    x, n = example.example_inputs(int(devices))
    result = _race_free(example.run_on_mesh, x, n, kernel)
    np.testing.assert_array_equal(result, example.reference(x, n))


def attention(mesh: str, dtype: str, causal: str) -> None:
    from examples import ring_attention as example
    mesh_shape = tuple(int(size) for size in mesh.split("x"))
    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
    q, k, v = example.example_inputs(int(np.prod(mesh_shape)), torch_dtype)
    result = _race_free(example.run_on_mesh, example.to_jax(q), example.to_jax(k), example.to_jax(v),
                        mesh_shape, causal == "causal")
    result = torch.from_numpy(np.asarray(result, dtype=np.float32))
    atol, rtol = example.TOLERANCES[torch_dtype]
    torch.testing.assert_close(result, example.reference(q, k, v, causal == "causal").float(), atol=atol, rtol=rtol)


@pallasite.kernel(config=pallasite.Config(block_sizes=[]))
def shift_one_row(buf: torch.Tensor, rank: torch.Tensor, n: hl.constexpr) -> torch.Tensor:
    """Row 0 goes to the right neighbour's row 1; rows 0 and 2 keep their input values."""
    for _ in hl.grid(1):
        me = rank[0]
        right = (me + 1) % n
        hl.remote_barrier([(me + n - 1) % n, right])
        copy = hl.make_async_remote_copy(buf, 0, right, buf, 1)
        copy.start()
        copy.wait_send()
        copy.wait_recv()
    return buf


@pallasite.kernel(config=pallasite.Config(block_sizes=[]))
def shift_by_table(buf: torch.Tensor, peers: torch.Tensor) -> torch.Tensor:
    """Peers read from a tensor: the barrier with `peers[0, :]` (left, right), the copy to `peers[0, 1]`."""
    for _ in hl.grid(1):
        hl.remote_barrier(peers[0, :])
        copy = hl.make_async_remote_copy(buf, 0, peers[0, 1], buf, 1)
        copy.start()
        copy.wait()
    return buf


def peer_table(devices: str) -> None:
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    n = int(devices)
    mesh = jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])
    buf = np.random.default_rng(2).standard_normal((n, 2, 8, 128)).astype(np.float32)
    peers = np.array([[[(d - 1) % n, (d + 1) % n]] for d in range(n)], dtype=np.int32)  # [n, 1, 2]

    def body(buf_shard, peers_shard):
        return shift_by_table.jax_fn(buf_shard[0], peers_shard[0])[0][None]

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False))
    sharding = NamedSharding(mesh, P("x"))
    result = np.asarray(_race_free(step, *(jax.device_put(jnp.asarray(a), sharding) for a in (buf, peers))))
    expected = buf.copy()
    expected[:, 1] = np.roll(buf[:, 0], 1, axis=0)
    np.testing.assert_array_equal(result, expected)


def untouched_rows(devices: str) -> None:
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    n = int(devices)
    mesh = jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])

    def body(buf_shard, rank_shard):
        return shift_one_row.jax_fn(buf_shard[0], rank_shard, n)[0][None]

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False))
    sharding = NamedSharding(mesh, P("x"))
    # twice: the barrier (one semaphore per kernel) is reusable across invocations
    for seed in (1, 5):
        buf = np.random.default_rng(seed).standard_normal((n, 3, 8, 128)).astype(np.float32)
        args = [jax.device_put(a, sharding) for a in (jnp.asarray(buf), jnp.arange(n, dtype=jnp.int32))]
        result = np.asarray(_race_free(step, *args))
        expected = buf.copy()
        expected[:, 1] = np.roll(buf[:, 0], 1, axis=0)  # device d's row 1 is device d-1's row 0
        np.testing.assert_array_equal(result, expected)
    # without config=, a mesh kernel is never tuned by a call (it runs only under shard_map):
    # the one-time note says to choose its config, and the default runs
    import warnings
    untuned = pallasite.kernel(shift_one_row.fn, autotune_effort="quick")
    step = jax.jit(jax.shard_map(lambda b, r: untuned.jax_fn(b[0], r, n)[0][None], mesh=mesh,
                                 in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = np.asarray(_race_free(step, *args))
    notes = [str(w.message) for w in caught if "first called under jax.jit" in str(w.message)]
    assert len(notes) == 1 and "runs only under jax.shard_map" in notes[0] and "config=" in notes[0], notes
    np.testing.assert_array_equal(result, expected)


@pallasite.kernel(config=pallasite.Config(block_sizes=[]))
def shift_slot(buf: torch.Tensor, slots: torch.Tensor, rank: torch.Tensor, n: hl.constexpr) -> torch.Tensor:
    """Row slots[0] goes to the right neighbour's row slots[1] (indices read from data)."""
    for _ in hl.grid(1):
        me = rank[0]
        right = (me + 1) % n
        hl.remote_barrier([(me + n - 1) % n, right])
        copy = hl.make_async_remote_copy(buf, slots[0], right, buf, slots[1])
        copy.start()
        copy.wait()
    return buf


def slot_index(devices: str) -> None:
    """Runtime src/dst indices: in range the copy runs as before (race-free); out of range,
    inside pallasite.range_checked() the call raises exc.ShapeMismatch quoting the user's
    line, and outside it warns with the same message."""
    import re
    import warnings

    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    n = int(devices)
    mesh = jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])
    buf = np.random.default_rng(3).standard_normal((n, 3, 8, 128)).astype(np.float32)

    def body(buf_shard, slots, rank_shard):
        return shift_slot.jax_fn(buf_shard[0], slots, rank_shard, n)[0][None]

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P(), P("x")), out_specs=P("x"),
                                 check_vma=False))
    sharding = NamedSharding(mesh, P("x"))

    def run(slots):
        args = (jax.device_put(jnp.asarray(buf), sharding), jnp.asarray(slots, jnp.int32),
                jax.device_put(jnp.arange(n, dtype=jnp.int32), sharding))
        return np.asarray(step(*args))

    with pallasite.range_checked():
        result = _race_free(run, [0, 2])
    expected = buf.copy()
    expected[:, 2] = np.roll(buf[:, 0], 1, axis=0)
    np.testing.assert_array_equal(result, expected)

    # An index out of range is replaced by 0 outside range_checked(): the other index is
    # never 0, so the replaced copy does not read the row a neighbour writes (a real race
    # with slots [0, 3], found by the detector only in some interleavings).
    for slots, what in (([1, 3], r"dst_index \[0\] \(slots\[1\]\) is 3 but 'buf'.size\(0\) is 3"),
                        ([-1, 1], r"src_index \[0\] \(slots\[0\]\) is -1 but 'buf'.size\(0\) is 3")):
        try:
            with pallasite.range_checked():
                run(slots)
        except pallasite.exc.ShapeMismatch as err:
            assert re.search(what, str(err)), str(err)
            assert "copy = hl.make_async_remote_copy(buf, slots[0], right, buf, slots[1])" in str(err), str(err)
        else:
            raise AssertionError(f"slots {slots}: no error")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run(slots)
        assert any(re.search(what, str(w.message)) for w in caught), [str(w.message) for w in caught]


@pallasite.kernel(config=pallasite.Config(block_sizes=[]))
def racy_reduce_scatter(x: torch.Tensor, acc: torch.Tensor, recv: torch.Tensor, rank: torch.Tensor,
                        n: hl.constexpr) -> torch.Tensor:
    """A ring reduce-scatter with one landing slot and no barrier: a fast left neighbour's
    next copy lands in `recv` while this device still reads it (a race)."""
    for _ in hl.grid(1):
        me = rank[0]
        right = (me + 1) % n
        for c in hl.grid(n):
            acc[c, :, :] = x[c, :, :]
        for h in hl.grid(n - 1):
            send = (me - h - 1 + 2 * n) % n
            land = (me - h - 2 + 2 * n) % n
            copy = hl.make_async_remote_copy(acc, send, right, recv, 0)
            copy.start()
            copy.wait()
            acc[land, :, :] = acc[land, :, :] + recv[0, :, :]
    return acc


def race_under_shard_map(devices: str) -> None:
    """Inside pallasite.range_checked(), a race the detector sees in a shard_mapped kernel
    raises exc.DataRace (the caller's jit returns no error of its own; outside the block
    only the detector's printed report shows it)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    n = int(devices)
    mesh = jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])

    def body(x, acc, recv, rank):
        return racy_reduce_scatter.jax_fn(x[0], acc[0], recv[0], rank, n)[0][None]

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    sharding = NamedSharding(mesh, P("x"))
    x = np.random.default_rng(0).standard_normal((n, n, 8, 128)).astype(np.float32)
    args = [jnp.asarray(x), jnp.zeros((n, n, 8, 128)), jnp.zeros((n, n, 8, 128)), jnp.arange(n, dtype=jnp.int32)]
    try:  # one seeded interleaving: the race is there in every one, and now seen in every run
        with seeded_interleaving(0), pallasite.range_checked():
            np.asarray(step(*(jax.device_put(a, sharding) for a in args)))
    except pallasite.exc.DataRace as err:
        assert "racy_reduce_scatter" in str(err) and "race" in str(err), str(err)
    else:
        raise AssertionError("the race was not raised")


def counting_barrier_ring(n: int):
    """A ring pass written directly in Pallas, synchronised as pallasite's `hl.remote_barrier`
    was before issue 20: ONE counting barrier semaphore, "signal left and right, wait for 2"
    twice per hop. Each device zeroes both slots of its buffer, puts its block in slot 0,
    and at hop h sends slot h % 2 to its right neighbour's other slot, then adds slot h % 2
    to its result. Counts cannot say who signalled: on a ring of 7 or more, the devices
    right of a slow one can run a barrier ahead, and their extra signals let its left
    neighbour pass a barrier the slow one never reached, then copy into it."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    from jax.sharding import PartitionSpec as P

    from pallasite.runtime.interpret import interpret_params

    logical = pl.DeviceIdType.LOGICAL

    def kernel(x_ref, out_ref, buf_ref, sems):
        me = lax.axis_index("x")
        left, right = lax.rem(me + n - 1, n), lax.rem(me + 1, n)
        buf_ref[...] = jnp.zeros(buf_ref.shape, buf_ref.dtype)
        buf_ref[0] = x_ref[...]
        barrier = pltpu.get_barrier_semaphore()
        total = jnp.zeros(x_ref.shape, jnp.float32)
        for hop in range(n):
            slot, other = hop % 2, (hop + 1) % 2
            if hop < n - 1:
                for _phase in range(2):
                    pl.semaphore_signal(barrier, 1, device_id=left, device_id_type=logical)
                    pl.semaphore_signal(barrier, 1, device_id=right, device_id_type=logical)
                    pl.semaphore_wait(barrier, 2)
                copy = pltpu.make_async_remote_copy(buf_ref.at[slot], buf_ref.at[other], sems.at[hop, 0],
                                                    sems.at[hop, 1], device_id=right, device_id_type=logical)
                copy.start()
            total = total + buf_ref[slot]
            if hop < n - 1:
                copy.wait()
        out_ref[...] = total

    def body(x):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            scratch_shapes=[pltpu.VMEM((2, *x.shape), x.dtype), pltpu.SemaphoreType.DMA((n, 2))],
            compiler_params=pltpu.CompilerParams(collective_id=7), interpret=interpret_params())(x)

    mesh = jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])
    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    return lambda x: step(jax.device_put(x, jax.sharding.NamedSharding(mesh, P("x"))))


def counting_barrier_race(devices: str, seed: str) -> None:
    """The old barrier's race is reported for a named seed in every run: twice here, with the
    same interleaving each time (and so in any process, idle or loaded)."""
    n = int(devices)
    step = counting_barrier_ring(n)
    x = np.random.default_rng(5).standard_normal((n * 8, 128)).astype(np.float32)
    traces = []
    for _ in range(2):
        with seeded_interleaving(int(seed)) as scheduler, interpreter_reports() as reports:
            np.asarray(step(x))
        assert reports and "RACE DETECTED" in reports[0], (seed, reports)
        traces.append(scheduler.trace)
    assert traces[0] == traces[1], "the same seed gave two interleavings"


@pallasite.kernel(config=pallasite.Config(block_sizes=[]))
def one_sided_barrier(buf: torch.Tensor, rank: torch.Tensor, n: hl.constexpr) -> torch.Tensor:
    """Each device names only its right neighbour, which never names it back."""
    for _ in hl.grid(1):
        hl.remote_barrier((rank[0] + 1) % n)
        buf[:, :] = buf[:, :] + 1
    return buf


def barrier_not_named_back(devices: str) -> None:
    """A barrier whose peer never names this device back waits forever; under a seeded
    interleaving the run fails at once, naming each device's pending wait (no hang)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    from pallasite.runtime.checks import forget_failed_run

    n = int(devices)
    mesh = jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])
    step = jax.jit(jax.shard_map(lambda b, r: one_sided_barrier.jax_fn(b[0], r, n)[0][None], mesh=mesh,
                                 in_specs=P("x"), out_specs=P("x"), check_vma=False))
    sharding = NamedSharding(mesh, P("x"))
    args = [jax.device_put(a, sharding) for a in (jnp.zeros((n, 8, 128)), jnp.arange(n, dtype=jnp.int32))]
    try:
        with seeded_interleaving(0):
            np.asarray(step(*args))
    except jax.errors.JaxRuntimeError as err:
        assert "no device can go on in this interleaving" in str(err), str(err)
        assert str(err).count("semaphore_wait (semaphore") == n, str(err)  # every device, on its own slot
        forget_failed_run()
    else:
        raise AssertionError("a barrier nobody matched passed")


@pallasite.kernel(config=pallasite.Config(block_sizes=[]))
def push_past_the_mesh(acc: torch.Tensor, recv: torch.Tensor, rank: torch.Tensor, form: hl.constexpr,
                       n: hl.constexpr, size: hl.constexpr) -> torch.Tensor:
    """form 0: a copy to `me + 1` ("% n" forgotten); 1: a barrier with `me - 1` alone;
    3: a copy to the constant n;
    2: a copy to `(me + 1) % n` (right when n is the mesh's size), after a barrier with
    both neighbours on the `size`-device ring (so no copy lands before `recv` is copied in)."""
    for _ in hl.grid(1):
        me = rank[0]
        if form == 1:
            hl.remote_barrier(me - 1)
        else:
            if form == 0:
                copy = hl.make_async_remote_copy(acc, 0, me + 1, recv, 0)
            elif form == 3:
                copy = hl.make_async_remote_copy(acc, 0, n, recv, 0)
            else:
                hl.remote_barrier([(me + size - 1) % size, (me + 1) % size])
                copy = hl.make_async_remote_copy(acc, 0, (me + 1) % n, recv, 0)
            copy.start()
            copy.wait()
    return recv


def device_out_of_mesh(devices: str) -> None:
    """A runtime device id outside the mesh, whose size the generated code reads from JAX
    when traced: inside pallasite.range_checked() the call raises exc.ShapeMismatch naming
    the user's line, the id and the mesh's device count; outside it warns with the same
    message and JAX's run fails (no hang, no silent result); a good call still runs after."""
    import functools
    import re
    import warnings

    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    size = int(devices)
    mesh = jax.make_mesh((size,), ("x",), devices=jax.devices()[:size])
    sharding = NamedSharding(mesh, P("x"))
    acc = np.random.default_rng(4).standard_normal((size, 2, 8, 128)).astype(np.float32)

    @functools.cache
    def step_of(form, n):
        def body(a, r, rank):
            return push_past_the_mesh.jax_fn(a[0], r[0], rank, form, n, size)[0][None]
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))

    def run(form, n):
        step = step_of(form, n)
        args = (jnp.asarray(acc), jnp.zeros((size, 2, 8, 128)), jnp.arange(size, dtype=jnp.int32))
        return np.asarray(step(*(jax.device_put(a, sharding) for a in args)))

    copy_past_end = (0, 0, rf"device_id \(me \+ 1\) is {size} but the mesh has {size} devices",
                     "copy = hl.make_async_remote_copy(acc, 0, me + 1, recv, 0)")
    bad = [] if size == 8 else [copy_past_end]
    # n is not the mesh's size: (me + 1) % n reaches `size` on rank size - 1
    bad += [(2, 2 * size, rf"device_id \(\(me \+ 1\) % {2 * size}\) is {size} but the mesh has {size} devices",
            "copy = hl.make_async_remote_copy(acc, 0, (me + 1) % n, recv, 0)")]
    if size == 4:
        bad.append((1, 0, r"peer \(me - 1\) is -1 but the mesh has 4 devices", "hl.remote_barrier(me - 1)"))
    for form, n, what, line in bad:
        try:
            with pallasite.range_checked():
                run(form, n)
        except pallasite.exc.ShapeMismatch as err:
            assert re.search(what, str(err)), (what, str(err))
            assert line in str(err), str(err)
        else:
            raise AssertionError(f"form {form}, n {n}: no error")
    if size == 4:
        with warnings.catch_warnings(record=True) as caught:  # outside the block: a warning, then JAX's error
            warnings.simplefilter("always")
            try:
                run(0, 0)
            except jax.errors.JaxRuntimeError:
                # JAX keeps the failed run's error in its ordered-effect tokens and would raise
                # it again at the next call (pallasite.range_checked() drops them itself)
                from pallasite.runtime.checks import forget_failed_run
                forget_failed_run()
            else:
                raise AssertionError("a copy outside the mesh ran")
        assert any(re.search(copy_past_end[2], str(w.message)) for w in caught), [str(w.message) for w in caught]
    try:  # a constant outside the mesh: an error when traced
        run(3, size)
    except pallasite.exc.IndexingError as err:
        assert f"device_id ({size}) is {size} but the mesh has {size} devices" in str(err), str(err)
        assert "copy = hl.make_async_remote_copy(acc, 0, n, recv, 0)" in str(err), str(err)
    else:
        raise AssertionError("a constant device id outside the mesh was traced")
    if size == 8:
        return  # a good 8-device ring runs in all_gather("8")
    result = _race_free(run, 2, size)  # after the failures, a good ring: (me + 1) % size
    np.testing.assert_array_equal(result[:, 0], np.roll(acc[:, 0], 1, axis=0))
    np.testing.assert_array_equal(result[:, 1], 0)


def ring_benchmark(mesh: str) -> None:
    """benchmarks/ring.py's baseline (one kernel call per hop, K/V moved by jax.lax.ppermute
    between calls) matches unsharded attention, and its TPU model prints a hop per chip."""
    import contextlib
    import io

    from benchmarks import ring as bench
    from examples import ring_attention as example

    mesh_shape = tuple(int(size) for size in mesh.split("x"))
    q, k, v = example.example_inputs(int(np.prod(mesh_shape)), torch.bfloat16, 16)
    step, inputs = bench.ppermute_attention(*(example.to_jax(t) for t in (q, k, v)), mesh_shape, True)
    result = torch.from_numpy(np.asarray(_race_free_between_collectives(step, *inputs), dtype=np.float32))
    atol, rtol = example.TOLERANCES[torch.bfloat16]
    torch.testing.assert_close(result, example.reference(q, k, v, True).float(), atol=atol, rtol=rtol)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        bench.modelled_hops(16, 128, [(mesh, 2 * 16 * 128 * 2, 1)])
    rows = [line for line in printed.getvalue().splitlines() if line.split()[:1] in (["v5e"], ["v6e"], ["v7x"])]
    assert len(rows) == 3 and all(str(2 * 16 * 128 * 2) in row for row in rows), printed.getvalue()


def lowering(name: str) -> None:
    """The kernel lowers to Mosaic for v5e/v6e/v7x as every device of the mesh runs it."""
    from pallasite.testing import check_tpu_lowering
    if name == "all_gather":
        from examples.ring_all_gather import ring_all_gather as kernel
        args, mesh = (torch.zeros(8, 128), torch.zeros(4, 8, 128), torch.zeros(1, dtype=torch.int32), 4), (4,)
    else:
        from examples.ring_attention import ring_attention as kernel
        mesh = (2, 2) if name == "attention_2d" else (4,)
        shard = torch.zeros(32, 128, dtype=torch.bfloat16)
        buffers = torch.zeros(2, 32, 128, dtype=torch.bfloat16)
        args = (shard, shard, shard, buffers, buffers, torch.zeros(1, dtype=torch.int32), 4, mesh[-1], True)
    codes = check_tpu_lowering(kernel, args, mesh_shape=mesh)
    assert set(codes) == {"v5e", "v6e", "v7x"}


def run_cases(cases: list[str], namespace: dict) -> None:
    """Run each case ("name arg ..."), a function of `namespace`; print "OK <case>" after each.
    As in the suite (tests/tpu_lowering.py), every variant a case compiles lowers to Mosaic."""
    import faulthandler

    from pallasite.runtime.compiled import COMPILE_OBSERVERS
    from pallasite.testing import check_compiled_lowering

    compiled: list = []
    COMPILE_OBSERVERS.append(compiled.append)
    for case in cases:
        name, *case_args = case.split()
        # A case that hangs (a deadlock no interleaving reports) prints every thread's stack
        # and ends the process, so the test fails naming where each device waits.
        faulthandler.dump_traceback_later(CASE_TIMEOUT_S, exit=True)
        namespace[name](*case_args)
        faulthandler.cancel_dump_traceback_later()
        for variant in compiled:
            check_compiled_lowering(variant)
        compiled.clear()
        print("OK", case, flush=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    run_cases(sys.argv[1:], globals())
