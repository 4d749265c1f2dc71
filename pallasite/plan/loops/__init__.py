"""Inner-loop strategies (`pallas_loop_type`): the registry, and planning every inner loop.

A strategy is a `LoopStrategy` (base.py) with its own `LoopPlan` subclass, in
one module here, and one emitter module in `codegen/loops/`. Adding one means
those two modules and its name in `config.LOOP_TYPES` (the names a config may give,
below the plan): `STRATEGIES` collects the strategy objects of this package's modules
at import, in that order, and checks the two agree. `STRATEGIES` is the one list of
loop types: the config space, the fuzzer, the cost model, the VMEM advice and
the tests' parametrization (`LOOP_TYPES`, `loop_types`) read it.
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil

from ... import exc
from ...config import COMPACT_WORKLIST, FOLDED_LOOP_TYPE, KNOB_DEFAULTS, LOOP_TYPES, check_loop_type
from ...ir import TileLoop
from ..plans import LoopPlan, Scratch, Stream
from .base import LoopStrategy, inner_loops
from .folded import FOLDED_STEPS, FoldedStepsPlan
from .pipeline import PIPELINE, PipelineLoopPlan
from .resident import RESIDENT, ResidentLoopPlan
from .streamed import STREAMED_FORI, StreamedLoopPlan



def _collect_strategies() -> dict[str, LoopStrategy]:
    """Every `LoopStrategy` object the modules of this package define, by name, in the
    order of `config.LOOP_TYPES`."""
    found = {}
    for module_info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        found.update({value.name: value for value in vars(module).values()
                      if isinstance(value, LoopStrategy) and value.name != FOLDED_LOOP_TYPE})
    assert set(found) == set(LOOP_TYPES), f"one strategy per loop type the config names: {sorted(found)}"
    return {name: found[name] for name in LOOP_TYPES}


STRATEGIES: dict[str, LoopStrategy] = _collect_strategies()


def loop_types(**facts) -> tuple[str, ...]:
    """The loop types whose strategies have every given fact (`streams=True`, ...), in
    registry order: how code that applies to some strategies only says which."""
    unknown = set(facts) - set(LoopStrategy.FACTS) - {"copies_unaligned_windows"}
    if unknown:
        raise ValueError(f"not a loop strategy fact: {sorted(unknown)}")
    return tuple(name for name, strategy in STRATEGIES.items()
                 if all(getattr(strategy, fact) == value for fact, value in facts.items()))


def strategy_named(name: str) -> LoopStrategy:
    """The strategy a config names (`outer_pipeline`: the folded loop's grid steps;
    `compact_worklist`: the default one, for the items of a flattened worklist)."""
    if name == FOLDED_LOOP_TYPE:
        return FOLDED_STEPS
    if name == COMPACT_WORKLIST:  # the q loop of a flattened worklist: each item's tiles run as the default
        return STRATEGIES[KNOB_DEFAULTS["pallas_loop_type"]]
    check_loop_type(name)
    return STRATEGIES[name]


def strategy_of(loop_plan: LoopPlan) -> LoopStrategy:
    """The strategy that planned `loop_plan`."""
    return strategy_named(loop_plan.strategy)


def default_strategies() -> list[LoopStrategy]:
    """The strategies a default config tries, in order."""
    return sorted((s for s in STRATEGIES.values() if s.default_order is not None),
                  key=lambda s: s.default_order)


def multi_dim_loops(ir) -> list[TileLoop]:
    """Every hl.tile loop tiling several dims, in order of appearance (each device loop,
    then its inner loops, outer first): `loop_orders` has one permutation per such loop."""
    return [loop for call in ir.device_loops for loop in (call.loop, *inner_loops(call.loop.body))
            if len(loop.dims) > 1]


def all_inner_loops(ir) -> list[TileLoop]:
    """Every inner loop of every device loop, in source order (outer before nested):
    a `pallas_loop_type` list has one entry per such loop."""
    return [loop for call in ir.device_loops for loop in inner_loops(call.loop.body)]


def loop_strategies(ir, value) -> dict[int, LoopStrategy]:
    """The strategy of each inner loop, by TileLoop id, from the config's `pallas_loop_type`:
    one name (every inner loop) or a list with one name per
    inner loop in source order (`all_inner_loops`); a folded loop's is its grid steps'."""
    return {loop_id: strategy_named(name) for loop_id, name in loop_type_names(ir, value).items()}


def loop_type_names(ir, value) -> dict[int, str]:
    """The `pallas_loop_type` name of each inner loop, by TileLoop id: one name for every
    inner loop, or a list with one per inner loop in source order (`all_inner_loops`)."""
    if isinstance(value, str):
        return {loop.id: value for loop in all_inner_loops(ir)}
    return per_inner_loop(ir, "pallas_loop_type", value)


def buffer_counts(ir, value) -> dict[int, int]:
    """The stream depth of each inner loop, by TileLoop id, from the config's
    `pallas_load_buffer_count`: one int (every loop), None (the default), or a list with
    one entry per inner loop in source order, None entries taking the default."""
    default = KNOB_DEFAULTS["pallas_load_buffer_count"]
    if value is None or isinstance(value, int):
        return {loop.id: default if value is None else value for loop in all_inner_loops(ir)}
    return {loop_id: default if count is None else count
            for loop_id, count in per_inner_loop(ir, "pallas_load_buffer_count", value).items()}


def per_inner_loop(ir, key: str, value) -> dict:
    """A config list with one entry per inner loop (`all_inner_loops`), by TileLoop id;
    `exc.InvalidConfig` listing the loops when the count differs."""
    loops = all_inner_loops(ir)
    if not ir.device_loops:  # host code skipped every device loop: nothing to choose for
        return {}
    if len(value) != len(loops):
        where = "; ".join(f"{i}: line {loop.location.lineno} \"{loop.location.text.strip()}\""
                          if loop.location is not None else f"{i}: (no source line)"
                          for i, loop in enumerate(loops)) or "none"
        raise exc.InvalidConfig(
            f"{key} has {len(value)} entries but the kernel has {len(loops)} inner loop(s) "
            f"(in source order, nested loops after the loop holding them: {where}); give one "
            f"entry per inner loop, or a single value for all of them.",
            loops[0].location if loops else None)
    return dict(zip((loop.id for loop in loops), value))


def plan_inner_loops(body: list, strategies: dict[int, LoopStrategy],
                     loop_orders: dict[int, tuple[int, ...]]) -> dict[int, LoopPlan]:
    """Every inner loop of `body` planned by its strategy (`strategies`, by TileLoop id:
    `loop_strategies`; `unroll` for a loop it lacks), by TileLoop id; a multi-dim loop
    walks its dims in its `loop_orders` entry (outermost first), else as written."""
    names: set[str] = set()
    return {loop.id: strategies.get(loop.id, RESIDENT).plan_loop(
                loop, names, loop_orders.get(loop.id, tuple(range(len(loop.dims)))))
            for loop in inner_loops(body)}


def attach_streams(plans: dict[int, LoopPlan], streams: dict[int, Stream]) -> dict[int, LoopPlan]:
    return {
        loop_id: dataclasses.replace(plan, streams=tuple(s for s in streams.values() if s.loop_id == loop_id))
        for loop_id, plan in plans.items()
    }


def plan_scratch(body: list, plans: dict[int, LoopPlan]) -> tuple[Scratch, ...]:
    """Every loop's scratch buffers, in kernel-parameter order."""
    return tuple(scratch for loop in inner_loops(body)
                 for scratch in strategy_of(plans[loop.id]).scratch(loop, plans[loop.id]))



__all__ = [
    "LOOP_TYPES", "STRATEGIES", "FOLDED_STEPS", "FoldedStepsPlan", "LoopStrategy", "loop_types", "PipelineLoopPlan", "ResidentLoopPlan", "StreamedLoopPlan",
    "all_inner_loops", "attach_streams", "buffer_counts", "default_strategies", "inner_loops", "multi_dim_loops", "plan_inner_loops", "plan_scratch",
    "loop_strategies", "loop_type_names", "per_inner_loop", "strategy_named", "strategy_of",
]
