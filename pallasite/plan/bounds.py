"""Bounds of every access, checked when a kernel is planned.

Shapes are static, so the range each index form covers is known: a tile
covers [begin, end) of its loop (its partial tail is masked, never past
`end`), a scalar index covers an interval computed from tile begins and ids,
constants and integer arithmetic, and so does a loop bounded by enclosing tiles
(`min(s, tile_q.end)`). An access reaching past its tensor is an
`exc.ShapeMismatch` at the user's line, never NaN or an out-of-bounds block
deep inside the interpreter. Ranges that depend on data (offsets read from
tensors, kernel scalars, indices loaded from tables) are not known here:
`runtime_checks` lists them, and interpret mode checks them when the kernel
runs (`RangeCheck`); so does every gather's index vector.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

from ..ir import (
    FullSlice, GatherIndex, Load, NewAxis, ScalarIndex, ShiftedTile, StaticSlice, Store, TileDim, TileSlice, Value,
    walk_nodes,
)
from .. import exc
from ..ir.index_forms import moved_scatter
from ..ir.sizes import SymbolicSize
from ..ir.intervals import POWERS, SIGNS, Interval, scalar_interval, value_interval
from ..ir.ops import number_refusal, scalar_arithmetic


@dataclass(frozen=True)
class DataDependentRange:
    """An index form of one access whose range only the data decides: a tile of a
    loop with data-dependent bounds (`dim`) or a scalar index computed from data
    or a gather's index vector (`value`, 1-D). Its positions must lie in [0, limit)."""

    node: object  # the Load or Store
    axis: int  # the tensor axis
    limit: int
    message: str  # with `{lo}` and `{hi}` for the values seen
    dim: TileDim | None = None
    value: Value | None = None
    guarded: bool = False  # the access runs under a device `if`: checked there, not before the call


def check_access_bounds(node, guarded: bool = False) -> list[DataDependentRange]:
    """Raise if `node` (a Load or Store) can reach outside its tensor; return the
    index forms whose range depends on data (checked at run time). A scalar index of an
    access a device `if` encloses (`guarded`) that would reach outside is checked at run
    time where the access runs: `if g > 0: x[g - 1, :]` never reads row -1."""
    tensor = node.tensor
    axis = 0
    pending = []
    moved = [item for item in node.index if isinstance(item, ShiftedTile)]
    if moved and isinstance(node, Store) and any(isinstance(item, GatherIndex) for item in node.index):
        raise exc.UnsupportedOperation(
            moved_scatter(access_text(node), moved[0].dim.name, moved[0].offset), node.location)
    for item in node.index:
        if isinstance(item, NewAxis):
            continue
        size = tensor.shape[axis]
        if isinstance(item, TileSlice):
            dim = item.dim
            if isinstance(dim.begin, int) and isinstance(dim.end, int):
                if dim.end > dim.begin and (dim.begin < 0 or dim.end > size):
                    raise _error(node, f"{dim.name} covers [{dim.begin:d}, {dim.end:d})", tensor.name, axis, size)
            elif not _proven_inside(dim, size):
                message = _message(node, f"{_positions(dim)} covers [{{lo}}, {{hi}})", tensor.name, axis, size)
                pending.append(DataDependentRange(node, axis, size, message, dim=dim))
        elif isinstance(item, ShiftedTile):
            _check_shifted(node, item)  # positions outside the tensor read 0: no range to check
        elif isinstance(item, GatherIndex):
            what = "scattered" if isinstance(node, Store) else "gathered"
            window = (" A window x[s:s + n] of computed start s is the index vector s + hl.arange(n): it must "
                      "lie inside the axis (torch would shorten a window past the end; here its length is "
                      "static)." if _is_window(item.value) else "")
            message = _message(node, f"an index in {describe(item.value)} is {{lo}}", tensor.name, axis, size,
                               f"{what} indices must lie in [0, {{limit}}) (they do not wrap).{window}")
            pending.append(DataDependentRange(node, axis, size, message, value=item.value))
        elif isinstance(item, ScalarIndex) and isinstance(item.index, Value):
            interval = scalar_interval(item.index)
            if interval is None:
                message = _message(node, f"{describe(item.index)} is {{lo}}", tensor.name, axis, size,
                                   "indices read from data must lie in [0, {limit}) (they do not wrap).")
                pending.append(DataDependentRange(node, axis, size, message, value=item.index, guarded=guarded))
            elif guarded and (interval[0] < 0 or interval[1] >= size):
                message = _message(node, f"{describe(item.index)} is {{lo}}", tensor.name, axis, size,
                                   "an index must lie in [0, {limit}) where its access runs (it does not wrap).")
                pending.append(DataDependentRange(node, axis, size, message, value=item.index, guarded=True))
            elif interval[0] < 0 or interval[1] >= size:
                what = f"{describe(item.index)} covers [{interval[0]}, {interval[1]}]"
                raise _error(node, what, tensor.name, axis, size)
        axis += 1
    return pending


def proven_inside(index, size) -> bool:
    """Whether the int scalar `index` lies in [0, size) at every step, as planning can tell
    (`scalar_interval`; a data read or a dynamic size never is)."""
    interval = scalar_interval(index)
    return (interval is not None and not isinstance(size, SymbolicSize)
            and interval[0] >= 0 and interval[1] < size)


_INT32 = (-(1 << 31), (1 << 31) - 1)


def check_int32_arithmetic(body: list) -> None:
    """Raise where integer arithmetic on grid indices, tile positions and constants leaves int32
    over the loop's range: device integers are 32-bit and wrap, where torch computes a grid
    index's arithmetic with Python ints (`((g + 3000) * 1000003) % n` differed from torch)."""
    for node in _int_arithmetic(body):
        _check_int32(node, value_interval(node.output))


def scalar_dependent_arithmetic(body: list) -> tuple:
    """The integer arithmetic nodes of `body` whose interval only the runtime int arguments'
    values decide (`(r + g) * 1000003` of an int argument r): checked before each call
    (`check_scalar_arithmetic`), since a value past int32 would wrap on the device."""
    names = {node.args[0].name for node in walk_nodes(body) if not isinstance(node, Load)
             and node.op == "scalar_arg" and node.args[0].dtype == torch.int32}
    known = dict.fromkeys(names, 1)  # any value: whether the interval is known once they are (1: a divisor too)
    return (*(node for node in _int_arithmetic(body)
              if value_interval(node.output) is None and value_interval(node.output, known) is not None),
            *(node for node in walk_nodes(body) if node.op in _CONVERTING and _scalar_operands(node)))


# ops torch converts a number operand into the result's dtype with a check (`torch.where(x8 > 0,
# x8, v)` with v = 300 raises; a fill of full_like, new_full, hl.full): a runtime scalar there is
# checked at each call, by the rule of the torch call the node is (masked_fill's where: its own)
_CONVERTING = ("where", "clamp", "full", "pow")
_COMPOSITE_RULES = ("masked_fill", "threshold")  # a composite's where: the composite's own rule


def _scalar_operands(node) -> list:
    operands = node.args[:1] if node.op == "full" else node.args[1:]  # full(value, [like]): the fill
    return [arg for arg in operands if isinstance(arg, Value) and arg.producer is not None
            and not isinstance(arg.producer, Load) and arg.producer.op == "scalar_arg"]


def _check_converted(node, scalars: Mapping[str, Any]) -> None:
    rule = "full_like" if node.op == "full" else node.composite if node.composite in _COMPOSITE_RULES else node.op
    # masked_fill(x8, m, 300.0) is a float where cast back to x's dtype: x's dtype takes the number
    dtype = node.args[2].dtype if rule == "masked_fill" and isinstance(node.args[2], Value) else node.output.dtype
    for operand in _scalar_operands(node):
        name = operand.producer.args[0].name
        if name not in scalars:
            continue
        bound = "min" if node.op == "clamp" and node.args[1] is operand else "max"  # clamp(x, min, max)
        refusal = number_refusal(rule, scalars[name], dtype, bound)
        if refusal is not None:
            raise exc.UnsupportedDtype(
                f"{name} = {scalars[name]!r}: torch.{rule} of {str(dtype).removeprefix('torch.')} "
                f"refuses the number ({refusal}); pass one the dtype holds, or cast the tensor to a wider dtype.",
                node.location)


def check_scalar_arithmetic(nodes: tuple, scalars: Mapping[str, Any]) -> None:
    """Raise `exc.KernelArgumentError` where the call's int arguments take one of `nodes`
    (`scalar_dependent_arithmetic`) past int32, and `exc.UnsupportedDtype` where a number torch
    converts into a narrower dtype does not fit it."""
    for node in nodes:
        if node.op in _CONVERTING:
            _check_converted(node, scalars)
            continue
        try:
            _check_int32(node, value_interval(node.output, scalars))
        except exc.UnsupportedOperation as err:
            given = ", ".join(f"{name} = {value}" for name, value in sorted(scalars.items()))
            raise exc.KernelArgumentError(f"With {given}: {err.message}", node.location) from None


def _int_arithmetic(body: list):
    for node in walk_nodes(body):
        if isinstance(node, Load) or (scalar_arithmetic(node.op) is None and node.op not in POWERS
                                      and node.op not in SIGNS) or len(node.outputs) != 1:
            continue
        if node.output.dtype == torch.int32:
            yield node


def _check_int32(node, interval: Interval | None) -> None:
    if interval is not None and (interval[0] < _INT32[0] or interval[1] > _INT32[1]):
        raise exc.UnsupportedOperation(
            f"{describe(node.output)} covers [{interval[0]}, {interval[1]}], past int32: device integers are "
            "32-bit and would wrap, where torch computes it exactly. Reduce it before it grows (take the "
            "% of each factor first) or compute in float32.", node.location)


def check_tile_range(body: list, dim: TileDim, low: int, high: int) -> None:
    """Raise if a tile of `dim` in `body`, whose tiles cover [low, high) over every program (a
    folded range evaluated when planning, plan/folded_loops.py), indexes outside a tensor."""
    for node in walk_nodes(body):
        if not isinstance(node, (Load, Store)):
            continue
        items = [item for item in node.index if not isinstance(item, NewAxis)]
        for axis, item in enumerate(items):
            size = node.tensor.shape[axis]
            if isinstance(item, TileSlice) and item.dim is dim and (low < 0 or high > size):
                raise _error(node, f"{dim.name} covers [{low:d}, {high:d})", node.tensor.name, axis, size)


def _check_shifted(node, item: ShiftedTile) -> None:
    """A shifted tile (`x[tile - 3]`) reads or writes aligned runs of a resident axis: its loop
    needs static bounds (tiles that start past a block multiple, `hl.tile(1, m)`, shift by
    that much more)."""
    dim = item.dim
    text = f"{access_text(node)}: {item.text()}"
    if not (isinstance(dim.begin, int) and isinstance(dim.end, int)) or isinstance(dim.end, bool):
        raise exc.UnsupportedOperation(
            f"{text}: a shifted tile needs a loop with compile-time bounds (this one is "
            f"hl.tile({describe(dim.begin)}, {describe(dim.end)})); make a bound an argument holds a constant "
            f"of the variant with hl.specialize(...), index with {dim.name}.index + c through a gather, or shift "
            "the loop's range.", node.location)


def indexed_bounds(body: list) -> list[DataDependentRange]:
    """The index operand of every torch.gather node (`OpKind.INDEXED`, also what a subscript
    with several index tensors records): its values must lie in [0, size) of the input's
    axis `dim`, which only the data decides."""
    from ..ir import ops

    pending = []
    for node in walk_nodes(body):
        if node.op in ops.OPS and ops.OPS[node.op].kind is ops.OpKind.INDEXED:
            source, index = node.args
            dim = node.kwargs["dim"]
            named = index
            while named.producer is not None and named.producer.op in ("reshape", "expand") and not named.name:
                named = named.producer.args[0]  # the index as the user wrote it
            interval = value_interval(index)
            if interval is not None and interval[0] >= 0 and interval[1] < int(source.shape[dim]):
                continue  # built from iotas and constants (hl.split's lane gathers): inside by construction
            what = describe(named).replace("{", "{{").replace("}", "}}")
            message = (f"an index in {what} is {{lo}}, but the axis it picks along has {{limit}} positions; "
                       "indices must lie in [0, {limit}): they do not wrap (torch.gather refuses a negative one; "
                       "a subscript would count it from the end: write torch.where(i < 0, i + n, i) for that).")
            pending.append(DataDependentRange(node, dim, source.shape[dim], message, value=index))
    return pending


def _proven_inside(dim: TileDim, size: int) -> bool:
    """Whether a range computed from enclosing tiles (not data) lies in [0, size) for every
    tile: `hl.tile(0, min(s, tile_q.end))`, `max(0, tile_q.begin - 64)`."""
    begin, end = scalar_interval(dim.begin), scalar_interval(dim.end)
    return begin is not None and end is not None and begin[0] >= 0 and end[1] <= size


def _message(node, what: str, tensor: str, axis: int, size: int,
             advice: str = "make the loop's range match the tensor or index it differently.") -> str:
    """A range check's message: `{lo}`/`{hi}` are the values seen and `{limit}` the tensor's
    size at that call (with static_shapes=False, the size the call's arguments have)."""
    text = access_text(node).replace("{", "{{").replace("}", "}}")
    return f"{text}: {what} but {tensor}.size({axis}) is {{limit}}; {advice}"


def _error(node, what: str, tensor: str, axis: int, size: int) -> exc.ShapeMismatch:
    return exc.ShapeMismatch(_message(node, what, tensor, axis, size).format(limit=int(size)), node.location)


def access_text(node) -> str:
    """`y[tile_m, tile_n]`: the subscript as the user wrote it (roughly)."""
    parts = []
    for item in node.index:
        if isinstance(item, NewAxis):
            parts.append("None")
        elif isinstance(item, TileSlice):
            parts.append(_positions(item.dim))
        elif isinstance(item, FullSlice):
            parts.append(":")
        elif isinstance(item, GatherIndex):
            parts.append(describe(item.value))
        elif isinstance(item, StaticSlice):
            parts.append(f"{item.start}:{item.stop}")
        elif isinstance(item, ShiftedTile):
            parts.append(item.text())
        else:
            parts.append(describe(item.index) if isinstance(item.index, Value) else str(item.index))
    return f"{node.tensor.name}[{', '.join(parts)}]"


def _positions(dim: TileDim) -> str:
    """A tile in a subscript as written: `tile_m`, or `start + tile_m.index` for a moved one."""
    return dim.name if dim.moved_by is None else f"{describe(dim.moved_by)} + {dim.name}.index"


_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "//": 2, "%": 2}  # Python's, of the infix spellings ops have
_ATOM = 3  # a name, a number, a subscript, an attribute


def _infix(node) -> str | None:
    """The infix operator `node` computes on int scalars (`+`, `//`), or None."""
    arithmetic = scalar_arithmetic(node.op) if node is not None else None
    return arithmetic.spelling if arithmetic is not None and arithmetic.infix else None


def describe(operand) -> str:
    """A scalar's expression in the user's terms (`tile_m.begin + 9`, `(me - hop + n) % n`),
    parenthesized by Python's precedence."""
    return _describe(operand)[0]


def _precedence(operand) -> int:
    node = operand.producer if isinstance(operand, Value) else None
    symbol = _infix(node)
    if symbol is not None and not (isinstance(node, Load) and not operand.name):
        return _PRECEDENCE[symbol]
    return _ATOM


def _describe(operand) -> tuple[str, int]:
    """The text and its precedence (operators all associate to the left: a right operand of
    equal precedence keeps its parentheses, `a - (b - c)`)."""
    node = operand.producer if isinstance(operand, Value) else None
    symbol = _infix(node)
    if symbol is not None and _precedence(operand) != _ATOM:
        mine = _PRECEDENCE[symbol]
        left, right = (_text(arg) for arg in node.args[:2])
        if _precedence(node.args[0]) < mine:
            left = f"({left})"
        if _precedence(node.args[1]) <= mine or (isinstance(node.args[1], int) and node.args[1] < 0):
            right = f"({right})"
        return f"{left} {symbol} {right}", mine
    return _text(operand), _ATOM


def _text(operand) -> str:
    if isinstance(operand, Value) and _precedence(operand) != _ATOM:
        return _describe(operand)[0]
    if not isinstance(operand, Value):
        return str(operand)
    node = operand.producer
    if node is None:
        return operand.name or "?"
    if isinstance(node, Load) and not operand.name:
        return access_text(node)
    if node.op in ("tile_begin", "tile_end", "tile_id", "tile_count"):
        dim = node.args[0]
        return dim.name if dim.is_grid and node.op == "tile_begin" else f"{dim.name}.{node.op[5:]}"
    if node.op == "iota" and operand.shape:  # as the user spells it (a window's lanes too)
        start, step, length = node.kwargs["start"], node.kwargs["step"], int(operand.shape[0])
        bounds = [start + step * length] if start == 0 and step == 1 else [start, start + step * length]
        return f"hl.arange({', '.join(map(str, bounds + ([step] if step != 1 else [])))})"
    return operand.name or node.op


def _is_window(value: Value) -> bool:
    """`s + hl.arange(n)`: the index vector of a window of computed start (frontend's
    `computed_window`)."""
    node = value.producer
    return node is not None and not isinstance(node, Load) and node.op == "add" and any(
        isinstance(arg, Value) and arg.producer is not None and arg.producer.op == "iota" for arg in node.args[:2])
