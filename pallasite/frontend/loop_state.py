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
        # containers bound before the loop, whose contents the body changes from themselves
        self.contents = {name: (scope[name], _numbers(scope[name])) for name in _updated_in_place(loop.body)
                         if name in scope and _numbers(scope[name]) is not None}
        # the lists, tuples and dicts bound before the loop, and the device values each holds
        mentioned = {node.id for stmt in loop.body for node in ast.walk(stmt) if isinstance(node, ast.Name)}
        self.containers = {name: (scope[name], _device_items(scope[name], is_device)) for name in mentioned
                           if isinstance(scope.get(name), (list, tuple, dict))}

    def check(self, scope: dict[str, Any], location: Any) -> None:
        """After the loop: refuse a number or a container's numbers the body updated from
        themselves, and device values of the loop's tiles a container bound before the loop
        took out of it (a container the body builds is the body's own)."""
        tile = self.loop.target.id if isinstance(self.loop.target, ast.Name) else "tile"
        for name, old in self.names.items():
            new = scope.get(name, MISSING)
            if isinstance(old, (int, float)) and isinstance(new, (int, float)) and new != old:
                raise exc.UnsupportedOperation(
                    f"'{name}' is the Python {type(old).__name__} {old!r} before this loop and its body updates "
                    f"it from its own value: a tile loop's body is traced once for every tile, so it would not "
                    f"count tiles. Compute it from the tile (`{tile}.id`, `{tile}.begin`) or keep it in a tensor "
                    "(a tensor assigned before an inner loop and updated in it is carried).", location)
        for name, (container, before) in self.containers.items():
            if scope.get(name, MISSING) is container and _device_items(container, self.is_device) - before:
                raise exc.UnsupportedOperation(
                    f"'{name}' collects values computed inside this loop (one per tile; a list's or dict's items "
                    "are not carried): only the values a loop carries come out of it. Accumulate into a tensor "
                    "assigned before the loop, one name each (`total = hl.zeros([...])`, then `total = total + v` "
                    "in the loop), or store each tile's value into an output tensor.", location)
        for name, (container, before) in self.contents.items():
            after = _numbers(container)
            if scope.get(name, MISSING) is container and after != before:
                raise exc.UnsupportedOperation(
                    f"'{name}' holds Python numbers the loop's body updates from themselves (they were "
                    f"{_text(before)} before the loop and {_text(after)} after it): a tile loop's body is traced "
                    f"once for every tile, so it would not count tiles. Compute the value from the tile "
                    f"(`{tile}.id`, `{tile}.begin`) or keep it in a tensor.", location)


def _numbers(value: Any) -> tuple | None:
    """A list's, tuple's, dict's or plain object's Python numbers, by key (None: not one)."""
    if isinstance(value, (list, tuple)):
        items = list(enumerate(value))
    elif isinstance(value, dict):
        items = list(value.items())
    elif _plain_object(value):
        items = list(vars(value).items())
    else:
        return None
    return tuple((key, item) for key, item in items if isinstance(item, (int, float)) and not isinstance(item, bool))


def _plain_object(value: Any) -> bool:
    """An object of the user's own class, or a SimpleNamespace (not a tensor, a proxy, a module)."""
    module = type(value).__module__
    return (hasattr(value, "__dict__") and not callable(value) and not isinstance(value, type)
            and (module == "types" or module.split(".")[0] not in ("builtins", "pallasite", "torch", "jax",
                                                                   "numpy", "types")))


def _text(numbers: tuple) -> str:
    return "{" + ", ".join(f"{key!r}: {value!r}" for key, value in numbers[:4]) + (", ...}" if len(numbers) > 4 else "}")


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


def _base_name(target: ast.expr) -> str | None:
    while isinstance(target, (ast.Subscript, ast.Attribute)):
        target = target.value
    return target.id if isinstance(target, ast.Name) else None


def _device_items(container: Any, is_device: Callable[[Any], bool]) -> set[int]:
    """The ids of the device values a list, tuple or dict holds."""
    items = container.values() if isinstance(container, dict) else container
    return {id(item) for item in items if is_device(item)}


def _assigned(body: list[ast.stmt]) -> list[str]:
    return sorted({node.id for stmt in body for node in ast.walk(stmt)
                   if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)})


__all__ = ["LoopState"]
