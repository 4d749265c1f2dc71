"""The op registry (`pallasite/ir/ops`) and the stages that read it agree.

Every op the frontend can record is defined once; each has exactly one
lowering — a `RULES` entry, or the kernel emitter's own rule if it is
structural — and every torch spelling rewrites to its op where it is defined.
"""
from __future__ import annotations

import ast
import dataclasses
from types import SimpleNamespace
from pathlib import Path

import pytest

import torch
import torch.nn.functional as F

import pallasite
import pallasite.language as hl
from pallasite.codegen.kernel import STRUCTURAL_RULES
from pallasite.codegen.structural import STATEMENT_RULES
from pallasite.codegen.remote import REMOTE_STATEMENTS
from pallasite.codegen import reduction_loops as looped_codegen
from pallasite.codegen.lowering import RULES, Arg, OpCall, lower, runtime_imports
from pallasite.codegen.runtime_imports import RUNTIME_IMPORTS
from pallasite.frontend import torch_names
from pallasite.ir import ops, walk_nodes
from pallasite.ir.ops import OpKind
from pallasite.plan.index_expr import BinaryOp


def _structural() -> set[str]:
    return {name for name, op in ops.OPS.items() if op.kind is OpKind.STRUCTURAL}


def test_every_op_has_exactly_one_lowering():
    lowered, structural = set(RULES), _structural()
    assert lowered.isdisjoint(structural)
    assert lowered | structural == set(ops.OPS), (
        f"defined without a lowering: {sorted(set(ops.OPS) - lowered - structural)}; "
        f"lowered but not defined: {sorted(lowered - set(ops.OPS))}"
    )
    # structural ops are the emitter's own: values (STRUCTURAL_RULES), statements (STATEMENT_RULES:
    # hl.device_print) or remote-copy statements
    assert set(STRUCTURAL_RULES).isdisjoint(REMOTE_STATEMENTS)
    assert set(STATEMENT_RULES).isdisjoint(set(STRUCTURAL_RULES) | set(REMOTE_STATEMENTS))
    assert set(STRUCTURAL_RULES) | set(REMOTE_STATEMENTS) | set(STATEMENT_RULES) == structural


def test_every_spelling_is_reachable():
    """A spelling is a torch callable, an op's Python operator, or Python's subscript of a
    device value (`getitem`); anything else would be dead."""
    owners = (torch, torch.Tensor, F, torch.special)
    callables = {name for name in ops.SPELLINGS if any(callable(getattr(o, name, None)) for o in owners)}
    operators = {op.name for op in ops.OPS.values() if op.operator is not None}
    assert set(ops.SPELLINGS) - callables - operators == {"getitem"}
    assert set(ops.SPELLINGS).isdisjoint(ops.FACTORIES)


def test_shape_rules_take_the_signatures_names():
    """A torch keyword (`torch.pow(x, exponent=2)`, `torch.maximum(x, other=y)`) reaches the
    op's own shape rule by its signature's name, so the rule must take that name."""
    import inspect
    for name, op in ops.OPS.items():
        if op.meta is None or op.meta is torch.where:
            continue
        parameters = inspect.signature(op.meta).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            continue
        names = [*op.signature.operands, *op.signature.attrs]
        assert set(names) <= set(parameters), f"{name}: its shape rule takes {list(parameters)}, not {names}"


def test_composites_are_torch_functions_and_no_op():
    """A composite (softmax) is recorded as registry ops, so it is a spelling of no op."""
    for spelling in ops.COMPOSITES:
        assert torch_names.callables_of(spelling), spelling
    assert set(ops.COMPOSITES).isdisjoint(set(ops.SPELLINGS) | set(ops.FACTORIES) | set(ops.OPS))


def _imported_packages(package: Path) -> set[str]:
    """The pallasite packages that modules under `package` import (relative imports)."""
    found = set()
    for path in package.rglob("*.py"):
        depth = len(path.relative_to(package.parent).parts) - 1  # ir/ops/x.py: 2
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level > depth:
                names = [node.module] if node.module else [alias.name for alias in node.names]
                found.update(name.split(".")[0] for name in names)
    return found


def test_the_registry_stays_inside_its_stage():
    """`ir/` holds the registry without reaching into later stages (or the frontend)."""
    root = Path(pallasite.__file__).parent
    assert _imported_packages(root / "ir").isdisjoint({"frontend", "plan", "codegen", "runtime"})
    assert "codegen" not in _imported_packages(root / "plan")


def test_kind_payloads():
    for op in ops.OPS.values():
        assert (op.elementwise is not None) == (op.kind is OpKind.ELEMENTWISE), op.name
        assert (op.reduction is not None) == (op.kind is OpKind.REDUCTION), op.name
        assert (op.contraction is not None) == (op.kind is OpKind.CONTRACTION), op.name
        assert (op.view is not None) == (op.kind is OpKind.VIEW), op.name
    assert ops.OPS["mean"].reduction.averages
    assert ops.OPS["amax"].reduction.identity == float("-inf")
    assert ops.OPS["addmm"].contraction == ops.Contraction(lhs=1, rhs=2, addend=0)
    assert {attr: op.name for attr, op in ops.TILE_ATTRIBUTES.items()} == {
        "begin": "tile_begin", "end": "tile_end", "index": "tile_index", "id": "tile_id",
        "count": "tile_count",
    }


@pytest.mark.parametrize("payload", [ops.Elementwise, ops.Reduction, ops.ScalarArithmetic])
def test_every_op_states_every_fact(payload):
    """A kind's facts have no defaults: every entry of that kind states each one (its
    payload is required by `OpDef`), so no stage keeps a table of op names and no fact of a
    new op is silently a default."""
    for field in dataclasses.fields(payload):
        assert field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING, field.name


def test_reduction_facts_agree():
    for op in ops.OPS.values():
        if op.reduction is None:
            continue
        facts = op.reduction
        # the index a pick returns is carried by an argmax/argmin partial; an average adds partials
        arg_partials = (ops.Partials.ARGMAX, ops.Partials.ARGMIN)
        assert facts.partials is None or facts.flat_index == (facts.partials in arg_partials), op.name
        assert not facts.averages or facts.partials in (None, ops.Partials.ADD), op.name
        assert not facts.flat_index or facts.accumulator is ops.Accumulator.SOURCE, op.name
    chunked = {op.reduction.partials for op in ops.OPS.values() if op.reduction and op.reduction.partials}
    # every kind of partial a reduction states has a way to be written for a chunk loop
    assert chunked == set(ops.Partials)
    assert set(looped_codegen._PARTIAL) | set(looped_codegen._ARG) | set(looped_codegen._LOGICAL) == set(ops.Partials)
    assert set(looped_codegen._COMBINE) == set(looped_codegen._PARTIAL)


def test_scalar_arithmetic_agrees_with_python_and_torch():
    """An op's `Elementwise.scalar` (every elementwise entry states it, None or not) is the
    one home of "this op is integer arithmetic on scalars": its Python spelling, its
    function and the torch op compute the same on ints of either sign, and the planner can
    rebuild it in a BlockSpec index map (`BinaryOp` spells the same operators)."""
    pairs = [(a, b) for a in (-7, -1, 0, 6, 13) for b in (-3, 1, 4)]
    arithmetic = {name: op.scalar for name, op in ops.OPS.items() if op.scalar is not None}
    for name, facts in arithmetic.items():
        for a, b in pairs:
            spelled = f"({a}) {facts.spelling} ({b})" if facts.infix else f"{facts.spelling}({a}, {b})"
            expected = getattr(torch, name)(torch.tensor(a), torch.tensor(b)).item()
            assert facts.function(a, b) == eval(spelled) == expected, (name, a, b)
        assert BinaryOp(facts.spelling).value == facts.spelling
        assert ops.scalar_arithmetic(name) is facts
    assert {"add", "minimum"} <= set(arithmetic)
    assert ops.scalar_arithmetic("load") is None and ops.scalar_arithmetic("div") is None


def _lowered_texts():
    """(op, source dtype, generated text) for every elementwise op and reduction lowered on
    (8, 128) operands of each dtype, with its default attrs; ops whose attrs have no
    default, or that reject the dtype, are left out."""
    for op in ops.OPS.values():
        if op.kind not in (OpKind.ELEMENTWISE, OpKind.REDUCTION) or ops.REQUIRED in op.signature.attrs.values():
            continue
        for dtype in (torch.float32, torch.int32):
            args = [Arg(name, (8, 128), dtype, None) for name in op.signature.operands]
            result = (8, 128) if op.kind is OpKind.ELEMENTWISE else ()
            try:
                yield op.name, dtype, lower(OpCall(op.name, args, dict(op.signature.attrs), result, dtype))
            except (KeyError, TypeError, ValueError, pallasite.exc.PallasiteError):
                continue
    for widths in ((128, 256), (128, 64)):  # torch.cat along lanes: aligned, and built by selects
        args = [Arg(f"x{i}", (8, width), torch.float32, None) for i, width in enumerate(widths)]
        yield "cat", torch.float32, lower(OpCall("cat", args, {"dim": 1}, (8, sum(widths)), torch.float32)), args


def _node(name, dtype, args=None):
    """An IR node as `runtime_imports` reads it: its op, its operands and results."""
    if args is None:
        return SimpleNamespace(op=name, args=[SimpleNamespace(dtype=dtype)] * 2, kwargs={})  # a binary op's two
    width = sum(arg.shape[1] for arg in args)
    return SimpleNamespace(op=name, args=[SimpleNamespace(shape=a.shape, dtype=a.dtype) for a in args],
                           kwargs={"dim": 1}, outputs=[SimpleNamespace(shape=(8, width), dtype=dtype)])


def test_every_runtime_function_a_rule_calls_is_imported():
    """A rule's text calls a `pallasite.runtime` function exactly when its registration
    names it (`rule(..., imports=, when=)`), so the module imports what the code calls."""
    seen = set()
    for name, dtype, text, *args in _lowered_texts():
        node = _node(name, dtype, *args)
        imported = {helper.name for helper in runtime_imports([node])}
        called = {helper.name for helper in RUNTIME_IMPORTS if f"{helper.name}(" in text or f"{helper.name}." in text}
        assert called == imported, (name, dtype, text)
        seen |= called
    assert seen == {helper.name for helper in RUNTIME_IMPORTS}


def test_predicates_return_bool():
    """`Elementwise.predicate` ops are those torch answers with a bool for float operands."""
    x = torch.empty(4, device="meta")
    checked = set()
    for op in ops.OPS.values():
        function = getattr(torch, op.name, None)
        if op.elementwise is None or function is None or op.signature.attrs:
            continue
        try:
            result = function(*([x] * len(op.signature.operands)))
        except (TypeError, RuntimeError):  # integer-only ops, required attrs
            continue
        assert (result.dtype == torch.bool) == op.elementwise.predicate, op.name
        checked.add(op.name)
    assert {name for name, op in ops.OPS.items() if op.elementwise and op.elementwise.predicate} <= checked


@pallasite.kernel
def spelled_many_ways(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([n, m], dtype=torch.float32)
    for tile_m, tile_n in hl.tile([m, n], block_size=[m, 128]):
        v = x[tile_m, tile_n]
        a = v.transpose(0, 1) + v.t() + torch.swapaxes(v, 0, 1) + v.permute(1, 0)
        b = torch.clip(a, -1.0, 1.0).float().type(torch.float32)
        c = b.view(b.shape).contiguous() + b.unsqueeze(0).flatten(0, 1)
        peak, index = torch.max(c, dim=1, keepdim=True)
        out[tile_n, tile_m] = torch.true_divide(c, peak) + index.float() * 0
    return out


def test_spellings_rewrite_to_their_op():
    x = torch.randn(64, 256)
    b = (4 * x.T).clip(-1, 1)
    torch.testing.assert_close(spelled_many_ways(x), b / b.amax(1, keepdim=True))
    (call,) = spelled_many_ways.bind((x,)).plan().calls
    recorded = [node.op for node in walk_nodes(call.call.loop.body)]
    assert recorded.count("permute") == 4  # transpose, t, swapaxes, permute
    assert recorded.count("reshape") == 3  # view, unsqueeze, flatten
    assert recorded.count("to") == 3  # float() twice, type()
    assert {"clamp", "identity", "amax", "argmax", "div"} <= set(recorded)
    assert set(recorded) - {"load", "store"} <= set(ops.OPS)
