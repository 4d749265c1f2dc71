"""A plan's schedule counted for concrete arguments, on the host, without running it.

Every data-dependent bound of the plan — an inner loop's `begin`/`end`
(`offsets[g]`, `min(s, tile_q.end)`, `max(k_start, tile_q.begin - w)`), a kernel
scalar, a block index read from a prefetched table — is a tree of IR values
over tile begins, constants, integer arithmetic, scalar arguments and scalar
reads of small tensors — or a reduction of a vector read at a tile's positions (an
`hl.jagged_tile` loop runs to its outer tile's longest length). `ScalarValues` evaluates
those trees in Python over the argument values, so the counts are the kernel's own, not an estimate: a loop
runs `cdiv(max(end - begin, 0), block)` tiles per dim, as the generated code
computes it.

`count_call` walks one pallas_call program by program (`programs`: the grid's
steps; for a flattened worklist its real work items, from the item tables
`plan/worklists.py` builds for the arguments) and
counts, per inner loop, how often it starts and how many tiles it runs over
the whole call (`LoopCount`, which `metrics.schedule_metrics` turns into
streamed bytes), the innermost loops' tiles, the largest per-program share of
them (load balance), the MXU flops of the contractions executed and the vector
(VPU/EUP) work in vregs (plan/vector_work.py).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import numpy as np
import torch

from .. import exc
from ..ir import FoldedSteps, IfBlock, Load, ScalarIndex, Store, TileDim, TileLoop, Value, cdiv, walk_loops
from ..ir.ops import OPS, scalar_arithmetic
from ..ir.ops.definition import OpKind
from .plans import PallasCallPlan
from .vector_work import NONE as NO_VECTOR_WORK, VectorCounter, VectorWork

@dataclass(frozen=True)
class LoopCount:
    """One inner loop over a whole call: how often it starts and its tiles summed over
    those runs (the product of its dims' trips each time)."""

    runs: int
    tiles: int
    busy_runs: int  # runs with at least one tile


@dataclass(frozen=True)
class CallCounts:
    programs: int  # grid programs that do work: run an innermost tile or a store
    loops: dict[int, LoopCount]  # TileLoop id -> its count
    inner_tiles: int  # iterations of the innermost loops, over every program
    max_program_tiles: int  # the most innermost-loop iterations any one program runs
    flops: int  # MXU flops of the contractions executed (block-shaped: padding included)
    vector: VectorWork = NO_VECTOR_WORK  # VPU/EUP work executed, in vregs (plan/vector_work.py)
    f32_flops: int = 0  # the part of `flops` whose factors are float32 (slower on the MXU)
    program_tiles: tuple[int, ...] = ()  # innermost iterations of each grid step, in grid order
    drains: int = 0  # contractions and reductions executed: each drains a pipeline before its user
    grid_steps: int = 0  # grid programs launched, idle ones too (an empty segment, an item past the count)


class ScalarValues:
    """Evaluates int scalars of device code for one program's tiles.

    `tables` maps each `TensorSymbol`/`ScalarSymbol` to its value (an array, a
    tensor or a number); `env` maps a TileDim id to `(tile_begin, begin, end)` of
    its current tile and its loop's evaluated bounds.
    """

    def __init__(self, tables: Mapping[Any, Any]):
        self.tables = tables

    def value(self, operand: Any, env: dict[int, tuple[int, int, int]]) -> int:
        if isinstance(operand, bool):
            return int(operand)
        if isinstance(operand, (int, float)):
            return operand
        if not isinstance(operand, Value) or operand.producer is None:
            raise _cannot(operand, "it is not computed in device code")
        node = operand.producer
        if isinstance(node, Load):
            if not all(isinstance(i, ScalarIndex) for i in node.index):
                raise _cannot(operand, "it is loaded with a tile index")
            table = self._table(node.tensor)
            for item in node.index:
                table = table[int(self.value(item.index, env))]
            return _number(table)
        if node.op in ("tile_begin", "tile_id", "tile_end", "tile_count"):
            return self._tile_attribute(node.op, node.args[0], env)
        arithmetic = scalar_arithmetic(node.op)
        if arithmetic is not None:
            left, right = (self.value(a, env) for a in node.args[:2])
            return arithmetic.function(left, right * node.kwargs.get("alpha", 1))
        if node.op == "scalar_arg":
            return _number(self._table(node.args[0]))
        if node.op in ("to", "identity"):
            return self.value(node.args[0], env)
        if node.op == "neg":
            return -self.value(node.args[0], env)
        if node.op == "clamp":
            result = self.value(node.args[0], env)
            low, high = (node.kwargs.get(k) for k in ("min", "max"))
            result = result if low is None else max(result, self.value(low, env))
            return result if high is None else min(result, self.value(high, env))
        if node.op in _VECTOR_REDUCTIONS and isinstance(node.args[0], Value) and len(node.args[0].shape) == 1:
            lanes = self.vector(node.args[0], env)  # `lengths.amax()`: an hl.jagged_tile loop's bound
            return _number(_VECTOR_REDUCTIONS[node.op](lanes)) if lanes.size else 0
        raise _cannot(operand, f"its op {node.op!r} is not evaluated by the schedule report")

    def vector(self, operand: Any, env: dict[int, tuple[int, int, int]]) -> np.ndarray:
        """A 1-D int value of one tile's valid lanes: a tile's positions, a tensor read at
        them (`offsets[tile_b.index + 1]`: 0 outside the tensor, as the kernel reads), and
        elementwise arithmetic on those and on scalars."""
        if not isinstance(operand, Value) or not operand.shape:
            return np.asarray(self.value(operand, env))
        node = operand.producer
        if isinstance(node, Load) and len(node.index) == 1 and hasattr(node.index[0], "dim"):
            item = node.index[0]
            positions = self._positions(item.dim, env) + getattr(item, "offset", 0)
            table = np.asarray(self._table(node.tensor)).reshape(-1)
            inside = (positions >= 0) & (positions < table.shape[0])
            return np.where(inside, table[np.clip(positions, 0, max(table.shape[0] - 1, 0))], 0)
        if node is not None and node.op == "tile_index":
            return self._positions(node.args[0], env)
        arithmetic = None if node is None else scalar_arithmetic(node.op)
        if arithmetic is not None:
            left, right = (self.vector(a, env) for a in node.args[:2])
            return np.asarray(arithmetic.function(left, right * node.kwargs.get("alpha", 1)))
        if node is not None and node.op in ("to", "identity"):
            return self.vector(node.args[0], env)
        raise _cannot(operand, f"its op {node.op if node is not None else 'argument'!r} is not evaluated "
                               "lane by lane by the schedule report")

    def _positions(self, dim: TileDim, env) -> np.ndarray:
        if dim.id not in env:
            raise _cannot(dim.name, "it reads a tile outside its loop")
        begin, _, hi = env[dim.id]
        return np.arange(begin, min(begin + dim.block_size, hi))

    def _tile_attribute(self, op: str, dim: TileDim, env) -> int:
        if dim.id not in env:
            raise _cannot(dim.name, "it reads a tile outside its loop")
        begin, lo, hi = env[dim.id]
        if op == "tile_begin":
            return begin
        if op == "tile_id":
            return (begin - lo) // dim.block_size
        if op == "tile_end":
            return min(begin + dim.block_size, hi)
        return cdiv(max(hi - lo, 0), dim.block_size)

    def table(self, symbol) -> Any:
        """The value of an argument the bounds read (a clear error when it is unknown)."""
        return self._table(symbol)

    def _table(self, symbol) -> Any:
        if symbol not in self.tables:
            raise exc.UnsupportedOperation(
                f"schedule_report needs the values of {symbol.name!r}, which host code computes; "
                "pass the values the kernel's loops read as arguments.")
        value = self.tables[symbol]
        if getattr(value, "device", None) is not None and str(value.device) == "meta":
            raise exc.UnsupportedOperation(
                f"schedule_report needs the values of {symbol.name!r} (the kernel's loop bounds read "
                "them), but it is a meta tensor.")
        return value


_VECTOR_REDUCTIONS = {"amax": np.max, "amin": np.min, "sum": np.sum}


def _number(value: Any) -> int:
    item = value.item() if hasattr(value, "item") else value
    return int(item) if float(item).is_integer() else item


def _cannot(operand, why: str) -> exc.UnsupportedOperation:
    name = getattr(operand, "name", "") or repr(operand)
    return exc.UnsupportedOperation(f"schedule_report cannot evaluate the loop bound {name}: {why}.")


def programs(call: PallasCallPlan, tables: Mapping[Any, Any]) -> Iterator[dict[int, tuple[int, int, int]]]:
    """The environment of each program the call runs: its grid tiles' begins.

    The one place a schedule's programs are enumerated, in grid order. A flattened
    worklist's grid is a static bound: the items past the real count have extent 0,
    so their q loop runs no tile (the item's owner and rows are read from its tables
    by the loop bounds)."""
    return _programs(call.grid, ScalarValues(tables))


def _programs(axes, values: ScalarValues) -> Iterator[dict[int, tuple[int, int, int]]]:
    for step in itertools.product(*(range(axis.num_blocks) for axis in axes)):
        env = {}
        for axis, index in zip(axes, step):  # a folded dim's bounds may be values of the outer tiles
            dim = axis.dim
            begin, end = values.value(dim.begin, env), values.value(dim.end, env)
            env[dim.id] = (begin + index * dim.block_size, begin, end)
        yield env


def count_call(call: PallasCallPlan, tables: Mapping[Any, Any],
               mxu: tuple[int, int] = (128, 0)) -> CallCounts:
    """`mxu`: the chip's MXU width and accumulators per MXU (`VectorCounter`)."""
    values = ScalarValues(tables)
    tally = _Tally(VectorCounter(call.call.loop.body, mxu))
    busy = 0
    per_program = []
    folded = _plain_fold(call)
    if folded is not None:
        busy = _count_folded(call, folded, tally, values, per_program)
    for env in () if folded is not None else programs(call, tables):
        tiles, stores = tally.inner_tiles, tally.stores
        tally.walk(call.call.loop.body, env, values, 1)
        per_program.append(tally.inner_tiles - tiles)
        busy += per_program[-1] > 0 or tally.stores > stores
    loops = {loop_id: LoopCount(*counts) for loop_id, counts in tally.loops.items()}
    return CallCounts(busy, loops, tally.inner_tiles, max(per_program, default=0), tally.flops,
                      tally.vector, tally.f32_flops, tuple(per_program), tally.drains, len(per_program))


def _plain_fold(call: PallasCallPlan) -> FoldedSteps | None:
    """The call's folded loop when its steps differ only in whether they skip (its body holds
    no loop, whose trips could depend on the folded tile): then `count_call` counts one
    outer program's steps at once."""
    fold = next((item for item in call.call.loop.body if isinstance(item, FoldedSteps) and item.folded), None)
    if fold is None or next(walk_loops(fold.body), None) is not None:
        return None
    return fold


def _count_folded(call: PallasCallPlan, fold: FoldedSteps, tally: _Tally, values: ScalarValues,
                  per_program: list) -> int:
    """Count a call with a folded loop by outer program: the steps of one run the same
    prologue and epilogue work (the statements around the loop read no folded tile) and the
    body at each step before the program's end of every folded dim. Appends each step's
    innermost tiles to `per_program` in grid order; returns the steps that do work."""
    folded_axes = call.grid[len(call.grid) - len(fold.folded):]  # the innermost axes
    shape = tuple(axis.num_blocks for axis in folded_axes)
    steps = math.prod(shape)
    body_stores = _body_stores(fold.body)
    busy = 0
    for outer in _programs(call.grid[:len(call.grid) - len(fold.folded)], values):
        env = dict(outer)
        runs = np.ones(shape, dtype=bool)  # which steps run the body
        for position, dim in enumerate(fold.folded):
            begin, end = values.value(dim.begin, env), values.value(dim.end, env)
            env[dim.id] = (begin, begin, end)
            trips = cdiv(max(end - begin, 0), dim.block_size)
            kept = [slice(None)] * len(shape)
            kept[position] = slice(trips, None)
            runs[tuple(kept)] = False
        active = int(runs.sum())
        tiles, stores = tally.inner_tiles, tally.stores
        tally.fold_runs = {fold.id: active}
        tally.walk(call.call.loop.body, env, values, steps)
        tally.fold_runs = {}
        around = (tally.inner_tiles - tiles - active) // steps  # per step, of loops around the fold
        stores_around = tally.stores - stores - active * body_stores
        per_program.extend((around + runs.reshape(-1)).tolist())
        busy += steps if around or stores_around else active
    return busy


class _Tally:
    def __init__(self, vectors: VectorCounter):
        self.vectors = vectors
        self.drains = 0
        self.stores = 0  # Store nodes executed
        self.loops: dict[int, list[int]] = {}  # loop id -> [runs, tiles, busy runs]
        self.inner_tiles = 0
        self.flops = 0
        self.vector = NO_VECTOR_WORK
        self.f32_flops = 0
        self._work: dict[int, tuple[int, int, VectorWork, int]] = {}  # per body: one run's work
        self.fold_runs: dict[int, int] = {}  # a folded loop counted by outer program: its body's runs

    def _add_work(self, body: list, runs: int) -> None:
        """Add `runs` runs of `body`'s own nodes (flops, vector work, drains)."""
        work = self._work.get(id(body))
        if work is None:
            work = self._work[id(body)] = (_body_flops(body), _body_flops(body, f32_only=True),
                                           _body_vector_work(body, self.vectors), _body_drains(body),
                                           _body_stores(body))
        flops, f32_flops, vector, drains, stores = work
        self.stores += runs * stores
        self.flops += runs * flops
        self.f32_flops += runs * f32_flops
        self.vector += vector * runs
        self.drains += runs * drains

    def walk(self, body: list, env: dict, values: ScalarValues, times: int) -> None:
        """Count `body` run `times` times with the tiles of `env` (identical runs)."""
        self._add_work(body, times)
        self._loops(body, env, values, times)

    def _loops(self, body: list, env: dict, values: ScalarValues, times: int) -> None:
        """The loops of `body`; those under a device `if` in both branches (an upper bound,
        as the branches' own work is: `_add_work` counted it with the body's)."""
        for item in body:
            if isinstance(item, TileLoop):
                self._loop(item, env, values, times)
            elif isinstance(item, IfBlock):
                for branch in item.bodies:
                    self._loops(branch, env, values, times)

    def _loop(self, loop: TileLoop, env: dict, values: ScalarValues, times: int) -> None:
        if loop.id in self.fold_runs:  # `times` steps of a folded loop, its body run at some
            runs = self.fold_runs[loop.id]
            counts = self.loops.setdefault(loop.id, [0, 0, 0])
            counts[0], counts[1], counts[2] = counts[0] + times, counts[1] + runs, counts[2] + runs
            self.inner_tiles += runs
            self._add_work(loop.body, runs)
            return
        bounds = [(values.value(d.begin, env), values.value(d.end, env)) for d in loop.dims]
        trips = [cdiv(max(hi - lo, 0), d.block_size) for d, (lo, hi) in zip(loop.dims, bounds)]
        # a folded loop's step past this program's end skips (plan/folded_loops.py)
        tiles = 0 if isinstance(loop, FoldedSteps) and _past_the_end(loop, env) else math.prod(trips)
        counts = self.loops.setdefault(loop.id, [0, 0, 0])
        counts[0] += times
        counts[1] += times * tiles
        counts[2] += times if tiles else 0
        if next(walk_loops(loop.body), None) is None:
            self.inner_tiles += times * tiles
            self._add_work(loop.body, times * tiles)
            return
        for step in itertools.product(*(range(t) for t in trips)):
            inner = dict(env)
            for dim, (lo, hi), index in zip(loop.dims, bounds, step):
                inner[dim.id] = (lo + index * dim.block_size, lo, hi)
            self.walk(loop.body, inner, values, times)


def _past_the_end(loop: FoldedSteps, env: dict) -> bool:
    """Whether this program's step of folded `loop` lies past the end of one of its dims."""
    return any(env[dim.id][0] >= env[dim.id][2] for dim in loop.folded)


def _body_flops(body: list, f32_only: bool = False) -> int:
    """MXU flops of one run of `body`'s own contractions (nested loops excluded; both
    branches of a device `if` counted, an upper bound); `f32_only`: of those whose
    factors are float32."""
    total = 0
    for item in body:
        if isinstance(item, IfBlock):
            total += _body_flops(item.then_body, f32_only) + _body_flops(item.else_body, f32_only)
        elif not isinstance(item, TileLoop) and (not f32_only or _f32_factors(item)):
            total += node_flops(item)
    return total


def _f32_factors(node) -> bool:
    definition = OPS.get(getattr(node, "op", None))
    if definition is None or definition.kind is not OpKind.CONTRACTION:
        return False
    factors = (node.args[definition.contraction.lhs], node.args[definition.contraction.rhs])
    return any(getattr(f, "dtype", None) == torch.float32 for f in factors)


def _body_vector_work(body: list, vectors: VectorCounter) -> VectorWork:
    """Vector work of one run of `body`'s own nodes (nested loops excluded; both branches
    of a device `if`, an upper bound)."""
    total = NO_VECTOR_WORK
    for item in body:
        if isinstance(item, IfBlock):
            total += _body_vector_work(item.then_body, vectors) + _body_vector_work(item.else_body, vectors)
        elif not isinstance(item, TileLoop):
            total += vectors.work(item)
    return total


def _body_stores(body: list) -> int:
    """Stores of one run of `body`'s own nodes (an `if`'s branches both counted: an upper bound)."""
    return sum(_body_stores(item.then_body) + _body_stores(item.else_body) if isinstance(item, IfBlock)
               else isinstance(item, Store) for item in body)


def _body_drains(body: list) -> int:
    """Contractions and reductions of one run of `body`'s own nodes (see `CallCounts.drains`)."""
    total = 0
    for item in body:
        if isinstance(item, IfBlock):
            total += _body_drains(item.then_body) + _body_drains(item.else_body)
        elif not isinstance(item, (TileLoop, Load)):
            definition = OPS.get(getattr(item, "op", None))
            if definition is not None and definition.kind in (OpKind.CONTRACTION, OpKind.REDUCTION):
                total += 1
    return total


def node_flops(node) -> int:
    """2 * M * N * K (times batch) for a contraction over its block shapes, else 0."""
    definition = OPS.get(node.op)
    if definition is None or definition.kind is not OpKind.CONTRACTION or isinstance(node, Load):
        return 0
    lhs = node.args[definition.contraction.lhs]
    if not isinstance(lhs, Value) or not lhs.shape:
        return 0
    return 2 * math.prod(node.output.shape) * lhs.shape[-1]
