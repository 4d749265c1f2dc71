"""Generated code as a tree: statements of Python `ast` nodes, rendered in one place.

Emitters build statements with `CodeBuilder` (expression text is parsed once, where
it enters the tree); nesting is structure (a `def`/`for`/`if` statement holds its
body), and each statement carries the user's source line it came from, rendered as
the `# file.py:N: source` comment above it. An operand that is written inline (an
unnamed single-use value) stands in the text as a placeholder (`__inline__[n]`)
that parsing replaces by its expression node, so inlining substitutes nodes and
`ast.unparse` decides the parentheses. Before rendering, `tidy` removes the
bindings of pure values nothing reads and folds constants, on the tree.
"""
from __future__ import annotations

import ast
import copy
from contextlib import contextmanager
from dataclasses import dataclass, field

_PLACEHOLDER = "__inline__"
_INDENT = "    "


@dataclass
class Stmt:
    """One generated statement. `node` is a simple statement, or the header of a compound
    one (`def`, `for`, `if`) whose statements are `body`."""

    node: ast.stmt
    location: object = None  # the user's source location (`lineno`, `text`), or None
    comment: str | None = None  # a trailing comment
    body: list | None = None
    pure: bool = False  # binds a value without effects: dropped when nothing reads it
    layout: dict = field(default_factory=dict)  # id(expression node) -> its `Layout`


@dataclass
class Comment:
    """A comment line explaining the statements after it."""

    text: str
    location: object = None


class CodeBuilder:
    """Appends statements to the innermost open body; `block` opens a nested one."""

    def __init__(self):
        self.root: list = []
        self._stack: list[list] = [self.root]
        self._inline: list[ast.expr] = []
        self.location = None  # the user's line of the statements being emitted

    # -------------------------------------------------------- expressions --

    def placeholder(self, node: ast.expr) -> str:
        """Text standing for `node` in an expression that `expr` parses."""
        self._inline.append(node)
        return f"{_PLACEHOLDER}[{len(self._inline) - 1}]"

    def text(self, node: ast.expr) -> str:
        """Text for `node` inside expression text: its name, else a placeholder."""
        if isinstance(node, ast.Name):
            return node.id
        return self.placeholder(node)

    def expr(self, text: str) -> ast.expr:
        """Parse expression text (placeholders become their nodes)."""
        return self._substitute(ast.parse(text, mode="eval").body)

    def _substitute(self, node):
        inline = self._inline

        class Substitute(ast.NodeTransformer):
            def visit_Subscript(self, sub: ast.Subscript):
                if isinstance(sub.value, ast.Name) and sub.value.id == _PLACEHOLDER:
                    return copy.deepcopy(inline[sub.slice.value])
                return self.generic_visit(sub)

        return Substitute().visit(node)

    # --------------------------------------------------------- statements --

    @property
    def body(self) -> list:
        return self._stack[-1]

    def emit(self, text: str, comment: str | None = None, pure: bool = False) -> Stmt:
        """One simple statement from its text."""
        (node,) = ast.parse(text).body
        stmt = Stmt(self._substitute(node), self.location, comment, pure=pure)
        self.body.append(stmt)
        return stmt

    def assign(self, target: str, value: ast.expr, comment: str | None = None) -> Stmt:
        """`target = value`, the value an expression node built by the caller."""
        (node,) = ast.parse(f"{target} = None").body
        node.value = value
        stmt = Stmt(node, self.location, comment)
        self.body.append(stmt)
        return stmt

    def comment(self, text: str) -> None:
        self.body.append(Comment(text, self.location))

    @contextmanager
    def block(self, header: str, comment: str | None = None):
        """A compound statement (`def f():`, `for i in range(3):`, decorators included)
        whose body the statements emitted inside the `with` form."""
        (node,) = ast.parse(f"{header}\n{_INDENT}pass").body
        stmt = Stmt(self._substitute(node), self.location, comment, body=[])
        self.body.append(stmt)
        self._stack.append(stmt.body)
        try:
            yield stmt
        finally:
            self._stack.pop()


# ----------------------------------------------------------------- tidying --

def tidy(body: list) -> None:
    """Fold constants, propagate constant bindings and drop pure bindings nothing reads."""
    for stmt in _statements(body):
        stmt.node = _Fold().visit(stmt.node)
    while _propagate_constants(body) | _drop_unread(body) | _coalesce_copies(body) | _static_whens(body):
        pass


def _static_whens(body: list) -> bool:
    """A `@pl.when(c)` function of no arguments whose condition folded to a constant: its
    statements in its place when c is true (the function ran at once), nothing when false.
    Names are unique in the kernel, so its locals shadow nothing."""
    changed = False
    position = 0
    while position < len(body):
        item = body[position]
        condition = _when_condition(item) if isinstance(item, Stmt) else None
        if isinstance(condition, bool):
            body[position:position + 1] = item.body if condition else []
            changed = True
            continue
        if isinstance(item, Stmt) and item.body is not None:
            changed |= _static_whens(item.body)
        position += 1
    return changed


def _when_condition(stmt: Stmt):
    """The folded constant of a `@pl.when(...)` function without arguments, else None."""
    node = stmt.node
    if not isinstance(node, ast.FunctionDef) or node.args.args or len(node.decorator_list) != 1:
        return None
    decorator = node.decorator_list[0]
    if not (isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == "pl.when" and len(decorator.args) == 1):
        return None
    test = _Fold().visit(copy.deepcopy(decorator.args[0]))
    return test.value if isinstance(test, ast.Constant) and isinstance(test.value, bool) else None


def _statements(body: list):
    for item in body:
        if isinstance(item, Stmt):
            yield item
            if item.body is not None:
                yield from _statements(item.body)


def _reads(body: list) -> dict[str, int]:
    counts: dict[str, int] = {}
    for stmt in _statements(body):
        for node in ast.walk(stmt.node):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                counts[node.id] = counts.get(node.id, 0) + 1
    return counts


def _writes(body: list) -> dict[str, int]:
    counts: dict[str, int] = {}
    for stmt in _statements(body):
        for node in ast.walk(stmt.node):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                counts[node.id] = counts.get(node.id, 0) + 1
            elif isinstance(node, ast.arg):
                counts[node.arg] = counts.get(node.arg, 0) + 1
            elif isinstance(node, (ast.FunctionDef,)):
                counts[node.name] = counts.get(node.name, 0) + 1
    return counts


def _bound_name(stmt: Stmt) -> str | None:
    node = stmt.node
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    return None


def _remove(body: list, doomed: set[int]) -> None:
    """Drop the `doomed` statements; one that came from a user's line leaves the line's
    quote behind (`Comment` without text), so a source line whose code all folded away
    (a grid loop's `for`, whose tile attributes nothing reads) is still quoted."""
    body[:] = [item if id(item) not in doomed else Comment("", item.location) for item in body
               if id(item) not in doomed or item.location is not None]
    for item in body:
        if isinstance(item, Stmt) and item.body is not None:
            _remove(item.body, doomed)


def _drop_unread(body: list) -> bool:
    """Pure bindings nothing reads (tile attributes bound where a loop starts, a scalar
    that only fed an index map)."""
    reads = _reads(body)
    doomed = {id(s) for s in _statements(body) if s.pure and _bound_name(s) and not reads.get(_bound_name(s))}
    _remove(body, doomed)
    return bool(doomed)


def _propagate_constants(body: list) -> bool:
    """A pure binding of an int constant, bound once, is written where it is read."""
    writes = _writes(body)
    constants = {}
    for stmt in _statements(body):
        name = _bound_name(stmt)
        value = getattr(stmt.node, "value", None)
        if (stmt.pure and name and writes.get(name) == 1 and isinstance(value, ast.Constant)
                and type(value.value) is int):
            constants[name] = value.value
    if not constants:
        return False

    class Replace(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name):
            if isinstance(node.ctx, ast.Load) and node.id in constants:
                return ast.Constant(constants[node.id])
            return node

    for stmt in _statements(body):
        if _bound_name(stmt) not in constants:
            stmt.node = _Fold().visit(Replace().visit(stmt.node))
    _remove(body, {id(s) for s in _statements(body) if _bound_name(s) in constants})
    return True


def _coalesce_copies(body: list) -> bool:
    """`t = e` followed by `v = t`, where nothing else reads or rebinds `t`: `v = e`
    (a carried value rebound from this step's result)."""
    reads, writes, changed = _reads(body), _writes(body), False
    for stmt in _statements(body):
        if stmt.body is None:
            continue
        changed |= _coalesce_in(stmt.body, reads, writes)
    return _coalesce_in(body, reads, writes) or changed


def _coalesce_in(items: list, reads: dict, writes: dict) -> bool:
    for i in range(len(items) - 1):
        first, second = items[i], items[i + 1]
        if not (isinstance(first, Stmt) and isinstance(second, Stmt)) or first.body or second.body:
            continue
        name = _bound_name(first)
        if (name and first.pure and _bound_name(second) and isinstance(second.node.value, ast.Name)
                and second.node.value.id == name and reads.get(name) == 1 and writes.get(name) == 1):
            second.node.value = first.node.value
            second.location, second.comment = first.location, second.comment or first.comment
            del items[i]
            return True
    return False


class _Fold(ast.NodeTransformer):
    """Integer arithmetic on constants, evaluated (`(320 - 0 + 127) // 128` is 3); in an
    index map (a lambda of grid indices: ints only), `0 + i` is `i`."""

    _COMPARE = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
                ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}

    def visit_Compare(self, node: ast.Compare):
        """`3 > 0` is True (`pl.when(True)` runs its body, as Python's `if` would)."""
        self.generic_visit(node)
        compare = self._COMPARE.get(type(node.ops[0])) if len(node.ops) == 1 else None
        if compare is None or not (_is_int(node.left) and _is_int(node.comparators[0])):
            return node
        return ast.Constant(compare(node.left.value, node.comparators[0].value))

    def visit_Call(self, node: ast.Call):
        """`keepdims=False` is the default of every reduction generated code calls."""
        self.generic_visit(node)
        node.keywords = [kw for kw in node.keywords
                         if not (kw.arg == "keepdims" and isinstance(kw.value, ast.Constant) and kw.value.value is False)]
        return node

    def visit_Lambda(self, node: ast.Lambda):
        self.generic_visit(node)
        node.body = _Zeros().visit(node.body)
        return node

    _OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
            ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}

    def visit_BinOp(self, node: ast.BinOp):
        self.generic_visit(node)
        left, right, op = node.left, node.right, self._OPS.get(type(node.op))
        if op is None or not (_is_int(left) and _is_int(right)):
            return node
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right.value == 0:
            return node
        value = op(left.value, right.value)
        return ast.Constant(value) if value >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(-value))


class _Zeros(ast.NodeTransformer):
    def visit_BinOp(self, node: ast.BinOp):
        self.generic_visit(node)
        if isinstance(node.op, ast.Add) and _is_int(node.left) and node.left.value == 0:
            return node.right
        if isinstance(node.op, (ast.Add, ast.Sub)) and _is_int(node.right) and node.right.value == 0:
            return node.left
        return node


def _is_int(node) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


# --------------------------------------------------------------- rendering --

def render(body: list, source_file: str, depth: int = 0) -> list[str]:
    """The lines of `body`: each statement under a comment quoting its user line (once
    for consecutive statements of one line)."""
    return _Renderer(source_file).lines(body, depth)


class _Renderer:
    def __init__(self, source_file: str):
        self.source_file = source_file
        self.last_line = None
        self.out: list[str] = []

    def lines(self, body: list, depth: int) -> list[str]:
        self._body(body, depth)
        return self.out

    def _body(self, body: list, depth: int) -> None:
        pad = _INDENT * depth
        for item in body:
            location = item.location
            # a line and its text: the statements an `hl` function expands into share the
            # user's line, each with its own text (frontend/walker.py:run_expansion)
            if location is not None and (location.lineno, location.text) != self.last_line:
                self.last_line = (location.lineno, location.text)
                self.out.append(f"{pad}# {self.source_file}:{location.lineno}: {location.text.strip()}")
            if isinstance(item, Comment):
                if item.text:  # an empty one only quotes its source line (`_remove`)
                    self.out.append(f"{pad}# {item.text}")
                continue
            suffix = f"  # {item.comment}" if item.comment else ""
            if item.body is None:
                text = _statement_text(item)
                lines = text.split("\n")
                lines[-1] += suffix
                self.out.extend(pad + line for line in lines)
                continue
            header = copy.copy(item.node)
            header.body = [ast.Pass()]
            lines = ast.unparse(header).split("\n")[:-1]
            lines[-1] += suffix
            self.out.extend(pad + line for line in lines)
            self._body(item.body, depth + 1)
            if not any(isinstance(inner, Stmt) for inner in item.body):  # comments alone are no body
                self.out.append(pad + _INDENT + "pass")


def _statement_text(stmt: Stmt) -> str:
    node = stmt.node
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple):
        names = ", ".join(ast.unparse(elt) for elt in node.targets[0].elts)
        target = {0: "()", 1: f"({names},)"}.get(len(node.targets[0].elts), names)
        return f"{target} = {_expression(node.value, stmt.layout, 0)}"
    if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and len(node.value.elts) > 1:
        return f"return {', '.join(ast.unparse(elt) for elt in node.value.elts)}"
    if isinstance(node, ast.Expr) and stmt.layout:
        return _expression(node.value, stmt.layout, 0)
    if isinstance(node, ast.Assign) and stmt.layout:
        return f"{ast.unparse(node.targets[0])} = {_expression(node.value, stmt.layout, 0)}"
    return ast.unparse(node)


@dataclass(frozen=True)
class Layout:
    """How one expression node of a statement is written when it is not one line."""

    expand: bool = False  # a call or list: one argument or element per line
    comment: str | None = None  # a trailing comment on its line (as an argument or element)
    above: str | None = None  # a comment line above it (as an argument or element)


def _expression(node: ast.expr, layout: dict, depth: int) -> str:
    """`node` on one line, except the calls and lists `layout` expands: one argument or
    element per line, each with its comments."""
    spec = layout.get(id(node))
    if spec is None or not spec.expand:
        if isinstance(node, ast.Call) and _has_layout(node.func, layout):
            args = ", ".join(ast.unparse(a) for a in node.args)
            return f"{_expression(node.func, layout, depth)}({args})"
        return ast.unparse(node)
    inner = _INDENT * (depth + 1)
    if isinstance(node, ast.List):
        open_, close, items = "[", "]", [(None, elt) for elt in node.elts]
    else:
        open_, close = f"{ast.unparse(node.func)}(", ")"
        items = [(None, arg) for arg in node.args] + [(kw.arg, kw.value) for kw in node.keywords]
    lines = [open_]
    for name, value in items:
        note = layout.get(id(value)) or Layout()
        if note.above:
            lines.append(f"{inner}# {note.above}")
        prefix = f"{name}=" if name else ""
        comment = f"  # {note.comment}" if note.comment else ""
        lines.append(f"{inner}{prefix}{_expression(value, layout, depth + 1)},{comment}")
    lines.append(_INDENT * depth + close)
    return "\n".join(lines)


def _has_layout(node, layout: dict) -> bool:
    return any(id(n) in layout and layout[id(n)].expand for n in ast.walk(node))
