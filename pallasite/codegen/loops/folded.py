"""Emit a loop folded into the grid (`outer_pipeline`, `ir.FoldedSteps`): its body once per
program, its carried values kept across the folded steps in VMEM scratch, and the statements
after it at the last folded step (`emit_after_last_step`)."""
from __future__ import annotations

from ...ir import FoldedSteps
from ...plan.loops import FoldedStepsPlan
from ..inline import value_uses
from ..structural import tile_begin_text
from .registry import emits
from .steps import read_scratch, write_scratch


@emits(FoldedStepsPlan)
def emit_folded_steps(k, loop: FoldedSteps, loop_plan: FoldedStepsPlan) -> list:
    label = ", ".join(dim.name for dim in loop.folded)
    if not loop.folded:  # no tile at these sizes (plan/folded_loops.py): no step, no grid axis
        k.comment("the folded loop has no tile at these sizes: its carried values keep their initial values")
        return [(item, k.render(item.init)) for item in loop.carried]
    skips = _skipping_condition(k, loop)
    said = "" if skips is None else (f"; steps past this program's end of '{label}' skip (their blocks repeat "
                                     "the last one it needs: no copy)")
    if not loop.carried:
        k.comment(f"the loop over '{label}' folded into the grid: this program's tile{said}")
        _emit_step(k, loop, skips, lambda: k.emit_loop_body(loop))
        return []
    names = ", ".join(f"'{item.name}'" for item in loop.carried)
    k.comment(f"the loop over '{label}' folded into the grid: this program's tile; {names} carried "
              f"across its steps in VMEM scratch, set at the first step{said}")
    with k.block(f"@pl.when({_steps_condition(k, loop, last=False)})\ndef {k.names.fresh('_first_step')}():"):
        for item, ref in zip(loop.carried, loop_plan.carried_refs):
            write_scratch(k, ref, item, k.render(item.init))
    outputs = []

    def step() -> None:
        carried = [(item, _read_carried(k, item, ref, item.param)) for item, ref in zip(loop.carried,
                                                                                       loop_plan.carried_refs)]
        k.emit_loop_body(loop)
        results = k.carried_results(loop, carried)
        for (item, _), ref, result in zip(carried, loop_plan.carried_refs, results):
            write_scratch(k, ref, item, result)
        outputs.extend((item, result) for (item, _), result in zip(carried, results))

    _emit_step(k, loop, skips, step)
    # the statements after the loop run at the last step: they read this step's results, or,
    # when that step may skip, the values in scratch (emit_after_last_step)
    return outputs if skips is None else []


def emit_after_last_step(k, loop: FoldedSteps, rest: list) -> None:
    """The statements after a folded loop, run at its last step only (a `pl.when` branch)."""
    from ..branches import emit_branch

    label = ", ".join(dim.name for dim in loop.folded)
    k.code.location = None
    k.comment(f"after the loop over '{label}': at its last step, with the values carried to it")
    with k.block(f"@pl.when({_steps_condition(k, loop, last=True)})\ndef {k.names.fresh('_last_step')}():"):
        if _skipping_condition(k, loop) is not None:  # the last step may have skipped: read what was carried
            read = value_uses(rest)[0]
            for item, ref in zip(loop.carried, k.plan.inner_loops[loop.id].carried_refs):
                if item.out.id in read:
                    _read_carried(k, item, ref, item.out)
        emit_branch(k, rest, None)


def _emit_step(k, loop: FoldedSteps, skips: str | None, emit) -> None:
    """This program's step of the loop body: under `pl.when(skips)` where a step may lie past
    the program's end."""
    if skips is None:
        emit()
        return
    with k.block(f"@pl.when({skips})\ndef {k.names.fresh('_step')}():"):
        emit()


def _read_carried(k, item, ref: str, value) -> str:
    """A variable holding carried `item` read from scratch `ref`, bound to `value`."""
    var = k.names.fresh(item.name)
    k.emit(f"{var} = {read_scratch(ref, item)}")
    k.bind_name(value, var)
    return var


def _skipping_condition(k, loop: FoldedSteps) -> str | None:
    """Whether this program's step lies inside its range of each folded dim whose bounds are
    values of the outer tiles (`plan.call.folded_trips`): its tile starts before the end;
    None when every folded dim has int bounds."""
    parts = []
    for dim in loop.folded:
        if dim.id not in k.plan.call.folded_trips:
            continue
        begin = tile_begin_text(k, dim, k.grid_ids[k.plan.grid_axis_of[dim.id]])
        parts.append(f"({begin} < {k.render(dim.end)})")
    return " & ".join(parts) or None


def _steps_condition(k, loop: FoldedSteps, last: bool) -> str:
    """Whether this program is the first (or last) folded step of its outer tile: every
    folded grid axis at its first (last) block."""
    parts = []
    for dim in loop.folded:
        axis = k.plan.grid_axis_of[dim.id]
        bound = k.plan.grid[axis].num_blocks - 1 if last else 0
        parts.append(f"({k.grid_ids[axis]} == {bound})")
    return " & ".join(parts)
