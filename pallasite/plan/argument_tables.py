"""The values a plan's schedule reads for one call's arguments: each argument symbol's
tensor or scalar, plus each flattened worklist's item tables as its host function
builds them. The schedule report (report.py) and the cost model (autotune/cost_model.py)
both evaluate a plan on these; one definition, below both."""
from __future__ import annotations

from ..ir import ScalarSymbol, TensorSymbol
from .worklists import worklist_tables


def plan_tables(kernel, bound, plan, args, kwargs) -> dict:
    """The values the schedule of `plan` reads for these arguments: the argument tables,
    plus each flattened worklist's item tables as its host function builds them."""
    tables = argument_tables(kernel, bound, plan.ir.arguments, args, kwargs)
    for call in plan.calls:
        if call.worklist is not None:
            tables.update(worklist_tables(call.worklist, tables))
    return tables


def argument_tables(kernel, bound, symbols: list, args, kwargs) -> dict:
    """Each argument symbol (parameters, then captured tensors) to its value."""
    values = kernel.bind_arguments(tuple(args), dict(kwargs))
    captured = kernel.captured_tensors(args, kwargs)
    values += [captured[name] for name in bound.captured]
    return {symbol: value for symbol, value in zip(symbols, values)
            if isinstance(symbol, (TensorSymbol, ScalarSymbol))}
