"""`if` statements inside device loops.

An `if` whose condition is a host value (an int, a shape, a constant) picks
its branch while tracing. One whose condition is a device scalar (a loaded
element, a reduction, a tile attribute compared with a loaded value, and
`and`/`or`/`not` of those) is traced into an `IfBlock`: both branches are
traced once, and each name the code after the `if` reads is merged from the
two branches (or from one branch and its value before the `if`), as an inner
loop's carried values are.
"""
from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

import torch

from .. import exc
from ..ir import IfBlock, Merged, Value
from . import source
from .proxies import DeviceTensor, HostScalar, _Traced

if TYPE_CHECKING:
    from .tracer import Tracer

_MISSING = object()


def evaluate_condition(tracer: Tracer, expr: ast.expr, stmt: ast.stmt) -> Any:
    """An `if`'s condition: a host value, or a traced one where any part is traced.

    `and`/`or`/`not` call `bool()` on their operands in Python, which a traced
    value cannot answer while tracing; here a traced operand is combined with
    `torch.logical_and/or/not` and host operands keep Python's short-circuit."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        operand = evaluate_condition(tracer, expr.operand, stmt)
        if isinstance(operand, _Traced):
            with tracer._user_code():
                return torch.logical_not(_as_bool(tracer, operand, stmt))
        return not operand
    if not isinstance(expr, ast.BoolOp):
        return tracer._evaluate(expr, stmt)
    is_and = isinstance(expr.op, ast.And)
    traced: list = []
    last: Any = None
    for operand_expr in expr.values:
        operand = evaluate_condition(tracer, operand_expr, stmt)
        if isinstance(operand, _Traced):
            traced.append(_as_bool(tracer, operand, stmt))
            continue
        if bool(operand) != is_and:  # a false `and` operand or a true `or` operand decides
            return operand
        last = operand
    if not traced:
        return last
    combine = torch.logical_and if is_and else torch.logical_or
    result = traced[0]
    with tracer._user_code():
        for operand in traced[1:]:
            result = combine(result, operand)
    return result


def _as_bool(tracer: Tracer, value: Any, stmt: ast.stmt) -> Any:
    """A traced condition as a bool scalar (Python's truth: nonzero)."""
    scalar = _condition_value(tracer, value, stmt)
    if scalar.dtype == torch.bool:
        return value
    with tracer._user_code():
        return value != 0


def _condition_value(tracer: Tracer, value: Any, stmt: ast.stmt) -> Value:
    loc = source.location(tracer.filename, stmt)
    if not isinstance(value, (DeviceTensor, HostScalar)):
        raise exc.UnsupportedSyntax(f"An if on {value!r} is not supported.", loc)
    scalar = tracer._device_operand(value)
    if scalar.shape != ():
        raise exc.UnsupportedSyntax(
            f"An if on a device tensor of shape {list(scalar.shape)} is not supported: its condition "
            "must be one scalar (an element, a reduction, a comparison of scalars). For an "
            "elementwise choice use torch.where(condition, a, b).", loc)
    return scalar


def trace_device_if(tracer: Tracer, stmt: ast.If, test: Any) -> None:
    """Record `if <traced test>:` as an `IfBlock` and bind the names it merges."""
    loc = source.location(tracer.filename, stmt)
    condition = _condition_value(tracer, _as_bool(tracer, test, stmt), stmt)
    condition.name = condition.name or "condition"
    assigned = sorted({
        node.id for inner in (*stmt.body, *stmt.orelse) for node in ast.walk(inner)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    })
    before = {name: tracer.scope.get(name, _MISSING) for name in assigned}
    tile_attrs = dict(tracer._tile_attrs)
    block = IfBlock(condition, [], [], loc)
    ends = []
    tracer.enclosing_ifs.append(loc)
    try:
        for statements, body in ((stmt.body, block.then_body), (stmt.orelse, block.else_body)):
            tracer.push_body(body, [])  # an if adds no loop dims
            try:
                tracer._run_device_block(statements)
            finally:
                tracer.pop_body()
            ends.append({name: tracer.scope.get(name, _MISSING) for name in assigned})
            _restore(tracer.scope, before)
            tracer._tile_attrs = dict(tile_attrs)  # attributes read in a branch stay in it
    finally:
        tracer.enclosing_ifs.pop()
    tracer.location = loc
    then_values, else_values = ends
    merged = {}
    for name in assigned:
        value = _merge(name, then_values[name], else_values[name], before[name], block, loc)
        if value is not _MISSING:
            merged[name] = value
    tracer.append_node(block)
    for name, value in merged.items():
        tracer.scope[name] = DeviceTensor(tracer, value) if isinstance(value, Value) else value


def _restore(scope: dict, before: dict) -> None:
    for name, value in before.items():
        if value is _MISSING:
            scope.pop(name, None)
        else:
            scope[name] = value


def _merge(name: str, then_value: Any, else_value: Any, before: Any, block: IfBlock, loc) -> Any:
    """The value `name` holds after the if: a merged device Value, the unchanged value,
    or _MISSING when only one branch defines it (it does not escape the if)."""
    if then_value is else_value:
        return then_value
    if then_value is _MISSING or else_value is _MISSING:
        return _MISSING
    if isinstance(then_value, DeviceTensor) and isinstance(else_value, DeviceTensor):
        then, other = then_value.value, else_value.value
        if then is other:
            return then_value
        if then.shape != other.shape or then.dtype != other.dtype:
            where = "before the if" if else_value is before else "after the other branch"
            raise exc.ShapeMismatch(
                f"'{name}' is {list(then.shape)} {then.dtype} after one branch of the if but "
                f"{list(other.shape)} {other.dtype} {where}; each branch must leave it with the "
                "same shape and dtype.", loc)
        out = Value(then.shape, then.dtype, name)
        block.outputs.append(Merged(name, then, other, out))
        return out
    if not isinstance(then_value, _Traced) and not isinstance(else_value, _Traced):
        try:
            if type(then_value) is type(else_value) and bool(then_value == else_value):
                return then_value
        except Exception:
            pass
    raise exc.UnsupportedSyntax(
        f"'{name}' is assigned a host value in a branch of an if on a device value, and which "
        "branch runs is only known on the device. Make it a device value before the if "
        "(e.g. hl.full([], value, dtype=...)) and assign device values in the branches.", loc)
