"""`if` statements inside device loops.

An `if` whose condition is a host value (an int, a shape, a constant) picks
its branch while tracing. One whose condition is a device scalar (a loaded
element, a reduction, a tile attribute compared with a loaded value, and
`and`/`or`/`not` of those) is traced into an `IfBlock`: both branches are
traced once, and each name the code after the `if` reads is merged from the
two branches (or from one branch and its value before the `if`), as an inner
loop's carried values are. A branch may hold tile/grid loops (Helion's grouped GEMM:
`if rows != 0: for tile in hl.tile(...)`): inner loops of the branch's body.
"""
from __future__ import annotations

import ast
import operator
from typing import Any

import torch

from .. import exc
from ..ir import IfBlock, Merged, Value
from .op_recorder import OpRecorder
from .proxies import DeviceTensor, HostScalar, TileProxy, Traced
from .walker import MISSING, StatementWalker, assigned_names, restore


_COMPARISONS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
                ast.Eq: operator.eq, ast.NotEq: operator.ne}


class DeviceIfs:
    """Traces the `if`s of device code: the walker runs the statements, the recorder records."""

    def __init__(self, walker: StatementWalker, recorder: OpRecorder):
        self.walker = walker
        self.recorder = recorder

    def condition(self, expr: ast.expr, stmt: ast.stmt) -> Any:
        """An `if`'s condition: a host value, or a traced one where any part is traced.

        `and`/`or`/`not` call `bool()` on their operands in Python, which a traced
        value cannot answer while tracing; here a traced operand is combined with
        `torch.logical_and/or/not` and host operands keep Python's short-circuit."""
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            return self.negate(self.condition(expr.operand, stmt), stmt)
        if isinstance(expr, ast.Compare) and len(expr.ops) > 1 \
                and all(type(op) in _COMPARISONS for op in expr.ops):  # a <= b < c: (a <= b) and (b < c)
            operands = [self.walker.evaluate(e, stmt) for e in (expr.left, *expr.comparators)]
            with self.walker.user_code():
                pairs = [_COMPARISONS[type(op)](a, b) for op, a, b in zip(expr.ops, operands, operands[1:])]
            return self.combine(pairs, True, stmt)
        if not isinstance(expr, ast.BoolOp):
            return self.walker.evaluate(expr, stmt)
        return self.combine((self.condition(e, stmt) for e in expr.values), isinstance(expr.op, ast.And), stmt)

    def negate(self, operand: Any, stmt: ast.stmt) -> Any:
        """`not operand`: torch.logical_not of a traced one."""
        if isinstance(operand, Traced):
            with self.walker.user_code():
                return torch.logical_not(self._as_bool(operand, stmt))
        return not operand

    def combine(self, operands, is_and: bool, stmt: ast.stmt) -> Any:
        """`and` (or `or`) of operands: host ones keep Python's short-circuit, traced ones are
        combined with torch.logical_and (logical_or)."""
        traced: list = []
        last: Any = None
        for operand in operands:
            if isinstance(operand, Traced):
                traced.append(self._as_bool(operand, stmt))
                continue
            if bool(operand) != is_and:  # a false `and` operand or a true `or` operand decides
                return operand
            last = operand
        if not traced:
            return last
        combine = torch.logical_and if is_and else torch.logical_or
        result = traced[0]
        with self.walker.user_code():
            for operand in traced[1:]:
                result = combine(result, operand)
        return result

    def _as_bool(self, value: Any, stmt: ast.stmt) -> Any:
        """A traced condition as a bool scalar (Python's truth: nonzero)."""
        scalar = self._condition_value(value, stmt)
        if scalar.dtype == torch.bool:
            return value
        with self.walker.user_code():
            return value != 0

    def _condition_value(self, value: Any, stmt: ast.stmt) -> Value:
        loc = self.walker.location_of(stmt)
        if not isinstance(value, (DeviceTensor, HostScalar)):
            raise exc.UnsupportedSyntax(f"An if on {value!r} is not supported.", loc)
        scalar = self.recorder.device_operand(value)
        if scalar.shape != ():
            raise exc.UnsupportedSyntax(
                f"An if on a device tensor of shape {list(scalar.shape)} is not supported: its condition "
                "must be one scalar (an element, a reduction, a comparison of scalars). For an "
                "elementwise choice use torch.where(condition, a, b).", loc)
        return scalar

    def _wrapped(self, value: Any) -> Any:
        """A merged value as the scope holds it: a Value as a device tensor, in a container too."""
        if isinstance(value, Value):
            return DeviceTensor(self.recorder, value)
        if type(value) in (tuple, list):
            return type(value)(self._wrapped(item) for item in value)
        return value

    def trace(self, stmt: ast.If, test: Any) -> None:
        """Record `if <traced test>:` as an `IfBlock` and bind the names it merges."""
        loc = self.walker.location_of(stmt)
        condition = self._condition_value(self._as_bool(test, stmt), stmt)
        condition.name = condition.name or "condition"
        assigned = assigned_names([*stmt.body, *stmt.orelse])
        scope = self.walker.scope
        before = {name: scope.get(name, MISSING) for name in assigned}
        block = IfBlock(condition, [], [], loc)
        ends = []
        for statements, body in ((stmt.body, block.then_body), (stmt.orelse, block.else_body)):
            with self.recorder.branch(body):  # a tile loop in a branch is an inner loop of its body
                self.walker.run_device_block(statements)
            ends.append({name: scope.get(name, MISSING) for name in assigned})
            restore(scope, before)
        self.walker.enter(stmt)
        then_values, else_values = ends
        merged = {}
        for name in assigned:
            if any(isinstance(ends[i][name], TileProxy) for i in (0, 1)):  # a tile loop's variable
                self.walker.scoped_out[name] = (
                    f"'{name}' is the variable of a tile loop inside the if at line {loc.lineno}; after the if it "
                    "has no value (which branch ran is known only on the device).")
                continue
            value = _merge(name, then_values[name], else_values[name], before[name], block, loc)
            if value is not MISSING:
                merged[name] = value
            else:  # assigned in one branch only: unbound after the if
                self.walker.scoped_out[name] = (
                    f"'{name}' is assigned in one branch of the if at line {loc.lineno} only, and which branch "
                    "runs is known only on the device: give it a value before the if or in both branches.")
        self.recorder.append_node(block)
        for name, value in merged.items():
            scope[name] = self._wrapped(value)
            for branch in (then_values[name], else_values[name]):  # `if c: b = a` may make b a
                if self.walker.semantics.is_device_value(branch) and branch is not scope[name]:
                    self.walker.shared.may_be(scope[name], branch)


def _merge(name: str, then_value: Any, else_value: Any, before: Any, block: IfBlock, loc) -> Any:
    """The value `name` holds after the if: a merged device Value, the unchanged value,
    or MISSING when only one branch defines it (it does not escape the if)."""
    if then_value is else_value:
        return then_value
    if then_value is MISSING or else_value is MISSING:
        return MISSING
    if type(then_value) in (tuple, list) and type(then_value) is type(else_value) and len(then_value) == len(
            else_value):  # `st = (b, a)` in a branch: each item merged as a name would be
        befores = before if type(before) is type(then_value) and len(before) == len(then_value) else \
            [MISSING] * len(then_value)
        return type(then_value)(_merge(f"{name}_{i}", then_item, else_item, before_item, block, loc)
                                for i, (then_item, else_item, before_item) in enumerate(
                                    zip(then_value, else_value, befores)))
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
    if not isinstance(then_value, Traced) and not isinstance(else_value, Traced):
        try:
            if type(then_value) is type(else_value) and bool(then_value == else_value):
                return then_value
        except Exception:
            pass
    raise exc.UnsupportedSyntax(
        f"'{name}' is assigned a host value in a branch of an if on a device value, and which "
        "branch runs is only known on the device. Make it a device value before the if "
        "(e.g. hl.full([], value, dtype=...)) and assign device values in the branches.", loc)
