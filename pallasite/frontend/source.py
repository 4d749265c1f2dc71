"""Reading a kernel's Python source: the function's AST with file line numbers."""
from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
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


def statement_text(filename: str, stmt: ast.stmt) -> str:
    """The user's source text of a statement, first line only, stripped."""
    return linecache.getline(filename, stmt.lineno).strip()


def looks_like_device_loop(stmt: ast.stmt) -> bool:
    """A `for` whose iterable is a call named `tile` or `grid` (hl.tile, hl.grid)."""
    if not isinstance(stmt, ast.For) or not isinstance(stmt.iter, ast.Call):
        return False
    func = stmt.iter.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return name in ("tile", "grid")


def contains_device_loop(stmt: ast.stmt) -> bool:
    return any(
        looks_like_device_loop(node) for node in ast.walk(stmt) if isinstance(node, ast.For)
    )
