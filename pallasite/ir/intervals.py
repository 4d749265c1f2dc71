"""What values an integer Value can take, from the IR alone: iotas, tile positions, begins,
ends and ids of static tile loops, ints, and integer arithmetic on them (`value_interval`
for vectors, `scalar_interval` for scalars). The planner's bounds checks, divisors and int64
ranges and the frontend's index forms (a chunk view's tile range) read them; where a call knows
its runtime int arguments, `scalars` gives their values."""
from __future__ import annotations

from typing import Mapping

from .nodes import Load, Value
from .ops import ScalarArithmetic, scalar_arithmetic

Interval = tuple[int, int]  # inclusive


def value_interval(operand, scalars: Mapping[str, int] | None = None) -> Interval | None:
    """The values every element of an int value can take, or None if unknown: iotas, their
    views and integer arithmetic on them and on scalars (`scalar_interval`); `scalars`: the
    values of runtime int arguments, by name, where a call knows them."""
    if not isinstance(operand, Value) or operand.producer is None or isinstance(operand.producer, Load):
        return scalar_interval(operand, scalars)
    node = operand.producer
    if node.op == "iota" and operand.shape and int(operand.shape[0]) > 0:
        start, step = node.kwargs["start"], node.kwargs["step"]
        last = start + step * (int(operand.shape[0]) - 1)
        return min(start, last), max(start, last)
    if node.op in ("reshape", "expand", "identity"):
        return value_interval(node.args[0], scalars)
    if node.op == "tile_index" and node.args[0].static_trips:  # its padding lanes too
        dim = node.args[0]
        return dim.begin, dim.begin + dim.static_trips * dim.block_size - 1
    if node.op == "tile_index" and scalars is not None:  # bounds from runtime ints: a call knows them
        dim = node.args[0]
        begin, end = scalar_interval(dim.begin, scalars), scalar_interval(dim.end, scalars)
        if begin is None or end is None:
            return None
        return begin[0], max(begin[0], end[1]) + dim.block_size - 1  # up to the last tile's padding
    if node.op in POWERS:
        left, right = value_interval(node.args[0], scalars), value_interval(node.args[1], scalars)
        return None if left is None or right is None else POWERS[node.op](left, right)
    if node.op in SIGNS:
        inner = value_interval(node.args[0], scalars)
        return None if inner is None else SIGNS[node.op](inner)
    arithmetic = scalar_arithmetic(node.op)
    if arithmetic is None or node.kwargs.get("alpha", 1) != 1:
        return scalar_interval(operand, scalars)
    exact = _per_tile_interval(operand)  # `tn.end - tn.begin` (a partial tile's size): [5, 16]
    if exact is not None:
        return exact
    left, right = value_interval(node.args[0], scalars), value_interval(node.args[1], scalars)
    if arithmetic.spelling == "%" and right is not None and right[0] == right[1] > 0:
        return 0, right[0] - 1
    if left is None or right is None:
        return None
    return _combine(arithmetic, left, right)


def scalar_interval(operand, scalars: Mapping[str, int] | None = None) -> Interval | None:
    """The values an int scalar can take over every tile of its loops, or None if unknown."""
    if isinstance(operand, bool):
        return None
    if isinstance(operand, int):
        return operand, operand
    if not isinstance(operand, Value) or operand.producer is None:
        return None
    node = operand.producer
    if node.op == "scalar_arg" and scalars is not None and node.args[0].name in scalars:
        value = scalars[node.args[0].name]
        return value, value
    if node.op in ("tile_begin", "tile_id", "tile_end"):
        dim = node.args[0]
        trips = dim.static_trips
        if trips is None or trips == 0:
            return None
        if node.op == "tile_id":
            return 0, trips - 1
        last_begin = dim.begin + (trips - 1) * dim.block_size
        if node.op == "tile_begin":
            return dim.begin, last_begin
        return min(dim.begin + dim.block_size, dim.end), dim.end
    if node.op in POWERS and not isinstance(node, Load):
        left, right = scalar_interval(node.args[0], scalars), scalar_interval(node.args[1], scalars)
        return None if left is None or right is None else POWERS[node.op](left, right)
    if node.op in SIGNS and not isinstance(node, Load):
        inner = scalar_interval(node.args[0], scalars)
        return None if inner is None else SIGNS[node.op](inner)
    arithmetic = scalar_arithmetic(node.op)
    if arithmetic is not None and not isinstance(node, Load):
        if node.kwargs.get("alpha", 1) != 1:
            return None
        exact = _per_tile_interval(operand)
        if exact is not None:
            return exact
        left, right = scalar_interval(node.args[0], scalars), scalar_interval(node.args[1], scalars)
        if arithmetic.spelling == "%" and left is None and right is not None and right[0] == right[1] > 0:
            return 0, right[0] - 1  # floor mod by a positive constant (torch and jnp alike), whatever `left` is
        if left is None or right is None:
            return None
        return _combine(arithmetic, left, right)
    return None


def _power(a: Interval, b: Interval) -> Interval | None:
    """The interval of `x ** y` for ints x in `a`, y in `b` (a negative exponent: unknown)."""
    if b[0] < 0:
        return None
    if b[1] > 64 and max(abs(a[0]), abs(a[1])) > 1:
        return -(1 << 64), 1 << 64  # past int32 either way, without computing the power
    if a[0] >= 1:
        return a[0] ** b[0], a[1] ** b[1]
    if a[0] == 0:
        return (0 if b[1] > 0 else 1), max(1, a[1] ** b[1])
    bound = max(abs(a[0]), abs(a[1])) ** b[1]
    return -bound, bound


def _shift(a: Interval, b: Interval) -> Interval | None:
    """The interval of `x << y` (x * 2 ** y) for y in `b`, non-negative."""
    if b[0] < 0:
        return None
    if b[1] > 64:
        return -(1 << 96), 1 << 96
    corners = [x << y for x in a for y in b]
    return min(corners), max(corners)


# int ops the interval rules follow though no index map computes them (no `ScalarArithmetic`)
POWERS = {"pow": _power, "bitwise_left_shift": _shift}
# -x and |x| (of -2 ** 31: 2 ** 31, past int32)
SIGNS = {"neg": lambda a: (-a[1], -a[0]),
          "abs": lambda a: (0 if a[0] <= 0 <= a[1] else min(abs(a[0]), abs(a[1])), max(abs(a[0]), abs(a[1])))}

_ENUMERATED_TILES = 4096


def _per_tile_interval(operand) -> Interval | None:
    """The exact interval of integer arithmetic on one static tile dim's begin and end (both
    read) and constants, evaluated at each of its tiles: intervals lose that both move together
    (`t.begin + (t.end - t.begin) - 1`, which `v.size(0)` of a tile's value writes, is `t.end - 1`:
    [7, 19], not [-9, 35]). None for any other expression."""
    leaves: dict[str, set] = {}
    if not _tile_leaves(operand, leaves) or len({dim.id for dim in leaves.get("dims", ())}) != 1 \
            or leaves.get("ops") != {"tile_begin", "tile_end"}:
        return None
    (dim,) = {dim.id: dim for dim in leaves["dims"]}.values()
    trips = dim.static_trips
    if not trips or trips > _ENUMERATED_TILES or not isinstance(dim.begin, int) or not isinstance(dim.end, int):
        return None
    values = []
    for step in range(trips):
        begin = dim.begin + step * dim.block_size
        values.append(_evaluate(operand, begin, min(begin + dim.block_size, dim.end)))
    return None if None in values else (min(values), max(values))


def _tile_leaves(operand, leaves: dict) -> bool:
    """Whether `operand` is integer arithmetic on tile begins, ends and ints (recording them)."""
    if isinstance(operand, int) and not isinstance(operand, bool):
        return True
    if not isinstance(operand, Value) or operand.producer is None or isinstance(operand.producer, Load):
        return False
    node = operand.producer
    if node.op in ("tile_begin", "tile_end"):
        leaves.setdefault("dims", []).append(node.args[0])
        leaves.setdefault("ops", set()).add(node.op)
        return True
    if scalar_arithmetic(node.op) is None or node.kwargs.get("alpha", 1) != 1 or operand.shape != ():
        return False
    return all(_tile_leaves(arg, leaves) for arg in node.args[:2])


def _evaluate(operand, begin: int, end: int) -> int | None:
    if isinstance(operand, int):
        return operand
    node = operand.producer
    if node.op in ("tile_begin", "tile_end"):
        return begin if node.op == "tile_begin" else end
    left, right = _evaluate(node.args[0], begin, end), _evaluate(node.args[1], begin, end)
    if left is None or right is None or (scalar_arithmetic(node.op).spelling in ("//", "%") and right == 0):
        return None
    return scalar_arithmetic(node.op).function(left, right)


def _combine(arithmetic: ScalarArithmetic, a: Interval, b: Interval) -> Interval | None:
    """The interval of `x op y` for x in `a`, y in `b`, by the operator's Python spelling."""
    op = arithmetic.spelling
    if op == "+":
        return a[0] + b[0], a[1] + b[1]
    if op == "-":
        return a[0] - b[1], a[1] - b[0]
    if op in ("*", "min", "max"):  # monotone in each operand: the extremes are at corners
        corners = [arithmetic.function(x, y) for x in a for y in b]
        return min(corners), max(corners)
    if op == "//" and b[0] == b[1] and b[0] > 0:
        return a[0] // b[0], a[1] // b[0]
    if op == "%" and b[0] == b[1] and b[0] > 0:
        return (a[0] % b[0], a[1] % b[0]) if a[1] - a[0] < b[0] and a[0] % b[0] <= a[1] % b[0] else (0, b[0] - 1)
    return None
