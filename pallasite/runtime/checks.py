"""Run-time range checks of generated kernels, in TPU interpret mode.

Planning checks every range it can compute (plan/bounds.py). A range that
depends on data (a jagged loop's offsets, a kernel scalar bounding a loop, an
index loaded from a table) is a `RangeCheck` of the plan; the generated module
holds a `RangeChecks` table of them and, in interpret mode only, calls it where
the range is used:

    tile_trips = CHECKS.loop_range(0, start, end, tile_trips, limit=x_size0)  # 0 steps if outside
    row = CHECKS.index(1, row, limit=128)                                    # row 0 if outside
    trips = CHECKS.extents(5, start, end, 0, 128, trips, blocks=(128, 128))  # 0 steps if they differ
    idx = CHECKS.indices(2, idx, idx_valid, limit=table_size0)               # all 0 if one is outside
    idx = CHECKS.host_indices(3, idx, limit=x_size0)                         # host x[idx]: JAX would clamp
    right = CHECKS.device_id(4, right, limit=CHECKS.mesh_devices(), bounds=(0, 7))  # a remote copy's peer

A host callback compares the values with `limit`, the tensor's size at this
call: a number, or with static_shapes=False the size variable the code reads
from its inputs (a trace-time int, as every shape under `jax.jit`), so one
module checks each call against its own sizes. A violation never
reaches memory (the loop runs no steps, the access reads row 0); it is recorded,
and the call that collected it raises `exc.ShapeMismatch` with the user's line.
A kernel run inside the user's own `jax.jit` (always so for a kernel with
remote copies, which runs under `jax.shard_map`) has no caller waiting: the
callback warns with the same message, unless the caller runs it inside
`range_checked()` (`pallasite.range_checked`), which collects the violations
of every kernel called in the block and raises the first on leaving it.

A device id of a remote copy or barrier is checked against the device count of
the mesh the kernel is traced under (`mesh_devices`): when traced if its
interval is known (inside the mesh: no check at run time; outside it:
`exc.IndexingError` at once), else at run time, where a violation replaces the
id by the first rank outside the mesh so that the interpreter's DMA or signal
fails the whole run at once (no device is left waiting for a peer).
"""
from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from ..ir.exact_ints import FILLS, exact
from ..plan.extents import extents_agree  # the rule planning applies to ranges it knows

_OK = jax.ShapeDtypeStruct((), jnp.int32)
_INT32 = np.iinfo(np.int32)
_RUN_FAILS = ("interpret mode fails the run on that rank; inside pallasite.range_checked() "
              "this is raised as pallasite.exc.ShapeMismatch")

# range_checked() blocks, innermost last: (RangeChecks, check id, lo, hi, limit) found in them
_BLOCKS: list[list] = []
_BLOCKS_LOCK = threading.Lock()


class RangeChecks:
    """A module's checks: id -> (message with `{lo}`/`{hi}`/`{limit}`, where in the user's file)."""

    def __init__(self, checks: dict[int, tuple[int, str, str]]):
        self.checks = checks
        self.locations: dict = {}  # id -> exc.SourceLocation, set by the CompiledKernel loading the module
        self._lock = threading.Lock()
        self._collectors: list[list] = []

    # --- called by generated kernels (traced) --------------------------------

    def loop_range(self, check_id: int, begin, end, trips, *, limit: int):
        """`trips`, or 0 when the loop's [begin, end) leaves [0, limit)."""
        ok = io_callback(lambda lo, hi: self._check(check_id, lo, hi, limit), _OK, begin, end)
        return jnp.where(ok != 0, trips, 0)

    def extents(self, check_id: int, begin_a, end_a, begin_b, end_b, trips, *, blocks: tuple[int, int]):
        """`trips`, or 0 when the tiles of [begin_a, end_a) and [begin_b, end_b) (blocks
        `blocks`), which meet on one axis, do not all have one and the same extent."""
        def check(begin_a, end_a, begin_b, end_b):
            length_a, length_b = int(end_a) - int(begin_a), int(end_b) - int(begin_b)
            if extents_agree(length_a, blocks[0], length_b, blocks[1]):
                return np.int32(1)
            self._record(check_id, length_a, length_b, 0, "the tiles' extents differ; its result is wrong")
            return np.int32(0)

        ok = io_callback(check, _OK, begin_a, end_a, begin_b, end_b)
        return jnp.where(ok != 0, trips, 0)

    def index(self, check_id: int, index, *, limit: int):
        """`index`, or 0 when it is outside [0, limit)."""
        ok = io_callback(lambda lo: self._check(check_id, lo, lo + 1, limit), _OK, index)
        return jnp.where(ok != 0, index, 0)

    def indices(self, check_id: int, index, valid=None, *, limit: int):
        """`index` (a gather's index vector), or zeros when one of its lanes where `valid`
        holds (all lanes when None: the others are a partial tile's padding) is outside
        [0, limit)."""
        def check(values, *valid):
            values = np.asarray(values)
            if valid:
                values = values[np.asarray(valid[0])]
            bad = values[(values < 0) | (values >= limit)]
            if bad.size:
                return self._check(check_id, bad[0], bad[0] + 1, limit)
            return np.int32(1)

        ok = io_callback(check, _OK, index, *(() if valid is None else (valid,)))
        return jnp.where(ok != 0, index, 0)

    def device_id(self, check_id: int, device, *, limit: int, bounds: tuple[int, int] | None = None):
        """`device` (a remote copy's or barrier's peer), checked against the `limit` devices
        of the mesh: when traced if `bounds` (its interval) decides, else at run time, where
        one outside the mesh becomes `limit` (a rank the interpreter fails on)."""
        if bounds is not None and 0 <= bounds[0] and bounds[1] < limit:
            return device
        if bounds is not None and (bounds[1] < 0 or bounds[0] >= limit):
            from .. import exc
            message, where = self.checks[check_id]
            value = bounds[0] if bounds[0] == bounds[1] else f"in [{bounds[0]}, {bounds[1]}]"
            text = message.format(lo=value, hi=value, limit=limit)
            location = self.locations.get(check_id)
            raise exc.IndexingError(text if location is not None else f"{where}: {text}", location)
        ok = io_callback(lambda rank: self._check(check_id, rank, rank + 1, limit, _RUN_FAILS), _OK, device)
        return jnp.where(ok != 0, device, limit)

    def divisors(self, check_id: int, divisor, valid=None) -> None:
        """Check that `divisor` (an integer division's) holds no 0 where `valid` (all lanes when
        None: the others are a partial tile's padding)."""
        def check(values, *valid):
            values = np.asarray(values)
            if valid:
                values = values[np.broadcast_to(np.asarray(valid[0]), values.shape)]
            if (values == 0).any():
                self._record(check_id, 0, 1, 0, "its result is wrong")
                return np.int32(0)
            return np.int32(1)

        io_callback(check, _OK, divisor, *(() if valid is None else (valid,)))  # effectful: it runs

    def fits_int32(self, check_id: int, op: str, operands: tuple, valid: tuple, **attrs) -> None:
        """Check that `op` of `operands`, computed exactly (torch's int64, `ir/exact_ints.py`) on
        the lanes each `valid` keeps (None: all; the others are a partial tile's padding and take
        the op's fill), fits int32."""
        kept = [position for position, mask in enumerate(valid) if mask is not None]
        fills = FILLS.get(op, {})
        # Python numbers stay on the host (one past int32, `h * 2654435761`, has no int32 array)
        traced = [position for position, item in enumerate(operands) if not isinstance(item, (int, float))]

        def check(*arrays):
            values = list(operands)
            for position, array in zip(traced, arrays):
                values[position] = np.asarray(array)
            values = [np.asarray(item) for item in values]
            for position, mask in zip(kept, arrays[len(traced):]):
                mask = np.broadcast_to(np.asarray(mask), values[position].shape)
                values[position] = np.where(mask, values[position], fills.get(position, 0))
            result = exact(op, values, attrs)
            if result.size:
                lo, hi = int(result.min()), int(result.max())
                if lo < _INT32.min or hi > _INT32.max:
                    self._record(check_id, lo, hi, 0, "its result is wrong")
                    return np.int32(0)
            return np.int32(1)

        io_callback(check, _OK, *(operands[position] for position in traced),
                    *(valid[position] for position in kept))  # effectful: it runs

    def peer_group(self, check_id: int, rank, peers: list, *, limit: int, run_time: bool) -> list:
        """`peers` of a barrier that, with `rank`, name every device of the `limit`-device mesh
        once, `rank` this device's own: their count is checked when traced (else
        `exc.IndexingError`), their values at run time in interpret mode (`run_time`), where a
        violation replaces every peer by `limit` (a rank the interpreter fails on)."""
        if len(peers) + 1 != limit:
            from .. import exc
            message, where = self.checks[check_id]
            text = message.format(lo=f"{len(peers)} peers", hi="", limit=limit)
            location = self.locations.get(check_id)
            raise exc.IndexingError(text if location is not None else f"{where}: {text}", location)
        if not run_time:
            return peers
        from .mesh import mesh_rank

        def check(rank, mine, *values):
            rank, mine, values = int(rank), int(mine), [int(value) for value in values]
            if rank == mine and sorted([rank, *values]) == list(range(limit)):
                return np.int32(1)
            self._record(check_id, f"rank {rank} on device {mine} and peers {values}", "", limit, _RUN_FAILS)
            return np.int32(0)

        ok = io_callback(check, _OK, jnp.asarray(rank, jnp.int32), mesh_rank(),
                         *(jnp.asarray(peer, jnp.int32) for peer in peers))
        return [jnp.where(ok != 0, peer, limit) for peer in peers]

    @staticmethod
    def mesh_devices() -> int:
        """The device count of the mesh the kernel is being traced under (runtime/mesh.py)."""
        from .mesh import mesh_devices
        return mesh_devices()

    # --- called by generated host code (traced) --------------------------------

    def block_indices(self, check_id: int, grid: tuple[int, ...], index_map, *tables, limit: int):
        """`tables`, after checking the index `index_map` computes from them at every grid
        step; they pass through the check so the call runs after it (zeroed when the
        check fails, so the doomed call reads no block out of bounds)."""
        points = jnp.meshgrid(*(jnp.arange(n, dtype=jnp.int32) for n in grid), indexing="ij")
        (values,) = index_map(*(p.reshape(-1) for p in points), *tables)
        shapes = tuple(jax.ShapeDtypeStruct(t.shape, t.dtype) for t in tables)

        def check(values, *tables):
            values = np.asarray(values)
            bad = values[(values < 0) | (values >= limit)]
            if bad.size:
                self._check(check_id, bad[0], bad[0] + 1, limit)
                # The call fails with this check's error; zeroed tables keep its blocks in bounds.
                return tuple(np.zeros_like(t) for t in tables)
            return tables

        return io_callback(check, shapes, values, *tables)

    def host_indices(self, check_id: int, values, *, limit: int):
        """`values` (a host subscript's index tensor or scalar), after checking that each
        lies in [-limit, limit); they pass through the check so the indexing runs after it."""

        def check(values):
            values = np.asarray(values)
            bad = values[(values < -limit) | (values >= limit)]
            if bad.size:
                self._check(check_id, bad.flat[0], bad.flat[0] + 1, limit)
            return values

        values = jnp.asarray(values)  # a worklist's constant segment end is a Python int
        return io_callback(check, jax.ShapeDtypeStruct(values.shape, values.dtype), values)

    # --- host side ------------------------------------------------------------

    def _check(self, check_id: int, lo, hi, limit: int,
               outcome: str = "the kernel skipped the access; its result is wrong") -> np.ndarray:
        lo, hi, limit = int(lo), int(hi), int(limit)
        if hi <= lo or (lo >= 0 and hi <= limit):
            return np.int32(1)
        self._record(check_id, lo, hi, limit, outcome)
        return np.int32(0)

    def _record(self, check_id: int, lo: int, hi: int, limit: int, outcome: str) -> None:
        """A violation: to the call collecting them, a range_checked() block, or a warning."""
        message, where = self.checks[check_id]
        with self._lock:
            collector = self._collectors[-1] if self._collectors else None
            if collector is not None:
                collector.append((check_id, lo, hi, limit))
        if collector is None:
            with _BLOCKS_LOCK:
                block = _BLOCKS[-1] if _BLOCKS else None
                if block is not None:
                    block.append((self, check_id, lo, hi, limit))
            if block is not None:
                return
            warnings.warn(f"pallasite: {where}: {message.format(lo=lo, hi=hi, limit=limit)} "
                          f"({outcome})", stacklevel=1)

    @contextlib.contextmanager
    def collect(self) -> Iterator[list]:
        """Record the violations of the calls made inside the block, as (id, lo, hi, limit)."""
        found: list = []
        with self._lock:
            self._collectors.append(found)
        try:
            yield found
        finally:
            with self._lock:
                self._collectors = [c for c in self._collectors if c is not found]


def forget_failed_run() -> None:
    """Drop the ordered-effect tokens JAX keeps from the last run: after a run that failed
    (a device id outside the mesh fails the interpreter on purpose), they hold its error
    and JAX would raise it again at the start of the next call."""
    from jax._src import dispatch

    dispatch.runtime_tokens.clear()


@contextlib.contextmanager
def range_checked() -> Iterator[list]:
    """Raise `exc.ShapeMismatch` (at the user's line) for the first data-dependent range
    violation of any kernel run in the block, instead of warning, and `exc.DataRace` when
    the race detector (`PALLASITE_INTERPRET_DETECT_RACES=1`) reports a race: for kernels
    called inside the caller's own `jax.jit` / `jax.shard_map` (remote copies always
    are), where pallasite does not see the call end. Interpret mode only (a TPU does not
    check); block on the results inside it."""
    from .. import exc
    from .interpret import interpreter_reports

    found: list = []
    with _BLOCKS_LOCK:
        _BLOCKS.append(found)
    failed = None
    try:
        with interpreter_reports() as reports:
            yield found
    except jax.errors.JaxRuntimeError as err:  # the violation may have broken the run too
        if not found:
            raise
        failed = err
        forget_failed_run()
    finally:
        with _BLOCKS_LOCK:
            _BLOCKS[:] = [b for b in _BLOCKS if b is not found]
    if not found and any("RACE DETECTED" in report for report in reports):
        raise exc.DataRace(
            "TPU interpret mode's race detector saw a data race in a kernel run inside "
            f"pallasite.range_checked(); its results cannot be trusted. The first report:\n{reports[0]}")
    if found:
        checks, check_id, lo, hi, limit = found[0]
        message, where = checks.checks[check_id]
        location = checks.locations.get(check_id)
        text = message.format(lo=lo, hi=hi, limit=limit)
        raise exc.ShapeMismatch(text if location is not None else f"{where}: {text}", location) from failed
