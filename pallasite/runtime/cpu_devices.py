"""Several CPU devices in one process: how a mesh kernel runs without a TPU.

Interpret mode runs each device of a mesh on a CPU device of one process
(`--xla_force_host_platform_device_count=N`, read once, when JAX starts its CPU
backend). A collective between kernel calls (`jax.lax.ppermute`, a psum) waits
for every device to arrive; XLA's CPU runtime kills the whole process when one
arrives more than its termination timeout late (40 s by default), to keep a
deadlocked program from hanging. Here a device is late because its kernel runs
in interpret mode's Python (the race detector's bookkeeping is under the GIL)
on a machine that may be busy: load, not a deadlock. So the flags below also
raise the timeouts out of load's reach; a real deadlock still ends, at the
caller's own timeout.
"""
from __future__ import annotations

import os

# Seconds a device may wait at a collective before XLA warns, and before it exits.
COLLECTIVE_WARN_SECONDS = 600
COLLECTIVE_TERMINATE_SECONDS = 3600
# CPU devices asked for beyond the mesh's. When a shard_mapped interpret-mode kernel runs on
# every CPU device of the process, a callback converting a buffer of ~100 KiB or more to
# numpy (the interpreter's `_allocate_buffer`) waits forever: each device's thread is in a
# callback and none is left to finish the transfer (a plain Pallas copy of a [256, 128]
# float32 block hangs on 2 of 2 devices; with a third, unused device it runs, as 8 of 9
# do with [1024, 128]). One device nobody maps keeps a thread free.
SPARE_CPU_DEVICES = 1


def cpu_mesh_flags(devices: int, flags: str = "") -> str:
    """`flags` (an `XLA_FLAGS` value) with `devices` host CPU devices (and
    `SPARE_CPU_DEVICES` more, which a mesh of `devices` leaves unused) and collective
    timeouts no load reaches. A flag `flags` already sets keeps its value, except the
    device count."""
    wanted = {
        "--xla_force_host_platform_device_count": devices + SPARE_CPU_DEVICES,
        "--xla_cpu_collective_call_warn_stuck_timeout_seconds": COLLECTIVE_WARN_SECONDS,
        "--xla_cpu_collective_call_terminate_timeout_seconds": COLLECTIVE_TERMINATE_SECONDS,
    }
    kept = [flag for flag in flags.split() if not flag.startswith("--xla_force_host_platform_device_count")]
    present = {flag.split("=")[0] for flag in kept}
    return " ".join(kept + [f"{name}={value}" for name, value in wanted.items() if name not in present])


def request_cpu_devices(devices: int) -> None:
    """Ask for `devices` CPU devices before JAX starts its backend (sets `XLA_FLAGS`).
    Once the backend runs, the count is fixed: fewer devices than asked is an error
    saying to set the flag before JAX starts."""
    from jax._src import xla_bridge

    if not xla_bridge.backends_are_initialized():
        os.environ["XLA_FLAGS"] = cpu_mesh_flags(devices, os.environ.get("XLA_FLAGS", ""))
        return
    import jax

    if jax.default_backend() == "cpu" and jax.device_count() < devices:
        raise RuntimeError(
            f"this needs {devices} CPU devices but JAX started with {jax.device_count()}: set "
            f"XLA_FLAGS='{cpu_mesh_flags(devices)}' before JAX starts (before the first jax call)")
