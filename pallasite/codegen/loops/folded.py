"""Emit a loop folded into the grid (`outer_pipeline`, `ir.FoldedSteps`): its body once per
program, its carried values kept across the folded steps in VMEM scratch, and the statements
after it at the last folded step (`emit_after_last_step`)."""
from __future__ import annotations

from ...ir import FoldedSteps
from ...plan.loops import FoldedStepsPlan
from .registry import emits
from .steps import read_scratch, write_scratch


@emits(FoldedStepsPlan)
def emit_folded_steps(k, loop: FoldedSteps, loop_plan: FoldedStepsPlan) -> list:
    label = ", ".join(dim.name for dim in loop.folded)
    if not loop.folded:  # no tile at these sizes (plan/folded_loops.py): no step, no grid axis
        k.comment("the folded loop has no tile at these sizes: its carried values keep their initial values")
        return [(item, k.render(item.init)) for item in loop.carried]
    if not loop.carried:
        k.comment(f"the loop over '{label}' folded into the grid: this program's tile")
        k.emit_loop_body(loop)
        return []
    names = ", ".join(f"'{item.name}'" for item in loop.carried)
    k.comment(f"the loop over '{label}' folded into the grid: this program's tile; {names} carried "
              "across its steps in VMEM scratch, set at the first step")
    with k.block(f"@pl.when({_steps_condition(k, loop, last=False)})\ndef {k.names.fresh('_first_step')}():"):
        for item, ref in zip(loop.carried, loop_plan.carried_refs):
            write_scratch(k, ref, item, k.render(item.init))
    carried = []
    for item, ref in zip(loop.carried, loop_plan.carried_refs):
        var = k.names.fresh(item.name)
        k.emit(f"{var} = {read_scratch(ref, item)}")
        k.bind_name(item.param, var)
        carried.append((item, var))
    k.emit_loop_body(loop)
    results = k.carried_results(loop, carried)
    for (item, _), ref, result in zip(carried, loop_plan.carried_refs, results):
        write_scratch(k, ref, item, result)
    # the statements after the loop run at the last step: they read this step's results
    return [(item, result) for (item, _), result in zip(carried, results)]


def emit_after_last_step(k, loop: FoldedSteps, rest: list) -> None:
    """The statements after a folded loop, run at its last step only (a `pl.when` branch)."""
    from ..branches import emit_branch

    label = ", ".join(dim.name for dim in loop.folded)
    k.code.location = None
    k.comment(f"after the loop over '{label}': at its last step, with the values carried to it")
    with k.block(f"@pl.when({_steps_condition(k, loop, last=True)})\ndef {k.names.fresh('_last_step')}():"):
        emit_branch(k, rest, None)


def _steps_condition(k, loop: FoldedSteps, last: bool) -> str:
    """Whether this program is the first (or last) folded step of its outer tile: every
    folded grid axis at its first (last) block."""
    parts = []
    for dim in loop.folded:
        axis = k.plan.grid_axis_of[dim.id]
        bound = k.plan.grid[axis].num_blocks - 1 if last else 0
        parts.append(f"({k.grid_ids[axis]} == {bound})")
    return " & ".join(parts)
