"""Device values two names share, as torch tensors do, and updates torch would make to both.

pallasite's device values are values (as Helion's are): `a += v` makes a new value for `a`.
In torch, `a += v` changes the one tensor every name of it holds, and every view of it
(`col = a[:, 0]`, `a.T`, `a.view(...)`), or the tensor a view `a` is of. So an in-place
update is refused, at the user's line, when another name holds the same value or a view
relation of it and is read later: the two semantics would differ (`b = a; a += 1; ... b`).

`SharedValues` keeps the views the kernel's statements took (`record`: a statement
`col = a[:, 0]` with a basic subscript or a view method of a name holding a device value),
by object, for both modes: reference mode's tensors do not tell views from copies as torch
would (its subscripts copy), so the relation is read from the user's statements.
"""
from __future__ import annotations

import ast
from typing import Any, Callable

from .. import exc

# Tensor methods and attributes whose result is a view of the tensor (or views: split, ...)
VIEW_METHODS = frozenset((
    "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze", "expand",
    "expand_as", "broadcast_to", "permute", "transpose", "swapaxes", "swapdims", "t", "movedim", "moveaxis",
    "narrow", "select", "diagonal", "unbind", "split", "chunk", "tensor_split", "hsplit", "vsplit", "dsplit",
    "ravel", "detach", "contiguous"))
VIEW_ATTRIBUTES = frozenset(("T", "mT", "data"))
# casts, which return the tensor itself when it has the dtype already (`b = a.float()` of float32)
CAST_METHODS = frozenset(("to", "type", "float", "half", "bfloat16", "int", "long", "short", "bool", "double",
                          "type_as"))


class SharedValues:
    """The view relations between device values the kernel's statements took, by object."""

    def __init__(self) -> None:
        self._parents: dict[int, tuple[Any, Any]] = {}  # id(view) -> (view, the value it views)
        self._aliases: dict[int, tuple[Any, list]] = {}  # id(merged) -> (merged, the values it may be)

    def record(self, stmt: ast.stmt, scope: dict[str, Any], is_device: Callable[[Any], bool]) -> None:
        """After `stmt` ran: each name it bound to a view of a name's device value (`col = a[:, 0]`,
        `q, k = a.unbind(1)`, `first, second = a[:, 0], a[:, 1]`)."""
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            return
        target = stmt.targets[0]
        if isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Tuple) and \
                len(target.elts) == len(stmt.value.elts):
            pairs = list(zip(target.elts, stmt.value.elts))
        else:
            pairs = [(name, stmt.value) for name in (target.elts if isinstance(target, ast.Tuple) else [target])]
        for name, value in pairs:
            base, cast = _viewed_name(value)
            if base is None or not isinstance(name, ast.Name) or not is_device(scope.get(base)) \
                    or name.id not in scope or scope[name.id] is scope[base]:
                continue
            view = scope[name.id]
            if not cast or getattr(view, "dtype", None) == getattr(scope[base], "dtype", None):
                self._parents[id(view)] = (view, scope[base])

    def may_be(self, merged: Any, value: Any) -> None:
        """`merged` (a name's value after a device `if`) may be `value` (one branch's): an
        update of one is seen through the other (`if c: b = a`, then `a += 1`)."""
        self._aliases.setdefault(id(merged), (merged, []))[1].append(value)

    def related(self, value: Any, other: Any) -> bool:
        """Whether `other` may be `value`, a view of it, or a value it views (through views and
        the values a device `if` merged), or a list, tuple or dict holding one of those."""
        if isinstance(other, (list, tuple, dict)):
            items = other.values() if isinstance(other, dict) else other
            return any(not isinstance(item, (list, tuple, dict)) and self.related(value, item) for item in items)
        return any(self._views(a, b) for a in self._possible(value) for b in self._possible(other))

    def _possible(self, value: Any) -> list:
        """`value` and the branch values it may be (a merge of merges too)."""
        found, pending = [value], [value]
        while pending:
            entry = self._aliases.get(id(pending.pop()))
            if entry is not None:
                fresh = [item for item in entry[1] if all(item is not seen for seen in found)]
                found += fresh
                pending += fresh
        return found

    def _views(self, value: Any, other: Any) -> bool:
        return other is value or self._derived(other, value) or self._derived(value, other)

    def _derived(self, value: Any, ancestor: Any) -> bool:
        entry = self._parents.get(id(value))
        while entry is not None and entry[0] is value:
            value = entry[1]
            if value is ancestor:
                return True
            entry = self._parents.get(id(value))
        return False


def _viewed_name(expr: ast.expr) -> tuple[str | None, bool]:
    """The name `expr` takes a view of (`a[:, 0]`, `a.T`, `a.view(4, -1)`, `a[1:][0]`), else None,
    and whether a cast is on the way (a view only when the dtype stays). A subscript with a
    tensor or tile index copies in torch (advanced indexing)."""
    cast = False
    while True:
        if isinstance(expr, ast.Subscript) and _basic(expr.slice):
            expr = expr.value
        elif isinstance(expr, ast.Attribute) and expr.attr in VIEW_ATTRIBUTES:
            expr = expr.value
        elif (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)
              and expr.func.attr in VIEW_METHODS | CAST_METHODS):
            cast = cast or expr.func.attr in CAST_METHODS
            # `torch.reshape(a, ...)`, `torch.Tensor.reshape(a, ...)`: the tensor is the first argument
            expr = expr.args[0] if _is_torch(expr.func.value) and expr.args else expr.func.value
        else:
            break
        if isinstance(expr, ast.Name):
            return expr.id, cast
    return None, cast


def _is_torch(expr: ast.expr) -> bool:
    """`torch` or `torch.Tensor` (a function form of a tensor method)."""
    text = ast.unparse(expr)
    return text in ("torch", "torch.Tensor")


def _basic(key: ast.expr) -> bool:
    """A subscript key of slices, integer constants, None and `...` (a view in torch)."""
    items = key.elts if isinstance(key, ast.Tuple) else [key]
    return all(isinstance(item, ast.Slice) or (isinstance(item, ast.Constant) and (
        item.value is None or item.value is Ellipsis or isinstance(item.value, int))) for item in items)


def stored_names(stmt: ast.stmt) -> set[str]:
    """The names `stmt` binds, and those whose item or attribute it sets (`accs[0] += 1` puts
    the new value in `accs`: it holds no stale one)."""
    names = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, ast.Store):
            base = node.value
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            if isinstance(base, ast.Name):
                names.add(base.id)
    return names


def refuse_shared_update(stmt: ast.stmt, symbol: str, other: str, location: Any) -> None:
    """The error for an `x op= v` at `stmt` that torch would show through `other`."""
    if isinstance(stmt, ast.AugAssign):  # `a += 1`, `values[0] += 1`
        target = ast.unparse(stmt.target)
        update = f"`{ast.unparse(stmt)}`"
        rewrite = f"`{target} = {ast.unparse(ast.BinOp(stmt.target, stmt.op, stmt.value))}`"
    else:  # in a function this statement calls
        update = f"An `x {symbol}= v` in a function this line calls"
        rewrite = f"`x = x {symbol} v` in the function (and return x)"
    raise exc.UnsupportedOperation(
        f"{update} would change `{other}` too in torch (they hold the same tensor, or one is a view of the "
        f"other), and `{other}` is read later; pallasite's device values are values, not shared tensors. "
        f"Write {rewrite} to leave `{other}` as it was (`.clone()` a view to keep it), or update `{other}` "
        "the same way.", location)


__all__ = ["SharedValues", "refuse_shared_update", "stored_names"]
