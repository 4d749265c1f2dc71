"""The schedule report: what a kernel's plan does for concrete arguments, without running it.

`schedule_report(kernel, args, **config)` plans the kernel for the arguments'
signature and the config (the one a call would run when none is given), then
evaluates every data-dependent bound on the host from the argument values
(plan/schedule.py) and reads the traffic from the plan's metrics
(plan/metrics.py), and the TPU cost model's time for the plan's chip
(autotune/cost_model.py, labelled a model). Tensors whose values no loop bound or block index reads may
be meta tensors, so realistic sizes cost nothing to report.

`python -m pallasite report MODULE:KERNEL` prints it as a table for the
module's `example_inputs()`.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from .config import Config
from .plan.metrics import schedule_metrics
from .plan.schedule import count_call
from .autotune.cost_model import estimate_plan, mxu_figures
from .plan.argument_tables import plan_tables
from .ir.sizes import SymbolicSize, evaluate
from .runtime.dynamic import specs_at

# The report's keys, in table order, with what each counts.
FIELDS = {
    "pallas_calls": "pallas_calls in the kernel",
    "grid_programs": "grid programs that do work (run an innermost tile or a store)",
    "grid_steps": "grid programs launched, idle ones too (each costs a step's overhead)",
    "inner_tiles": "iterations of the innermost tile loops, all programs",
    "max_program_tiles": "most innermost iterations of one program",
    "hbm_bytes": "bytes moved between HBM and VMEM by the kernel",
    "min_hbm_bytes": "each input read once, each output written once",
    "host_pad_bytes": "host-side padding copies (not kernel traffic)",
    "exposed_dma_waits": "DMA waits not overlapped with compute",
    "flops": "MXU flops of the contractions (block-shaped)",
    "vmem_bytes": "the plan's VMEM estimate (largest call)",
    "vmem_limit_bytes": "the vmem_limit_bytes the plan sets (largest; none: the scoped default)",
    "modelled_seconds": "the TPU cost model's time for the chip (a model, not a measurement)",
    "modelled_breakdown": "the model's terms (autotune/cost_model.py)",
}


def schedule_report(kernel, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None,
                    chip: str | None = None, **config_kwargs: Any) -> dict[str, Any]:
    """The schedule of `kernel` for `args` under the given config (default: the one a
    call runs), counted on the host: the keys of `FIELDS`, plus `config` and `chip`
    (the TPU generation planned and modelled: `chip`, else `PALLASITE_TPU_CHIP`, else
    the attached TPU's, else v7x)."""
    bound = kernel.bind(tuple(args), dict(kwargs or {}))
    given = Config(**config_kwargs) if config_kwargs else None
    if bound.dynamic:
        # static_shapes=False: one bound kernel serves a bucket of sizes; report the plan
        # at these arguments' sizes, with the config a call at them runs (compile_config
        # decides it, and generates the variant's code; nothing runs)
        sizes = bound.sizes_of(tuple(args), dict(kwargs or {}))
        config = bound.compile_config(given, sizes).config
        plan = bound.plan(config, chip=chip, specs=specs_at(bound.specs, sizes), resolved=True)
    else:
        sizes = {}
        config = bound.resolve_config(given)
        plan = bound.plan(config, chip=chip)

    def number(value: Any) -> Any:
        """A count of the plan at these arguments: a dynamic plan's are `SymbolicSize`s,
        whose formula is evaluated at these sizes (their int is the bucket's representative)."""
        return evaluate(value.expr, sizes) if isinstance(value, SymbolicSize) else value
    tables = plan_tables(kernel, bound, plan, args, kwargs or {})
    counts = [count_call(call, tables, mxu_figures(plan.chip)) for call in plan.calls]
    metrics = schedule_metrics(plan, tables, counts)
    modelled = estimate_plan(plan, tables, counts) if metrics.hbm_bytes is not None else None
    return {
        "pallas_calls": len(plan.calls),
        "grid_programs": sum(c.programs for c in counts),
        "grid_steps": sum(c.grid_steps for c in counts),
        "inner_tiles": sum(c.inner_tiles for c in counts),
        "max_program_tiles": max((c.max_program_tiles for c in counts), default=0),
        "hbm_bytes": number(metrics.hbm_bytes),
        "min_hbm_bytes": number(metrics.min_hbm_bytes),
        "host_pad_bytes": number(metrics.host_padding_bytes),
        "exposed_dma_waits": metrics.exposed_dma_waits,
        "flops": sum(c.flops for c in counts),
        "vmem_bytes": max((number(call.vmem_bytes) for call in plan.calls), default=0),
        "vmem_limit_bytes": max((call.vmem_limit_bytes for call in plan.calls
                                 if call.vmem_limit_bytes is not None), default=None),
        "modelled_seconds": None if modelled is None else modelled.seconds,
        "modelled_breakdown": None if modelled is None else dict(modelled.breakdown),
        "chip": plan.chip,
        "config": dict(config),
    }


def format_report(title: str, report: Mapping[str, Any]) -> str:
    """The report as a two-column table (bytes also in MiB)."""
    rows = [(key, _text(key, report[key]), FIELDS[key]) for key in FIELDS]
    rows.append(("config", repr(report["config"]), "the resolved config"))
    width = max(len(r[0]) for r in rows)
    value_width = max(len(r[1]) for r in rows[:-1])
    lines = [title, "-" * len(title)]
    for key, text, what in rows:
        if key == "config":
            lines.append(f"{key:<{width}}  {text}")
        else:
            lines.append(f"{key:<{width}}  {text:>{value_width}}  {what}")
    return "\n".join(lines)


def _text(key: str, value: Any) -> str:
    if value is None:
        return "none" if key == "vmem_limit_bytes" else "unknown"
    if key == "modelled_seconds":
        return f"{value * 1e3:.3f} ms (model)"
    if key == "modelled_breakdown":
        return " ".join(f"{name} {seconds * 1e6:.1f}us" for name, seconds in value.items())
    if key.endswith("_bytes") and value >= 2 ** 20:
        return f"{value} ({value / 2 ** 20:.1f} MiB)"
    return str(value)
