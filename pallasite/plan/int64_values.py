"""Integers torch computes in int64, which device code holds in int32.

A TPU has no 64-bit vectors, so device integers are int32. Where torch's result is int64 —
an integer `sum`/`prod`, `torch.cumsum`/`cumprod`, `.long()`, and the integer arithmetic
that takes such a value on — the kernel's int32 value is torch's number exactly while that
number fits int32, and only then. The frontend marks where torch's result is int64
(`Value.int64`); this pass follows the marks through a device loop (an inner loop's
carried value and an `if`'s merged one included, to a fixed point), ending them where torch
ends them: a cast the user writes to 32 bits or fewer, and `x op= v` of an int32 `x`
(`Node.in_place`: torch keeps x's dtype and wraps, as the kernel does).

Torch's number matters only where a use needs it: `+`, `-`, `*`, sums, bitwise ops,
selections and views give, on operands wrapped to 32 bits, torch's result wrapped, so a value
only they take on to a cast to int32, an int32 store or `h & 1023` is torch's answer past
int32 too (a hash, a checksum). `_needed_values` finds, backwards to a fixed point, the marked
values a comparison, division, index, float cast or int64 store needs. Each such value made
by an op that can leave int32 from operands inside it (+, -, *, neg, abs, **, <<, //, the
sums and products) is a `RangeCheck` with `recompute`: interpret mode
recomputes the op exactly from its operands (which the checks before it proved equal to
torch's) on their valid lanes, just before it runs, and a number past int32 makes the call
raise `exc.ShapeMismatch` at the user's line, as reference mode does. An op planning
proves inside int32 (a sum of bools or int8 values, iota lanes) has no check; a TPU does
not check. A marked integer into an op without an exact recomputation here (a matmul of
int64 values) is refused (`exc.UnsupportedDtype`), never wrapped silently.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterator

import torch

from .. import exc
from ..ir import IfBlock, Load, Node, Store, TileLoop, Value, operand_leaves, ops, walk_nodes
from ..ir.exact_ints import EXACT, SATURATED_USE, drops_wrap, needing_use, passes_wrapped, past_int32
from ..ir.intervals import value_interval
from .bounds import describe
from .plans import RangeCheck

_INT32 = torch.iinfo(torch.int32)

# Ops that can leave int32 from operands inside it: interpret mode recomputes them exactly
RECOMPUTED = frozenset(EXACT)
# Ops whose integer result lies within the values of its operands (or is a position, a count)
_BOUNDED = frozenset({"maximum", "minimum", "where", "clamp", "remainder", "fmod", "sign", "relu", "relu6",
                      "hardtanh", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_right_shift",
                      "round", "trunc", "floor", "ceil", "nan_to_num", "pos", "to", "amax", "amin", "argmax",
                      "argmin", "gather", "full", "copysign", "sort", "topk"})


def int64_checks(body: list, check_ids: Iterator[int], padded: dict) -> tuple[RangeCheck, ...]:
    """One check per op of `body` that makes a value torch holds in int64 and could leave int32
    (`padded`: the mask planner's padded axes of each value, by id)."""
    checks = []
    for node, (op, operands, attrs), use in _checked(body):
        message = past_int32(_spelling(op, operands, attrs), "{lo}", "{hi}", use)
        message = message.replace("{", "{{").replace("}", "}}").replace("{{lo}}", "{lo}").replace("{{hi}}", "{hi}")
        valid = tuple(tuple(sorted(padded.get(item.id, {}).items())) if isinstance(item, Value) else ()
                      for item in operands)
        checks.append(RangeCheck(next(check_ids), 0, message, node.location, node_id=node.id, guarded=True,
                                 recompute=(op, tuple(sorted(attrs.items()))), operands=tuple(operands),
                                 operand_valid=valid))
    return tuple(checks)


def checked_nodes(body: list) -> set[int]:
    """The ids of the nodes of `body` interpret mode checks (a looped reduction, which never
    computes them whole, must not hold one: plan/reduction_loops.py)."""
    return {node.id for node, _, _ in _checked(body)}


def _checked(body: list) -> Iterator[tuple[Node, tuple, str]]:
    """Each node making a value torch holds in int64 that could leave int32 where a use needs
    torch's number, with its recipe and that use."""
    wide = _wide_values(body)
    if not wide:
        return
    needed = _needed_values(body, wide)
    for node in walk_nodes(body):
        if not _makes_wide_integer(node, wide):
            continue
        if node.output.id not in needed:
            _recipe(node, wide)  # an op with no exact recomputation is refused all the same
            continue
        recipe = _recipe(node, wide)
        if recipe is not None and not _proven(*recipe, node):
            yield node, recipe, needed[node.output.id]


def _makes_wide_integer(node: Node, wide: set[int]) -> bool:
    return len(node.outputs) == 1 and node.output.id in wide and _is_integer(node.output.dtype)


def _recipe(node: Node, wide: set[int]) -> tuple | None:
    """(op, operands, attrs) recomputing the node's result, or None when it needs no check; an
    op that could leave int32 with no exact recomputation is refused."""
    if node.int64_of is not None:  # a composite's result (torch.cumsum): the torch call it is
        op, operands, attrs = node.int64_of
        return op, tuple(operands), dict(attrs)
    wide_operand = any(isinstance(arg, Value) and arg.id in wide for arg in _flat(node.args))
    if node.composite:  # a step of a composite: checked as the composite's result, if at all
        if wide_operand and node.op not in _BOUNDED and not _is_view(node.op) and node.composite not in (
                "cumsum", "cumprod", "masked_fill", "stack"):
            raise _unchecked(node, f"{node.composite} of a value")
        return None
    if saturating_cast(node):  # `.long()` of floats: torch's int64, which a TPU's cast saturates
        return "to", (node.args[0],), {}
    if node.op in _BOUNDED or _is_view(node.op):
        return None
    if node.op not in RECOMPUTED or (node.op == "div" and node.kwargs.get("rounding_mode") is None):
        raise _unchecked(node, node.op)
    return node.op, tuple(node.args), {k: v for k, v in node.kwargs.items() if k in ("alpha", "dim", "keepdim",
                                                                                       "rounding_mode", "value")}


def _unchecked(node: Node, what: str) -> exc.UnsupportedDtype:
    return exc.UnsupportedDtype(
        f"{what}: torch computes it in int64 (from an integer sum, `.long()`, ...), which device integers "
        "cannot hold (TPU has no 64-bit vectors), and pallasite has no exact check of this op; cast the "
        "int64 value to int32 first (`.to(torch.int32)`) or compute in float32.", node.location)


# ------------------------------------------------------------ the marks --


def _wide_values(body: list) -> set[int]:
    """The ids of the values torch holds in int64, to a fixed point (a loop's carried value
    takes the mark its body gives it, and so does an `if`'s merged value)."""
    wide: set[int] = set()
    size = -1
    while size != len(wide):
        size = len(wide)
        _mark(body, wide)
    return wide


def _mark(body: list, wide: set[int]) -> None:
    for item in body:
        if isinstance(item, TileLoop):
            for carried in item.carried:
                if _any_wide(wide, carried.init, carried.result):
                    wide.add(carried.param.id)
            _mark(item.body, wide)
            for carried in item.carried:
                if carried.out is not None and _any_wide(wide, carried.result):
                    wide.add(carried.out.id)
        elif isinstance(item, IfBlock):
            _mark(item.then_body, wide)
            _mark(item.else_body, wide)
            for merged in item.outputs:
                if _any_wide(wide, merged.then_value, merged.else_value):
                    wide.add(merged.out.id)
        elif isinstance(item, Node):
            for out in item.outputs:
                if _is_integer(out.dtype) and (out.int64 or _takes_on(item, wide)):
                    wide.add(out.id)


def _takes_on(node: Node, wide: set[int]) -> bool:
    """Whether torch's result is int64 because an operand is (none of it ends the mark)."""
    if node.op == "to" and node.kwargs.get("written") and node.output.dtype.itemsize <= 4:
        return False  # the user's cast to 32 bits or fewer: torch wraps there too
    if node.in_place:  # `x op= v`: x's dtype
        return bool(node.args) and isinstance(node.args[0], Value) and node.args[0].id in wide
    if isinstance(node, Load):  # a tensor's values, read at positions
        return False
    definition = ops.OPS.get(node.op)
    data = node.args[:1] if definition is not None and definition.kind is ops.OpKind.INDEXED else node.args
    return any(isinstance(arg, Value) and arg.id in wide for arg in _flat(data))


def _any_wide(wide: set[int], *values: Any) -> bool:
    return any(isinstance(v, Value) and v.id in wide for v in values)


# ------------------------------------------------------- needed values --


def saturating_cast(node: Node) -> bool:
    """A cast of floats to an integer dtype: the kernel's value saturates at int32's ends where
    torch's int64 holds the number, so it is never torch's number wrapped (always checked)."""
    return (node.op == "to" and bool(node.args) and isinstance(node.args[0], Value)
            and node.args[0].dtype.is_floating_point and len(node.outputs) == 1 and _is_integer(node.output.dtype))


def _needed_values(body: list, wide: set[int]) -> dict[int, str]:
    """The values torch holds in int64 whose number a use needs, by id, each with that use
    (`exact_ints.needing_use`), to a fixed point: a use needs it unless the op gives, on the
    value wrapped to 32 bits, torch's result wrapped (`exact_ints.passes_wrapped`) and that
    result is not needed in turn (a cast to int32 and an int32 store end it; so does
    `h & 1023`, `exact_ints.drops_wrap`)."""
    needed: dict[int, str] = {node.output.id: SATURATED_USE for node in walk_nodes(body) if saturating_cast(node)}
    size = -1
    while size != len(needed):
        size = len(needed)
        _need(body, wide, needed)
    return {key: use for key, use in needed.items() if key in wide}


def _need(body: list, wide: set[int], needed: dict[int, str]) -> None:
    def add(values: Any, use: str) -> None:
        for value in _values_in(values):
            needed.setdefault(value.id, use)

    for item in reversed(body):
        if isinstance(item, TileLoop):
            for carried in item.carried:
                use = needed.get(carried.param.id) or (needed.get(carried.out.id) if carried.out is not None else None)
                if use is not None:
                    add((carried.init, carried.result), use)
            add([(dim.begin, dim.end) for dim in item.dims], needing_use("bound", None, item.location))
            _need(item.body, wide, needed)
        elif isinstance(item, IfBlock):
            add(item.condition, needing_use("condition", None, item.location))
            for merged in item.outputs:
                if merged.out.id in needed:
                    add((merged.then_value, merged.else_value), needed[merged.out.id])
            _need(item.then_body, wide, needed)
            _need(item.else_body, wide, needed)
        else:
            for value, use in _needing_operands(item, wide, needed):
                needed.setdefault(value.id, use)


def _needing_operands(node: Node, wide: set[int], needed: dict[int, str]) -> Iterator[tuple[Value, str]]:
    """The operands of `node` whose torch number its result needs, with the use needing it."""
    own = needing_use("index", None, node.location)
    yield from ((value, own) for value in _values_in((node.kwargs, getattr(node, "index", ()))))
    if isinstance(node, Store):
        target = node.tensor.caller_dtype or node.tensor.dtype
        if not _is_integer(target) or target.itemsize > 4:  # an int64 or float tensor holds the number
            use = needing_use("store", target, node.location)
            yield from ((value, use) for value in _values_in(node.args))
        return
    if len(node.outputs) == 1 and drops_wrap(node.op, node.args):  # exact from the low 32 bits
        return
    single = len(node.outputs) == 1
    later = needed.get(node.output.id) if single and node.output.id in wide else None
    use = later or needing_use(node.op, node.output.dtype if single else None, node.location)
    for position, operand in enumerate(node.args):
        if later is not None or not (single and passes_wrapped(node.op, position, node.output.dtype)):
            yield from ((value, use) for value in _values_in(operand))


def _values_in(item: Any) -> Iterator[Value]:
    """The Values an operand, index or bound holds (in tuples, dicts and index items; a tile's
    bounds and begin for a tile in a subscript)."""
    for leaf in operand_leaves(item):
        if isinstance(leaf, Value):
            yield leaf
        else:
            yield from _values_in(tuple(getattr(leaf, field.name) for field in dataclasses.fields(leaf)))


# -------------------------------------------------------------- proofs --


def _proven(op: str, operands: tuple, attrs: dict, node: Node) -> bool:
    """Whether planning knows the result inside int32 (a sum of bools, of int8 values)."""
    interval = _result_interval(op, operands, attrs, node.output)
    return interval is not None and _INT32.min <= interval[0] and interval[1] <= _INT32.max


def _result_interval(op: str, operands: tuple, attrs: dict, out: Value) -> tuple[int, int] | None:
    intervals = [_interval(item) for item in operands if not isinstance(item, (tuple, list))]
    if any(i is None for i in intervals) or not intervals:
        return None
    a = intervals[0]
    if op in ("sum", "cumsum"):
        source = operands[0]
        if not all(type(size) is int for size in (*source.shape, *out.shape)):
            return None  # sizes of a bucket (static_shapes=False): no count to bound it by
        count = (math.prod(source.shape) // max(1, math.prod(out.shape)) if op == "sum"
                 else int(source.shape[attrs["dim"]]))
        return count * min(a[0], 0), count * max(a[1], 0)
    if op in ("prod", "cumprod"):
        return (0, 1) if a[0] >= 0 and a[1] <= 1 else None
    if op == "neg":
        return -a[1], -a[0]
    if op == "abs":
        return (0 if a[0] <= 0 <= a[1] else min(abs(a[0]), abs(a[1]))), max(abs(a[0]), abs(a[1]))
    if len(intervals) < 2 or attrs.get("alpha", 1) != 1:
        return None
    b = intervals[1]
    if op == "add":
        return a[0] + b[0], a[1] + b[1]
    if op == "sub":
        return a[0] - b[1], a[1] - b[0]
    if op == "mul":
        corners = [x * y for x in a for y in b]
        return min(corners), max(corners)
    return None


def _interval(item: Any) -> tuple[int, int] | None:
    """The values an integer operand can take where planning knows them."""
    if isinstance(item, bool):
        return int(item), int(item)
    if isinstance(item, int):
        return item, item
    if not isinstance(item, Value):
        return None
    if item.dtype == torch.bool:
        return 0, 1
    if item.dtype in (torch.int8, torch.uint8, torch.int16):
        info = torch.iinfo(item.dtype)
        return info.min, info.max
    node = item.producer
    if node is not None and node.op == "to" and node.args and isinstance(node.args[0], Value) and not (
            node.args[0].dtype.is_floating_point):
        return _interval(node.args[0])  # a cast of bools or bytes keeps their values
    if node is not None and node.op in ("sum", "cumsum", "add", "sub", "mul", "neg", "abs"):
        inner = _result_interval(node.op, tuple(node.args), dict(node.kwargs), item)
        if inner is not None:
            return inner
    return value_interval(item)


# ------------------------------------------------------------- helpers --


def _spelling(op: str, operands: tuple, attrs: dict) -> str:
    texts = [describe(item) for item in operands]
    extra = [f"{key}={value!r}" for key, value in sorted(attrs.items()) if key not in ("alpha",) or value != 1]
    return f"{op}({', '.join(texts + extra)})"


def _is_view(op: str) -> bool:
    definition = ops.OPS.get(op)
    return definition is not None and definition.kind in (ops.OpKind.VIEW, ops.OpKind.STRUCTURAL)


def _flat(items: Any) -> Iterator[Any]:
    for item in items:
        if isinstance(item, (tuple, list)):
            yield from _flat(item)
        else:
            yield item


def _is_integer(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


__all__ = ["RECOMPUTED", "checked_nodes", "int64_checks"]
