"""The default config's second step: larger blocks while the cost model says they pay.

The heuristic default (`ConfigSpec.default_config`'s first candidate that plans)
aims at moderate blocks that fit VMEM. Kernels whose steps are short — a flash
attention step of 256 x 256 with one head, a matmul with 256-row blocks that
re-reads the other operand 16 times — pay per-step costs and repeated HBM
reads that larger blocks avoid; by how much depends on the chip and the
kernel, which the TPU cost model (`autotune/cost_model.py`) knows. So the
default grows from the heuristic one, one step at a time: each step tries every
block dim at its next larger legal size (with each default loop strategy, the
sizes changing what fits resident) and every other default strategy at the
current sizes, and takes the fastest move when it is modelled at least
`MIN_GAIN` faster and its VMEM estimate stays within `VMEM_SHARE` of the
chip's VMEM (or within the heuristic default's own). It stops after
`MAX_STEPS` steps or when no move pays.

Growth needs the model to count the schedule from the argument shapes alone:
a kernel whose loop bounds read argument values (jagged offsets, a kernel
scalar) or whose sizes are dynamic keeps the heuristic default. It is the
model, so on a real TPU the default stays a modelled choice (the tuner then
measures).
"""
from __future__ import annotations

from typing import Any, Callable

from .. import exc
from ..config import Config
from ..runtime.chips import chip_figures
from .cost_model import estimate_plan

MIN_GAIN = 0.03  # a move must be modelled at least 3% faster than the config it grows from
VMEM_SHARE = 0.75  # grown configs keep their VMEM estimate within 3/4 of the chip's VMEM
MAX_STEPS = 12


def modelled_from_shapes(plan) -> float | None:
    """The modelled seconds of `plan` counted from its shapes alone (None when its
    schedule reads argument values: data-dependent bounds, worklists)."""
    try:
        return estimate_plan(plan, {}).seconds
    except (exc.UnsupportedOperation, KeyError):
        return None


def vmem_bytes(plan) -> int:
    return max((call.vmem_bytes for call in plan.calls), default=0)


def grow(start: Config, block_sizes: list, strategies: list[str], plan_of: Callable[[Config], Any]) -> Config:
    """`start` grown (module docstring). `block_sizes`: the space's `BlockSizeSpec`s;
    `strategies`: the default loop strategies' names (empty without inner loops);
    `plan_of(config)` plans a config or raises `exc.PallasiteError`."""

    def scored(config: Config) -> tuple[float, int] | None:
        try:
            plan = plan_of(config)
        except exc.PallasiteError:
            return None
        seconds = modelled_from_shapes(plan)
        return None if seconds is None else (seconds, vmem_bytes(plan))

    if not any(spec.extent > size for spec, size in zip(block_sizes, start.block_sizes)):
        return start  # every block already covers its dim: nothing to grow (no planning)
    first = scored(start)
    if first is None:
        return start
    current, (seconds, vmem) = start, first
    budget = max(vmem, int(VMEM_SHARE * chip_figures(plan_of(start).chip).vmem_capacity_bytes))
    for _ in range(MAX_STEPS):
        best = None
        for move in _moves(current, block_sizes, strategies):
            result = scored(move)
            if result is not None and result[1] <= budget and (best is None or result[0] < best[1]):
                best = (move, result[0])
        if best is None or best[1] > seconds * (1 - MIN_GAIN):
            break
        current, seconds = best
    return current


def _moves(config: Config, block_sizes: list, strategies: list[str]) -> list[Config]:
    """Each block dim at its next larger legal size (under each strategy), and each other
    strategy at the current sizes."""
    sizes = list(config.block_sizes)
    current = config.get("pallas_loop_type")
    loop_types = [current, *(s for s in strategies if s != current)] if strategies else [None]
    moves = []
    for position, spec in enumerate(block_sizes):
        larger = [size for size in spec.candidates() if size > sizes[position]]
        if not larger:
            continue
        grown = sizes[:position] + [larger[0]] + sizes[position + 1:]
        moves.extend(_with(config, grown, loop_type) for loop_type in loop_types)
    moves.extend(_with(config, sizes, loop_type) for loop_type in loop_types[1:])
    return moves


def _with(config: Config, sizes: list[int], loop_type: str | None) -> Config:
    values = {**config, "block_sizes": sizes}
    if loop_type is not None:
        values["pallas_loop_type"] = loop_type
    return Config(values)
