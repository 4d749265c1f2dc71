"""Reading a kernel's Python source: the function's AST with file line numbers, and what
the statement walker (walker.py, shared by the tracer and reference mode) needs to know
about its statements."""
from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from dataclasses import dataclass
from typing import Callable

from .. import exc


def function_ast(fn: Callable) -> tuple[ast.FunctionDef, str]:
    """The FunctionDef of `fn`, line numbers matching its file, and the file name."""
    try:
        lines, first_line = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or "<unknown>"
    except (OSError, TypeError) as err:
        raise exc.UnsupportedSyntax(
            f"pallasite needs the source of kernel {getattr(fn, '__name__', fn)!r} "
            f"(define it in a file, not an interactive prompt): {err}"
        ) from err
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first_line - 1)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node, filename
    raise exc.UnsupportedSyntax(f"Could not find the definition of {fn.__name__} in its source.")


def location(filename: str, node: ast.AST) -> exc.SourceLocation:
    lineno = getattr(node, "lineno", 0)
    text = linecache.getline(filename, lineno).rstrip("\n")
    return exc.SourceLocation(filename, lineno, text)


def looks_like_device_loop(stmt: ast.stmt) -> bool:
    """A `for` whose iterable is a call named `tile`, `grid`, `jagged_tile` or `vtile` (hl.tile,
    hl.grid, hl.jagged_tile; a jagged loop at the top is then refused as one)."""
    if not isinstance(stmt, ast.For) or not isinstance(stmt.iter, ast.Call):
        return False
    func = stmt.iter.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return name in ("tile", "grid", "jagged_tile", "vtile")


def contains_device_loop(stmt: ast.stmt) -> bool:
    return any(
        looks_like_device_loop(node) for node in ast.walk(stmt) if isinstance(node, ast.For)
    )


def _walk_own_code(node: ast.AST):
    """`ast.walk` without descending into nested functions, lambdas and classes."""
    stack = [node]
    while stack:
        item = stack.pop()
        yield item
        for child in ast.iter_child_nodes(item):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                stack.append(child)


def contains_return(stmt: ast.stmt) -> bool:
    """Whether `stmt` holds a `return` of the kernel itself (not of a nested function, nor is
    it one: a `def` in the kernel's body, such as a scan's combine function, runs as written)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False
    return any(isinstance(node, ast.Return) for node in _walk_own_code(stmt))


def must_walk(stmt: ast.stmt) -> bool:
    """Whether a host statement cannot be `exec`'d whole: it holds a device loop, or a
    `return` (which must end the kernel, not an `exec`)."""
    return contains_device_loop(stmt) or contains_return(stmt)


def free_names(fn: ast.FunctionDef) -> tuple[str, ...]:
    """Names the function reads but neither takes as a parameter nor assigns: the
    globals and closure variables it uses."""
    arguments = fn.args
    params = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}
    params |= {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}
    stored: set[str] = set()
    loaded: dict[str, None] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                loaded.setdefault(node.id, None)
            else:
                stored.add(node.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            loaded.update(dict.fromkeys(node.names))
    return tuple(name for name in loaded if name not in params and name not in stored)


@dataclass(frozen=True)
class ScopeReads:
    """What a kernel reads from its enclosing scope: its free names (`free_names`), those it
    uses whole (not only as the root of an attribute chain), and each maximal attribute chain
    rooted at a free name (`("CFG", "norm", "eps")` for `CFG.norm.eps`)."""

    names: tuple[str, ...]
    whole: frozenset[str]
    chains: tuple[tuple[str, ...], ...]


def scope_reads(fn: ast.FunctionDef) -> ScopeReads:
    """The free names `fn`'s body reads and how (see `ScopeReads`); its decorators and
    annotations are not run by the trace."""
    nodes = [node for stmt in fn.body for node in ast.walk(stmt)]
    in_body = {node.id for node in nodes if isinstance(node, ast.Name)}
    in_body |= {name for node in nodes if isinstance(node, (ast.Global, ast.Nonlocal)) for name in node.names}
    names = tuple(name for name in free_names(fn) if name in in_body)
    free = set(names)
    inner = {id(node.value) for node in nodes if isinstance(node, ast.Attribute)}
    roots: set[int] = set()
    chains: dict[tuple[str, ...], None] = {}
    for node in nodes:
        if not isinstance(node, ast.Attribute) or id(node) in inner:
            continue
        attributes, item = [], node
        while isinstance(item, ast.Attribute):
            attributes.append(item.attr)
            item = item.value
        if isinstance(item, ast.Name) and item.id in free:
            roots.add(id(item))
            chains.setdefault((item.id, *reversed(attributes)), None)
    whole = {node.id for node in nodes if isinstance(node, ast.Name) and node.id in free and id(node) not in roots}
    whole |= {name for node in nodes if isinstance(node, (ast.Global, ast.Nonlocal)) for name in node.names}
    return ScopeReads(names, frozenset(whole & free), tuple(chains))


def unsupported_host_statement(stmt: ast.stmt, location: exc.SourceLocation) -> exc.UnsupportedSyntax:
    """A host statement other than `if`/`for` holding a device loop or a `return`: those
    two run statement by statement, anything else would run as one `exec`."""
    kind = type(stmt).__name__
    if contains_device_loop(stmt):
        return exc.UnsupportedSyntax(f"A device loop inside a {kind} statement is not supported.", location)
    return exc.UnsupportedSyntax(
        f"A return inside a {kind} statement in host code is not supported; return from the "
        "kernel's body, an if or a for over a Python iterable instead.", location)


def tunable_names_of(fn: Callable) -> tuple[str, ...] | None:
    """The names of `fn`'s `hl.register_tunable("name", ...)` calls (each checked not to be a
    built-in config key), known before the kernel is traced so its configs can be checked at
    decoration; None where a name is not a literal (or the source cannot be read)."""
    from ..config import check_tunable_name

    try:
        tree, _ = function_ast(fn)
    except exc.PallasiteError:
        return None
    names: list[str] = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
                and getattr(node.func, "attr", getattr(node.func, "id", None)) == "register_tunable"):
            if not (node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                return None
            check_tunable_name(node.args[0].value)
            names.append(node.args[0].value)
    return tuple(dict.fromkeys(names))
