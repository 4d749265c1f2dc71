"""Seeded, deterministic interleavings of TPU interpret mode's devices (test tooling).

TPU interpret mode runs each device of a `jax.shard_map` mesh on its own
thread; the kernel's memory accesses, DMAs and semaphore operations are Python
callbacks into JAX's interpreter, and its race detector (happens-before, with
vector clocks) only judges the interleaving that happened to run. So a racy
protocol passes on an idle machine and fails under load. `seeded_interleaving(seed)`
makes the interleaving a function of the seed:

- only one device's callbacks run at a time (the one holding the turn);
- a device gives up the turn at each synchronisation point (a semaphore
  signal or wait, a DMA start or wait); once every device of the mesh waits
  at a callback (so no thread's speed can change the choice), the turn goes
  to the device of highest priority among those that can go on (a wait
  whose semaphore count is too low cannot);
- priorities come from the seed: a random order of the devices at the start
  of each run (so the first choices are the devices' start order), and after
  each choice the chosen device drops to the lowest priority with
  probability `DEMOTION`. A low-priority device runs only when the others
  are blocked, so a seed starves some device for long stretches, as a loaded
  machine does: a uniformly random choice at every point almost never does
  (on the 8-device ring attention with one counting barrier semaphore, no
  race in 16 seeds; with priorities, the race or a copy into a device not yet
  started in each of the 7 seeds tried);
- `np.random`, which the detector uses to give each DMA an approximate
  vector-clock slot, is seeded at the start of each run from the same RNG.

The interpreter's two all-device barriers (before the grid when the kernel has
no collective id, and its exit) release every device at once. When no device
can go on and they are not all at such a barrier, the run fails with the
pending operation of every device (a deadlock in this interleaving). A run
that fails otherwise (a callback raises) stops being scheduled, so the
interpreter's own failure handling meets every device at its exit barrier.

This hooks JAX's private interpreter module
(`jax._src.pallas.mosaic.interpret.interpret_pallas_call`, JAX 0.10): it
replaces the module functions the interpreter passes to `io_callback` with
wrappers, which must happen before a kernel is traced (the callbacks are bound
then); `install()` does it and the wrappers pass straight through when no
interleaving is active. Test tooling only: the ring tests' subprocesses
(tests/remote_dma_cases.py, tests/test_examples.py) install it first thing.
Requires one core per device and `dma_execution_mode="eager"` (what pallasite
uses with the race detector on), so that a wait whose count suffices never blocks.
Not for programs whose devices also meet in XLA collectives between kernel calls
(`jax.lax.ppermute`): a device inside the collective never parks at a callback, so
the devices parked waiting for it can hang (tests/remote_dma_cases.py runs those
with the race detector alone).
"""
from __future__ import annotations

import contextlib
import os
import random
import threading
import warnings
from typing import Iterator

import jax
import numpy as np

# The interpreter's callbacks that take (token, device_id, ...), by what they do.
_SYNC = ("semaphore_signal", "semaphore_wait", "dma_start", "dma_wait")  # the turn may change here
_WAITS = ("semaphore_wait", "dma_wait")  # (local_core_id, semaphore id, value) follow the device id
_ALL_DEVICES = ("_barrier", "_clean_up_shared_memory")  # threading.Barrier over every device
_LOCAL = ("_initialize_shared_memory", "_allocate_buffer", "_allocate_semaphores", "_deallocate_buffer", "get",
          "store", "swap", "get_barrier_semaphore", "_check_for_revisiting", "_update_clocks_for_device_barrier",
          "_validate")

# After each choice the chosen device drops to the lowest priority with this probability.
DEMOTION = 1 / 32
_install_lock = threading.Lock()
_installed = False
_active: "_Scheduler | None" = None


class InterleavingDeadlock(RuntimeError):
    """No device can go on in this interleaving (each waits for a signal nobody sends)."""


def install() -> None:
    """Put the scheduling wrappers in place (once per process, before any kernel is traced)."""
    global _installed
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interpreter
    from jax._src.pallas.mosaic.interpret import shared_memory

    with _install_lock:
        if _installed:
            return
        for name in (*_SYNC, *_ALL_DEVICES, *_LOCAL):
            setattr(interpreter, name, _scheduled(name, getattr(interpreter, name)))
        set_failed = shared_memory.SharedMemory.set_failed

        def set_failed_unscheduled(self, *args, **kwargs):
            if _active is not None:
                _active.stop_scheduling()  # every device must reach the interpreter's exit barrier
            return set_failed(self, *args, **kwargs)

        shared_memory.SharedMemory.set_failed = set_failed_unscheduled
        _installed = True


@contextlib.contextmanager
def seeded_interleaving(seed: int) -> Iterator["_Scheduler"]:
    """Within the block, interpret-mode kernel runs interleave their devices as `seed`
    decides (see the module's docstring); yields the scheduler (its `trace` lists each
    choice as (device, operation))."""
    global _active
    install()
    scheduler = _Scheduler(seed)
    saved, outer = np.random.get_state(), _active
    _active = scheduler
    try:
        yield scheduler
    finally:
        _active = outer
        np.random.set_state(saved)


def race_free_under_seeds(run, seeds):
    """`run()` once under each seed's interleaving, race detector reports collected; raise
    AssertionError naming the first seed whose run reports a race (or a semaphore left
    non-zero at exit) or returns a different result. Returns the results, one per seed.
    `PALLASITE_INTERPRET_SEED` (an int), when set, replaces `seeds` (to replay one)."""
    from .runtime.interpret import SEED_ENV, interpreter_reports

    chosen = os.environ.get(SEED_ENV)
    seeds = (int(chosen),) if chosen is not None else tuple(seeds)
    results = []
    for seed in seeds:
        with seeded_interleaving(seed), interpreter_reports() as reports:
            result = jax.tree.map(np.asarray, run())
        assert not reports, f"{SEED_ENV}={seed}: {reports[0]}"
        if results:
            same = jax.tree.map(lambda a, b: bool(np.array_equal(a, b, equal_nan=True)), results[0], result)
            assert all(jax.tree.leaves(same)), f"{SEED_ENV}={seed}: the result differs from seed {seeds[0]}'s"
        results.append(result)
    return results


def _scheduled(name: str, original):
    def scheduled(token, device_id, *args, **kwargs):
        scheduler = _active
        if scheduler is not None:
            scheduler.enter(int(device_id), name, args)
        return original(token, device_id, *args, **kwargs)

    # the interpreter's DMAs call `get.__wrapped__` / `store.__wrapped__` (no failure wrapper)
    scheduled.__wrapped__ = getattr(original, "__wrapped__", original)
    scheduled.__name__ = name
    return scheduled


class _Scheduler:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.lock = threading.RLock()
        self.turns: dict[int, threading.Condition] = {}  # device -> where it waits for the turn (on `lock`)
        self.trace: list[tuple[int, str]] = []  # every choice of this block's runs, in order
        self.devices: int | None = None  # devices of the current run (None: between runs)
        self.holder: int | None = None  # the device whose callbacks may run
        self.parked: dict[int, tuple[str, tuple]] = {}  # device -> the callback it waits to run
        self.released: set[int] = set()  # devices let through an all-device barrier together
        self.unscheduled = False  # the run failed: the interpreter's failure handling takes over

    def enter(self, device: int, name: str, args: tuple) -> None:
        """Return when `device` may run its callback `name`."""
        with self.lock:
            if name == "_initialize_shared_memory" and (self.devices is None or self.unscheduled) \
                    and _interpreter()._shared_memory is None:
                # the first device of a new run (a failed run's devices still find its memory)
                self._start_run(int(args[0]), int(args[1]))
            if self.devices is None or self.unscheduled:
                return
            if self.holder == device:
                if name not in _SYNC and name not in _ALL_DEVICES:
                    return  # a local access: the holder keeps the turn
                self.holder = None
            if name in _WAITS and _interpreter()._get_shared_memory().dma_execution_mode != "eager":
                self._fail(ValueError("seeded_interleaving needs dma_execution_mode='eager' (a DMA moves its "
                                      "data when it starts; pallasite's interpret mode does with the race "
                                      "detector on)."))
                return
            self.parked[device] = (name, args)
            self._choose()
            turn = self.turns.setdefault(device, threading.Condition(self.lock))
            while self.holder != device and device not in self.released and not self.unscheduled:
                turn.wait()
            self.released.discard(device)

    def stop_scheduling(self) -> None:
        with self.lock:
            self.unscheduled = True
            self.parked.clear()
            self._wake_all()

    def _wake_all(self) -> None:
        for turn in self.turns.values():
            turn.notify()

    def _start_run(self, devices: int, cores: int) -> None:
        self.devices, self.holder, self.unscheduled = devices, None, cores != 1
        if self.unscheduled:  # the cores of a device run in threads of their own
            warnings.warn("seeded_interleaving schedules one core per device (PALLASITE_INTERPRET_CORES=1); "
                          f"this run of {cores} cores per device runs unscheduled.", stacklevel=2)
        self.parked.clear()
        self.released.clear()
        np.random.seed(self.rng.randrange(2**32))  # the detector's DMA clock slots
        order = list(range(devices))
        self.rng.shuffle(order)
        self.priority = {device: rank for rank, device in enumerate(order)}

    def _choose(self) -> None:
        """Once every device waits at a callback, give the turn to one that can go on."""
        if self.holder is not None or len(self.parked) < self.devices:
            return
        names = {name for name, _ in self.parked.values()}
        if len(names) == 1 and names <= set(_ALL_DEVICES):
            (name,) = names
            self.released = set(self.parked)
            self.parked.clear()
            self.trace.append((-1, name))
            if name == "_clean_up_shared_memory":
                self.devices = None  # the run ends; the next one starts at its first callback
            self._wake_all()
            return
        ready = sorted(device for device, (name, args) in self.parked.items() if self._can_run(device, name, args))
        if not ready:
            self._deadlock()
            return
        chosen = max(ready, key=self.priority.__getitem__)
        if self.rng.random() < DEMOTION:
            self.priority[chosen] = min(self.priority.values()) - 1
        self.trace.append((chosen, self.parked.pop(chosen)[0]))
        self.holder = chosen
        if chosen in self.turns:  # else it is the device choosing, not yet waiting
            self.turns[chosen].notify()

    def _can_run(self, device: int, name: str, args: tuple) -> bool:
        if name in _ALL_DEVICES:
            return False
        if name not in _WAITS:
            return True
        memory = _interpreter()._get_shared_memory()
        core, semaphore_id, value = (int(a) for a in args[:3])
        semaphore = memory.sem.get(semaphore_id) or memory.fixed_id_sem.get(semaphore_id)
        return semaphore is not None and semaphore.count_by_core[memory.get_global_core_id(device, core)] >= value

    def _deadlock(self) -> None:
        pending = "; ".join(f"device {device}: {name}{_describe(name, args)}"
                            for device, (name, args) in sorted(self.parked.items()))
        self._fail(InterleavingDeadlock(f"no device can go on in this interleaving: {pending}"))

    def _fail(self, error: Exception) -> None:
        """Fail the run: every device now runs its callbacks unscheduled, which raise `error`
        and meet at the interpreter's exit barrier (its usual failure handling)."""
        self.unscheduled = True
        self.parked.clear()
        self._wake_all()
        _interpreter()._get_shared_memory().set_failed(error, top_level=False)


def _interpreter():
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call
    return interpret_pallas_call


def _describe(name: str, args: tuple) -> str:
    if name in _WAITS:
        return f" (semaphore {int(args[1])} for {int(args[2])})"
    return ""


__all__ = ["DEMOTION", "InterleavingDeadlock", "install", "race_free_under_seeds", "seeded_interleaving"]
