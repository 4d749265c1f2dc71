"""Symbolic sizes for `static_shapes=False`: an int that remembers its formula.

A dynamic dimension of a kernel argument (size >= 2) is traced as a
`SymbolicSize`: an `int` holding a representative value (so every analysis
runs unchanged) plus the expression that computed it from the argument sizes
(`x_size1`, `(x_size1 + 127) // 128`). Arithmetic keeps the expression;
codegen renders it (`repr`, `str`, f-strings), so the generated module reads
its sizes at run time instead of baking the representative in.

Every comparison a stage makes on a symbolic size (`has_partial_tail`, a
VMEM estimate against the limit, `min(extent, 128)`) is a decision valid only
for sizes that compare the same way: it is recorded as a `Guard` while a
variant is built, and a call whose sizes break a guard builds a new variant.
A value that leaves the formula (`int(...)`, a meta tensor's shape) is a
plain int; the runtime finds such leaks by generating the code at a second
size and comparing (see `runtime/dynamic.py`).
"""
from __future__ import annotations

import contextlib
import operator
from dataclasses import dataclass, field
from typing import Any, Iterator

_OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
              "%": operator.mod, "max": max}
_COMPARISONS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
                ">": operator.gt, ">=": operator.ge}


@dataclass(frozen=True)
class SizeVar:
    """A leaf: axis `axis` of argument `tensor`, named `name` in generated code."""

    name: str


@dataclass(frozen=True)
class SizeOp:
    op: str
    left: Any  # SizeVar | SizeOp | int
    right: Any


def broadcast_shape(*shapes: tuple) -> tuple:
    """torch's broadcast of `shapes`; ValueError if they do not broadcast. (torch's own
    broadcast_shapes imports sympy on its first call, ~0.3 s of a kernel's first call.)"""
    rank = max((len(shape) for shape in shapes), default=0)
    padded = [(1,) * (rank - len(shape)) + tuple(shape) for shape in shapes]
    result = []
    for axis, sizes in enumerate(zip(*padded)):
        wide = [size for size in sizes if not (isinstance(size, int) and size == 1)]
        if any(size != wide[0] for size in wide):
            raise ValueError(f"shapes {', '.join(str(list(s)) for s in shapes)} do not broadcast (axis {axis})")
        result.append(wide[0] if wide else 1)
    return tuple(result)


def render(expr: Any) -> str:
    if isinstance(expr, SizeVar):
        return expr.name
    if isinstance(expr, SizeOp):
        inner = expr.left
        if (expr.op == "neg" and isinstance(inner, SizeOp) and inner.op == "//"
                and isinstance(inner.left, SizeOp) and inner.left.op == "neg"):
            return f"pl.cdiv({render(inner.left.left)}, {render(inner.right)})"  # -(-a // b)
        if expr.op == "neg":
            return f"-{_wrapped(expr.left)}"
        if expr.op == "max":
            return f"max({render(expr.left)}, {render(expr.right)})"
        return f"{_wrapped(expr.left)} {expr.op} {_wrapped(expr.right)}"
    return repr(int(expr))


def _wrapped(expr: Any) -> str:
    text = render(expr)
    return f"({text})" if isinstance(expr, SizeOp) or (isinstance(expr, int) and expr < 0) else text


def evaluate(expr: Any, env: dict[str, int]) -> int:
    if isinstance(expr, SizeVar):
        return env[expr.name]
    if isinstance(expr, SizeOp):
        if expr.op == "neg":
            return -evaluate(expr.left, env)
        return _OPERATORS[expr.op](evaluate(expr.left, env), evaluate(expr.right, env))
    return int(expr)


@dataclass(frozen=True)
class Guard:
    """`left op right` was `outcome` when the variant was built."""

    left: Any
    op: str
    right: Any
    outcome: bool
    requested: bool = field(default=False, compare=False)  # by hl.specialize: nothing to warn about

    def holds(self, env: dict[str, int]) -> bool:
        return _COMPARISONS[self.op](evaluate(self.left, env), evaluate(self.right, env)) == self.outcome


_recorders: list[list[Guard]] = []


@contextlib.contextmanager
def recording_guards() -> Iterator[list[Guard]]:
    """Collect the guards of every comparison on a symbolic size inside the block."""
    guards: list[Guard] = []
    _recorders.append(guards)
    try:
        yield guards
    finally:
        _recorders.remove(guards)


def _expr(value: Any) -> Any:
    return value.expr if isinstance(value, SymbolicSize) else int(value)


def is_int(value: Any) -> bool:
    """An int or a size (a `SymbolicSize` under static_shapes=False), not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


class SymbolicSize(int):
    """An int (the representative size) with the formula that computed it."""

    expr: Any

    def __new__(cls, value: int, expr: Any) -> SymbolicSize:
        obj = super().__new__(cls, value)
        obj.expr = expr
        return obj

    @classmethod
    def variable(cls, name: str, value: int) -> SymbolicSize:
        return cls(value, SizeVar(name))

    def __repr__(self) -> str:
        return render(self.expr)

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return render(self.expr) if not spec else format(int(self), spec)

    def __hash__(self) -> int:
        return int.__hash__(self)

    def __reduce__(self):
        return (SymbolicSize, (int(self), self.expr))

    def _binary(self, other: Any, op: str, reflected: bool = False) -> Any:
        if not is_int(other):
            return NotImplemented
        left, right = (other, self) if reflected else (self, other)
        value = _OPERATORS[op](int(left), int(right))
        if not isinstance(right, SymbolicSize) and (op in "+-" and right == 0 or op in ("*", "//") and right == 1):
            return left  # x + 0, x * 1: keep the formula short
        if not isinstance(left, SymbolicSize) and (op == "+" and left == 0 or op == "*" and left == 1):
            return right
        return SymbolicSize(value, SizeOp(op, _expr(left), _expr(right)))

    def __add__(self, o): return self._binary(o, "+")
    def __radd__(self, o): return self._binary(o, "+", True)
    def __sub__(self, o): return self._binary(o, "-")
    def __rsub__(self, o): return self._binary(o, "-", True)
    def __mul__(self, o): return self._binary(o, "*")
    def __rmul__(self, o): return self._binary(o, "*", True)
    def __floordiv__(self, o): return self._binary(o, "//")
    def __rfloordiv__(self, o): return self._binary(o, "//", True)
    def __mod__(self, o): return self._binary(o, "%")
    def __rmod__(self, o): return self._binary(o, "%", True)

    def _pinned(self, name: str, *args: Any) -> Any:
        """An operation without a formula (bit tricks, powers, true division): the result is
        right for this exact size only, so the variant is guarded to it."""
        return getattr(int, name)(pin(self), *(pin(a) for a in args))

    def __and__(self, o): return self._pinned("__and__", o)
    def __rand__(self, o): return self._pinned("__rand__", o)
    def __or__(self, o): return self._pinned("__or__", o)
    def __ror__(self, o): return self._pinned("__ror__", o)
    def __xor__(self, o): return self._pinned("__xor__", o)
    def __lshift__(self, o): return self._pinned("__lshift__", o)
    def __rshift__(self, o): return self._pinned("__rshift__", o)
    def __pow__(self, o, m=None): return self._pinned("__pow__", o)
    def __truediv__(self, o): return self._pinned("__truediv__", o)
    def __rtruediv__(self, o): return self._pinned("__rtruediv__", o)
    def __divmod__(self, o): return self._pinned("__divmod__", o)
    def bit_length(self): return self._pinned("bit_length")

    def __neg__(self):
        return SymbolicSize(-int(self), SizeOp("neg", self.expr, None))

    def __pos__(self):
        return self

    def _compare(self, other: Any, op: str) -> Any:
        if not is_int(other):
            return NotImplemented
        outcome = _COMPARISONS[op](int(self), int(other))
        guard = Guard(self.expr, op, _expr(other), outcome)
        for guards in _recorders:
            guards.append(guard)
        return outcome

    def __eq__(self, o): return self._compare(o, "==")
    def __ne__(self, o): return self._compare(o, "!=")
    def __lt__(self, o): return self._compare(o, "<")
    def __le__(self, o): return self._compare(o, "<=")
    def __gt__(self, o): return self._compare(o, ">")
    def __ge__(self, o): return self._compare(o, ">=")

    def __bool__(self) -> bool:
        return self._compare(0, "!=")


def pin(value: Any, requested: bool = False) -> Any:
    """A plain int for a value that must be a compile-time constant (`hl.specialize` of a
    size: `requested`, a number written where no size variable is defined); the variant is
    guarded to it."""
    if not isinstance(value, SymbolicSize):
        return value
    guard = Guard(value.expr, "==", int(value), True, requested)
    for guards in _recorders:
        guards.append(guard)
    return int(value)


def size_max(a: int, b: int) -> int:
    """`max(a, b)` that stays a formula (no guard) when either is a symbolic size."""
    if not isinstance(a, SymbolicSize) and not isinstance(b, SymbolicSize):
        return max(a, b)
    if same_size(a, b):
        return a
    return SymbolicSize(max(int(a), int(b)), SizeOp("max", _expr(a), _expr(b)))


def exact_quotient(a: Any, b: Any) -> Any:
    """`a // b` when b divides a for every size, else None, without a guard: plain ints that
    divide, the same formula (1), or a product with b among its factors (`x_size0 * x_size1`
    by `x_size1`: `x_size0`)."""
    if not is_int(a) or not is_int(b) or int(b) == 0:
        return None
    if not isinstance(a, SymbolicSize) and not isinstance(b, SymbolicSize):
        return a // b if a % b == 0 else None
    quotient = _quotient_expr(_expr(a), _expr(b))
    if quotient is None or isinstance(quotient, int):
        return quotient
    return SymbolicSize(int(a) // int(b), quotient)


def _quotient_expr(a: Any, b: Any) -> Any:
    if a == b:
        return 1
    if isinstance(b, int) and b == 1:
        return a
    if isinstance(a, int):
        return a // b if isinstance(b, int) and a % b == 0 else (0 if a == 0 else None)
    if isinstance(a, SizeOp) and a.op == "*":
        for factor, other in ((a.left, a.right), (a.right, a.left)):
            quotient = _quotient_expr(factor, b)
            if quotient is not None:
                return other if quotient == 1 else 0 if quotient == 0 else SizeOp("*", quotient, other)
    return None


def same_shape(a: tuple, b: tuple) -> bool:
    """Whether two shapes are equal: ranks first (a tuple compares items before lengths),
    then each size, the same formula without a guard, other sizes compared (a guard)."""
    return len(a) == len(b) and all(same_size(x, y) or x == y for x, y in zip(a, b))


def keep_symbolic(shape: tuple, sources: list) -> tuple:
    """`shape` (from a torch meta tensor: plain ints) with the symbolic size of each axis put
    back from the source shapes whose axis is at the same position counted from the right
    (an elementwise op's operands, a view's requested sizes) and has the same value. A
    symbolic size is at least 2, so it never sizes a broadcast axis: the position decides."""
    out = list(shape)
    for source in sources:
        if not isinstance(source, tuple):
            continue
        for position, extent in enumerate(source):
            axis = len(out) - len(source) + position
            if (isinstance(extent, SymbolicSize) and axis >= 0 and not isinstance(out[axis], SymbolicSize)
                    and out[axis] == int(extent)):
                out[axis] = extent
    return tuple(out)


def same_size(a: Any, b: Any) -> bool:
    """Whether two sizes are the same formula (true for every size, so no guard)."""
    return isinstance(a, SymbolicSize) and isinstance(b, SymbolicSize) and a.expr == b.expr


def dynamic_sizes(arguments: list) -> list[tuple[str, str, int]]:
    """(size name, argument name, axis) of every symbolic size in the arguments' shapes:
    the values the generated host function reads from its inputs' shapes."""
    found = []
    for argument in arguments:
        for axis, extent in enumerate(getattr(argument, "shape", ()) or ()):
            if isinstance(extent, SymbolicSize) and isinstance(extent.expr, SizeVar):
                found.append((extent.expr.name, argument.name, axis))
    return found
