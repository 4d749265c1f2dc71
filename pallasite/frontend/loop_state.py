"""Host state a tile loop's body changes from tile to tile, which tracing cannot follow.

A tile loop's body is traced once for every tile (compiled), where reference mode runs it
once per tile: Python state the body updates from its own value (`count += 1`, `c[0] += 1`,
`st["n"] = st["n"] + 1`, `obj.n += 1`, `seen.append(1)`) would take one tile's update
compiled and every tile's in reference mode, and a list or dict filled with the values of
the loop's tiles (`parts.append(x[tm, tn].sum(1))`) takes values out of a loop that only
carries named tensors. `LoopState` snapshots the scope before a loop (both modes' walker
does) and refuses either after it, at the loop's line.
"""
from __future__ import annotations

import ast
from typing import Any, Callable

from .. import exc

MISSING = object()
# methods that change a list, dict or set in place
_MUTATORS = frozenset(("append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
                       "popitem", "add", "discard", "sort", "reverse"))


class LoopState:
    """The scope's Python numbers, containers and the device values containers hold, before a loop."""

    def __init__(self, loop: ast.For, scope: dict[str, Any], is_device: Callable[[Any], bool],
                 reads_first: Callable[[list, str], bool]):
        """`reads_first(body, name)`: whether the body may read `name` before assigning it."""
        self.loop = loop
        self.is_device = is_device
        self.names = {name: scope.get(name, MISSING) for name in _assigned(loop.body) if reads_first(loop.body, name)}
        self.updated = _updated_in_place(loop.body)  # names whose contents the body changes from themselves
        self.contents = {name: _contents(scope.get(name, MISSING)) for name in self.updated}
        self.held = _held(scope, is_device)

    def check(self, scope: dict[str, Any], location: Any) -> None:
        """After the loop: refuse a number or a container's contents the body updated from
        themselves, and device values of the loop's tiles a container took out of it."""
        tile = self.loop.target.id if isinstance(self.loop.target, ast.Name) else "tile"
        for name, old in self.names.items():
            new = scope.get(name, MISSING)
            if isinstance(old, (int, float)) and isinstance(new, (int, float)) and new != old:
                raise exc.UnsupportedOperation(
                    f"'{name}' is the Python {type(old).__name__} {old!r} before this loop and its body updates "
                    f"it from its own value: a tile loop's body is traced once for every tile, so it would not "
                    f"count tiles. Keep it on the device (`{name} = hl.zeros([...])`, a carried tensor) or "
                    f"compute it from the tile (`{tile}.id`, `.begin`).", location)
        new = {key: name for key, name in _held(scope, self.is_device).items()
               if key not in self.held and name not in _loop_targets(self.loop)}
        if new:
            raise exc.UnsupportedOperation(
                f"'{sorted(new.values())[0]}' collects values computed inside this loop (one per tile; a list's or "
                "dict's items are not carried): only the values a loop carries come out of it. Accumulate into "
                "a tensor assigned before the loop, one name each (`total = hl.zeros([...])`, then "
                "`total = total + v` in the loop), or store each tile's value into an output tensor.", location)
        for name, old in self.contents.items():
            new = _contents(scope.get(name, MISSING))
            if old is not None and new is not None and new != old:
                raise exc.UnsupportedOperation(
                    f"'{name}' holds Python values the loop's body updates from themselves (its contents were "
                    f"{_text(old)} before the loop and {_text(new)} after it): a tile loop's body is traced once "
                    f"for every tile, so it would not count tiles. Keep the value on the device (a carried "
                    f"tensor) or compute it from the tile (`{tile}.id`, `.begin`).", location)


def _contents(value: Any) -> tuple | None:
    """A list's, tuple's, dict's or plain object's Python numbers and length (None: not one)."""
    if isinstance(value, (list, tuple)):
        items = list(enumerate(value))
    elif isinstance(value, dict):
        items = list(value.items())
    elif _plain_object(value):
        items = list(vars(value).items())
    else:
        return None
    return (len(items), tuple((key, item) for key, item in items
                              if isinstance(item, (int, float)) and not isinstance(item, bool)))


def _plain_object(value: Any) -> bool:
    """An object of the user's own class, or a SimpleNamespace (not a tensor, a proxy, a module)."""
    module = type(value).__module__
    return (hasattr(value, "__dict__") and not callable(value) and not isinstance(value, type)
            and (module == "types" or module.split(".")[0] not in ("builtins", "pallasite", "torch", "jax",
                                                                   "numpy", "types")))


def _text(contents: tuple) -> str:
    return "{" + ", ".join(f"{key!r}: {value!r}" for key, value in contents[1][:4]) + (
        ", ..." if len(contents[1]) > 4 else "") + f"}} (length {contents[0]})"


def _updated_in_place(body: list[ast.stmt]) -> set[str]:
    """Names whose contents the body changes from themselves: `c[0] += 1`, `obj.n += 1`,
    `st["n"] = st["n"] + 1`, `seen.append(1)`."""
    names = set()
    for node in (node for stmt in body for node in ast.walk(stmt)):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, (ast.Subscript, ast.Attribute)):
            base = _base_name(node.target)
            if base:
                names.add(base)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                base = _base_name(target) if isinstance(target, (ast.Subscript, ast.Attribute)) else None
                if base and any(isinstance(n, ast.Name) and n.id == base for n in ast.walk(node.value)):
                    names.add(base)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS:
            if isinstance(node.func.value, ast.Name):
                names.add(node.func.value.id)
    return names


def _loop_targets(loop: ast.For) -> set[str]:
    """The names this loop and the loops in its body iterate with (`for tile in hl.tile([m, n])`
    binds a list of tiles: not values the body computes)."""
    return {name.id for node in ast.walk(loop) if isinstance(node, ast.For)
            for name in ast.walk(node.target) if isinstance(name, ast.Name)}


def _base_name(target: ast.expr) -> str | None:
    while isinstance(target, (ast.Subscript, ast.Attribute)):
        target = target.value
    return target.id if isinstance(target, ast.Name) else None


def _held(scope: dict[str, Any], is_device: Callable[[Any], bool]) -> dict[int, str]:
    """The device values the scope's lists, tuples and dicts hold: id -> the container's name."""
    held = {}
    for name, value in scope.items():
        items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
        for item in items:
            if is_device(item):
                held[id(item)] = name
    return held


def _assigned(body: list[ast.stmt]) -> list[str]:
    return sorted({node.id for stmt in body for node in ast.walk(stmt)
                   if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)})


__all__ = ["LoopState"]
