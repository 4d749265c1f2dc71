"""TPU cost model: an estimated kernel time from the plan alone (a model, not a measurement).

Interim: replaced by the costmodel branch at merge. This minimal version keeps the
API the autotuner calls (`estimate` -> `CostEstimate`) and a first-order model:
HBM bytes / bandwidth, contraction flops / bf16 peak (the larger of the two: they
overlap), grid programs x 0.35 us of per-step overhead, and exposed DMA waits.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from .. import exc
from ..config import Config, as_config
from ..plan.metrics import schedule_metrics
from ..plan.schedule import count_call

STEP_OVERHEAD_SECONDS = 0.35e-6  # per grid step (pipeline prologue/epilogue, DMA issue)
DMA_WAIT_SECONDS = 1.0e-6  # one DMA latency not hidden behind compute


@dataclass(frozen=True)
class CostEstimate:
    """A modelled kernel time and what it is made of (seconds per part)."""

    seconds: float
    breakdown: dict[str, float] = field(default_factory=dict)  # 'memory','compute','overhead','exposed_dma'
    chip: str = ""
    label: str = "model"


def estimate(kernel, args: Sequence[Any], config: Config | Mapping[str, Any] | None = None, *,
             kwargs: Mapping[str, Any] | None = None, chip: str | None = None) -> CostEstimate:
    """The modelled time of `kernel` on `args` (their values only where a loop bound reads
    them) under `config` (None: the one a call runs) on TPU `chip` (default: the
    compile target). Raises `exc.InvalidConfig` (or a subclass) for a config planning rejects."""
    from ..report import _tables
    from ..runtime.chips import chip_info, default_chip

    chip = chip or default_chip()
    info = chip_info(chip)
    bound = kernel.bind(tuple(args), dict(kwargs or {}))
    resolved = bound.resolve_config(as_config(config) if config is not None else None)
    plan = bound.plan(resolved, chip)
    tables = _tables(kernel, bound, plan.ir.arguments, args, kwargs or {})
    counts = [count_call(call, tables) for call in plan.calls]
    metrics = schedule_metrics(plan, tables, counts)
    if metrics.hbm_bytes is None:
        raise exc.InvalidConfig("The cost model cannot count this plan's HBM traffic.")
    memory = metrics.hbm_bytes / info.mem_bw_bytes_per_second
    compute = sum(c.flops for c in counts) / info.bf16_ops_per_second
    overhead = sum(c.programs for c in counts) * STEP_OVERHEAD_SECONDS
    exposed = (metrics.exposed_dma_waits or 0) * DMA_WAIT_SECONDS
    parts = {"memory": memory, "compute": compute, "overhead": overhead, "exposed_dma": exposed}
    return CostEstimate(max(memory, compute) + overhead + exposed, parts, chip)
