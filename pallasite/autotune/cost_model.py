"""A TPU cost model: the modelled time of one kernel call, from its plan alone.

Nothing runs and nothing is compiled. The kernel is planned for the call's
arguments and config; `plan/schedule.py` counts, for those arguments, each
program's inner-loop tiles, the MXU flops and the vector work (vregs,
`plan/vector_work.py`); `plan/metrics.py` the HBM traffic. Per pallas_call,
with the chip's figures (`runtime/chips.py`: JAX's `tpu_info` per TensorCore,
plus the documented figures JAX lacks):

    memory      = HBM bytes / (HBM bandwidth * cores)
                  + share * steps * DMA_LATENCY_CYCLES / clock
    mxu         = (flops + (F32_MXU_PASSES - 1) * f32 flops) / bf16 peak
    vector      = max(VALU ops / (VALU_SLOTS * clock), EUP pushes / clock,
                      VMEM vector stores / clock)
    compute     = share * (max(mxu, vector) + min(mxu, vector) / chains)
    overhead    = share * max(steps * STEP_OVERHEAD_S,
                              drains * DRAIN_SIDES * MXU side / clock)
    exposed_dma = share * bytes no pipeline hides (each streamed-loop run's
                  first input windows, the grid's first input and last output
                  blocks, per-row DMA gathers waited in their own step)
                  / HBM bandwidth
    seconds     = max(memory, compute + overhead) + exposed_dma

summed over the calls (steps: grid steps launched + pipelined inner steps).
Why these terms:
- two paths run side by side: the DMA engines move the bytes (`memory`) while
  the core computes and pays its per-step costs, so the slower bounds the call.
  On the DMA path every step also waits for its copy's latency beyond the
  bytes: a copy is issued one step ahead, so a short step waits for it
  (~480 cycles issue to completion, measured on v4; `DMA_LATENCY_CYCLES`);
- HBM bandwidth is the chip's: JAX's figure is per TensorCore, and the cores
  of a megacore chip share one HBM that one core alone can nearly fill
  (measured on v4: ~970 GB/s for one core, ~500 GB/s each for two);
- `chains` (`independent_chains`): the batch extent of the step's
  contractions. One chain is serial (attention's softmax waits for q @ k^T,
  p @ v for the softmax), so the MXU and the vector unit take turns; n
  independent chains pipeline through the two (two stages, n jobs);
- float32 factors take `F32_MXU_PASSES` bf16 passes on the MXU;
- the vector unit issues `VALU_SLOTS` ALU ops, one EUP push and one vector
  store per bundle (plan/vector_work.py counts them, in vregs);
- every pipeline step (grid program, emit_pipeline / fori_loop step) pays a
  fixed ~0.35 us of semaphore waits and loop bookkeeping, and each contraction
  or reduction executed ("drain") waits for its result before its user starts
  (`DRAIN_SIDES` x side cycles; a lane reduction is charged the same). The two
  overlap, the larger counting: a step of the JAX matmul guide's 128^3 blocks
  costs ~0.35 us on v5e in all, not a step plus a drain;
- `share` (`core_share`): the largest fraction of the call's work (programs
  plus their innermost tiles) one TensorCore gets when a megacore chip (v4,
  v5p) splits the first parallel grid axis in contiguous halves; 1 on v5e,
  v6e and v7x (whose two TensorCores are separate JAX devices).

The constants are calibrated on published TPU timings
(`benchmarks/cost_model_calibration.py`, its data and sources in
`benchmarks/calibration_points.py`): DRAIN_SIDES and DMA_LATENCY_CYCLES are
the best of a grid on half of the points (the other half held out);
STEP_OVERHEAD_S is Pallas' documented per-step figure, which those points
do not constrain; VALU_SLOTS and F32_MXU_PASSES no point constrains (no f32
or VALU-bound timing is published).

It is a model (`CostEstimate.label`), meant to rank configs of one kernel, not
to predict absolute times: no cache, bank-conflict, code-size or
instruction-scheduling effects are modelled.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .. import exc
from ..config import Config
from ..plan.loops import strategy_of
from ..plan.metrics import schedule_metrics
from ..plan.plans import KernelPlan, Memory, PallasCallPlan, Semantics
from ..ir import walk_nodes
from ..plan.argument_tables import plan_tables
from ..plan.schedule import CallCounts, count_call, node_flops
from ..runtime.chips import default_chip, ChipFigures, chip_figures

STEP_OVERHEAD_S = 0.35e-6  # per grid program / pipelined inner step
VALU_SLOTS = 4  # vector ALU ops per bundle
DRAIN_SIDES = 4.5  # a drain (contraction, reduction) waits 4.5 * MXU side cycles before its user starts
F32_MXU_PASSES = 3  # bf16 passes per float32 product
DMA_LATENCY_CYCLES = 480  # a copy's issue-to-completion latency beyond its bytes (measured on v4)
TERMS = ("memory", "compute", "overhead", "exposed_dma")


@dataclass(frozen=True)
class CostEstimate:
    seconds: float  # modelled TPU time of one kernel call
    breakdown: dict[str, float]  # seconds per term: 'memory', 'compute', 'overhead', 'exposed_dma'
    chip: str  # e.g. 'v7x'
    label: str = "model"  # it's a model, say so wherever shown

    def describe(self) -> str:
        parts = ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in self.breakdown.items())
        return f"{self.seconds * 1e3:.3f} ms ({self.label}, {self.chip}: {parts})"


def estimate(kernel, args: Sequence[Any], config: Config | Mapping[str, Any] | None = None, *,
             kwargs: Mapping[str, Any] | None = None, chip: str | None = None,
             plan: KernelPlan | None = None) -> CostEstimate:
    """The modelled time of `kernel(*args, **kwargs)` under `config` (None: the config a
    call would run) on TPU generation `chip` (default: the chip plans and compiles target,
    `runtime.chips.default_chip()`: `PALLASITE_TPU_CHIP`, else the attached TPU's, else v7x — so
    the tuner scores configs for the chip the kernel is compiled for).
    Raises `exc.InvalidConfig` for a config planning rejects. `plan`: that config's plan
    for `chip`, already built (the tuner's, from canonicalizing the candidate)."""
    chip = chip or default_chip()
    bound = kernel.bind(tuple(args), dict(kwargs or {}))
    if config is not None and not isinstance(config, Config):
        config = Config(**dict(config))
    if plan is None:
        plan = bound.plan(bound.resolve_config(config), chip)
    return estimate_plan(plan, plan_tables(kernel, bound, plan, args, kwargs or {}))


def estimate_plan(plan: KernelPlan, tables: Mapping[Any, Any],
                  counts: Sequence[CallCounts] | None = None) -> CostEstimate:
    """The modelled time of `plan` (built for its chip) for the argument values `tables`;
    `counts`: each call's `count_call` already made with `mxu_figures(plan.chip)`."""
    figures = chip_figures(plan.chip)
    terms = dict.fromkeys(TERMS, 0.0)
    seconds = 0.0
    for position, call in enumerate(plan.calls):
        call_counts = counts[position] if counts is not None else count_call(call, tables, mxu_figures(plan.chip))
        share = core_share(call, call_counts, figures.cores)
        call_terms = call_cost(call, call_counts, schedule_metrics_of(plan, call, tables, call_counts), figures,
                               share)
        for key in TERMS:
            terms[key] += call_terms[key]
        seconds += call_seconds(call_terms)
    return CostEstimate(seconds, terms, _chip_name(figures.name))


def call_seconds(terms: Mapping[str, float]) -> float:
    """One call's time from its terms: the DMA path and the core's path run side by side."""
    return max(terms["memory"], terms["compute"] + terms["overhead"]) + terms["exposed_dma"]


def mxu_figures(chip: str) -> tuple[int, int]:
    """(MXU side, accumulators per MXU) of `chip`, what `count_call` needs."""
    figures = chip_figures(chip)
    return figures.mxu_side, figures.mxu_accumulators


def schedule_metrics_of(plan, call: PallasCallPlan, tables, counts: CallCounts):
    """`schedule_metrics` of one call of `plan`."""
    return schedule_metrics(dataclasses.replace(plan, calls=(call,)), tables, [counts], estimate=True)


def call_cost(call: PallasCallPlan, counts: CallCounts, metrics, chip: ChipFigures,
              share: float = 1.0) -> dict[str, float]:
    """The four terms of one pallas_call, for the core that gets `share` of its work
    (`core_share`): the call's time is max(memory, compute + overhead) + exposed_dma."""
    if metrics.hbm_bytes is None:
        raise exc.UnsupportedOperation(
            "The cost model needs the call's HBM traffic, which depends on values it could not evaluate: "
            "an inner loop's trip count read from data no argument holds (values the kernel computes), or "
            "an argument passed as a traced value (pass real tensors to rank configs).")
    bandwidth = chip.hbm_bytes_per_second
    mxu = (counts.flops + (F32_MXU_PASSES - 1) * counts.f32_flops) / chip.bf16_flops_per_second
    work = counts.vector
    vector = max(work.valu / (VALU_SLOTS * chip.clock_hz), work.eup / chip.clock_hz,
                 work.stores / chip.clock_hz)
    pipelined = sum(counts.loops[loop_id].tiles for loop_id, loop_plan in call.inner_loops.items()
                    if loop_id in counts.loops
                    and (loop_plan.streams or strategy_of(loop_plan).steps_at_run_time))
    steps = counts.grid_steps + pipelined
    chains = independent_chains(call)
    return {
        # the DMA path: every byte at the chip's HBM bandwidth (the cores of a megacore chip
        # share it, and one core alone can use it), plus each step's copy latency
        "memory": metrics.hbm_bytes / (bandwidth * chip.cores)
                  + share * steps * DMA_LATENCY_CYCLES / chip.clock_hz,
        "compute": share * (max(mxu, vector) + min(mxu, vector) / chains),
        "overhead": share * max(steps * STEP_OVERHEAD_S,
                                counts.drains * DRAIN_SIDES * chip.mxu_side / chip.clock_hz),
        "exposed_dma": share * (exposed_bytes(call, counts) + (metrics.row_gather_bytes or 0)) / bandwidth,
    }


def independent_chains(call: PallasCallPlan) -> int:
    """How many independent product -> vector-work chains one step holds: the batch
    extent (leading axes) of its contractions, the smallest over the call (1 when one
    has no batch axis, or there are none)."""
    batches = [math.prod(node.outputs[0].shape[:-2]) for node in walk_nodes(call.call.loop.body)
               if node_flops(node)]
    return max(1, min(batches, default=1))


def exposed_bytes(call: PallasCallPlan, counts: CallCounts) -> int:
    """Bytes copied while nothing computes: each run of a streamed loop waits for its
    first input windows (and drains its last output windows); the grid's pipeline waits
    for its first input blocks and drains its last output blocks once."""
    total = 0
    for loop_id, loop_plan in call.inner_loops.items():
        count = counts.loops.get(loop_id)
        if count is None or not loop_plan.streams:
            continue
        window = sum(_nbytes(s.window_shape, s.symbol.dtype) for s in loop_plan.streams)
        total += count.busy_runs * window
    for op in (*call.inputs, *call.outputs):
        if op.memory is Memory.VMEM_BLOCK:
            total += _nbytes([1 if d is None else d for d in op.block_shape], op.symbol.dtype)
    return total


def core_share(call: PallasCallPlan, counts: CallCounts, cores: int) -> float:
    """The largest fraction of the call's work (programs + innermost tiles) one core runs
    when the first parallel grid axis is split in `cores` contiguous parts (1.0 when the
    call has no parallel axis to split or the chip drives one core per call)."""
    if cores <= 1 or not counts.program_tiles:
        return 1.0
    axes = call.grid
    split = next((i for i, a in enumerate(axes)
                  if a.semantics is Semantics.PARALLEL and a.num_blocks >= cores), None)
    if split is None:
        return 1.0
    inner = 1
    for axis in axes[split + 1:]:
        inner *= axis.num_blocks
    blocks = axes[split].num_blocks
    work = [0] * cores
    for position, tiles in enumerate(counts.program_tiles):
        core = (position // inner) % blocks * cores // blocks
        work[core] += 1 + tiles
    total = sum(work)
    return max(work) / total if total else 1.0


def _nbytes(shape, dtype) -> int:
    count = dtype.itemsize
    for d in shape:
        count *= d
    return count


def _chip_name(key: str) -> str:
    return f"v{key}" if key[:1].isdigit() else key
