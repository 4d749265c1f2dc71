"""The one walker of a kernel's Python statements, shared by the tracer and reference mode.

Both run the user's body the same way: each simple statement is compiled and `exec`'d on
its own in the kernel's scope, a `for` over a Python iterable is unrolled, an `if` on a
host value picks its branch, a `return` ends the kernel, and unsupported syntax raises
with the user's line. What differs is what a tile loop, an `if` on a device value and
each operation *mean*: the tracer records IR, reference mode runs torch on the host.
The walker asks a `StatementSemantics` for those; loads, stores and ops never reach the
walker (they go to the semantics' proxies or torch function mode).
"""
from __future__ import annotations

import ast
import copy
import contextlib
from contextvars import ContextVar
from typing import Any, Callable, Iterator, Protocol

from .. import exc
from .. import language as hl
from . import source
from .loop_state import LoopState
from .shared_values import SharedValues, refuse_shared_update, stored_names

MISSING = object()  # a name that had no value (before a loop or an if)

_SIMPLE_DEVICE_STATEMENTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Pass, ast.Assert)


# A pallasite error that is a TypeError (`exc.UnsupportedDtype`) raised under a torch operator
# method (`Tensor.__pow__`, `__rsub__`, ...): torch turns it into NotImplemented, and Python
# then raises its own "unsupported operand type(s)"; the statement runner raises ours instead.
_SWALLOWED: ContextVar[exc.PallasiteError | None] = ContextVar("pallasite_swallowed_error", default=None)


def remember_under_operator(err: exc.PallasiteError) -> exc.PallasiteError:
    """Keep `err`, raised under a torch operator method, for the statement runner; returns it."""
    if isinstance(err, TypeError):
        _SWALLOWED.set(err)
    return err


def take_swallowed() -> exc.PallasiteError | None:
    err = _SWALLOWED.get()
    _SWALLOWED.set(None)
    return err


# The tracer's proxies, by the type name torch's argument parser reports
_PROXY_TYPES = {"TileProxy": "tile", "DeviceTensor": "device value", "HostScalar": "scalar argument",
                "HostTensor": "tensor"}

class StatementSemantics(Protocol):
    """What the walker's statements mean. The tracer records IR; reference mode runs torch."""

    def enter_statement(self, stmt: ast.stmt, location: exc.SourceLocation) -> None:
        """A statement (or its loop header or condition) starts running."""

    def statement_executed(self, stmt: ast.stmt) -> None:
        """A simple statement ran (the tracer names the values it assigned)."""

    def check_python_iterable(self, iterable: Any, location: exc.SourceLocation) -> None:
        """Raise if a Python `for` cannot iterate `iterable` (the tracer: a traced value)."""

    def if_condition(self, stmt: ast.If) -> Any:
        """The value of an `if`'s test inside device code."""

    def is_device_condition(self, test: Any) -> bool:
        """Whether an `if` on `test` is decided on the device (then `device_if` runs it)."""

    def device_if(self, stmt: ast.If, test: Any) -> None:
        """An `if` on a device value."""

    def device_loop(self, stmt: ast.For, spec: hl.TileIterable, run_body: Callable[[Any], None]) -> None:
        """A top-level `hl.tile`/`hl.grid` loop; `run_body(loop_variable)` runs its body."""

    def inner_loop(self, stmt: ast.For, spec: hl.TileIterable, run_body: Callable[[Any], None],
                   assigned: list[str]) -> dict[str, Any]:
        """A tile/grid loop inside device code. `assigned`: the names its body assigns, sorted.
        Returns the carried names' values after the loop; the walker scopes the others."""

    def is_device_value(self, value: Any) -> bool:
        """Whether `value` is a device value (one per tile of a loop: not carried out of it)."""


class StatementWalker:
    """Runs a kernel body's statements in `scope`, asking `semantics` what device code means."""

    def __init__(self, filename: str, scope: dict[str, Any], error_note: str):
        """`error_note`: the note a user's own error gets, `{location}` filled in."""
        self.filename = filename
        self.scope = scope
        self.error_note = error_note
        self.semantics: StatementSemantics | None = None
        self.statement: ast.stmt | None = None
        self.location: exc.SourceLocation | None = None
        self.result: Any = None
        self.python_loops: tuple[tuple[int, int], ...] = ()  # (id of each enclosing for, its iteration)
        # names out of scope after an inner loop (a device value it does not carry) or a device
        # if (assigned in one branch only): name -> why, said when the name is read
        self.scoped_out: dict[str, str] = {}
        self._code: dict[int, Any] = {}
        self._locations: dict[int, exc.SourceLocation] = {}
        self._blocks: dict[int, tuple[list[ast.stmt], int, ast.stmt | None]] = {}
        self._expansions: list[list[ast.stmt]] = []  # kept alive: the caches above key on id()
        self.shared = SharedValues()  # the views device statements took (`x op= v` checks them)
        self._mentioned: frozenset[str] = frozenset()  # the names the running code mentions

    def run_kernel(self, body: list[ast.stmt], semantics: StatementSemantics) -> Any:
        """Run the kernel's body; its returned value (None without a `return`)."""
        self.semantics = semantics
        self._blocks, self._mentioned = statement_blocks(body), mentioned_names(body)
        self.run_host_block(body)
        return self.result

    def run_expansion(self, stmts: list[ast.stmt], scope: dict[str, Any], what: str) -> None:
        """Run host statements pallasite wrote for an `hl` function (`hl.all_reduce`'s
        loops) inside the running statement, in their own `scope`: each is located at the
        running statement's line, its text `<the user's line>  # <what>: <the statement>`,
        so errors and the generated code's comments name both."""
        outer = self.statement
        user = self.location_of(outer)

        def locate(node: ast.AST, location: exc.SourceLocation) -> None:
            if isinstance(node, ast.stmt):
                own = ast.unparse(node).splitlines()[0].strip()
                location = exc.SourceLocation(user.filename, user.lineno, f"{user.text.rstrip()}  # {what}: {own}")
            if hasattr(node, "lineno"):
                node.lineno = node.end_lineno = user.lineno
                self._locations[id(node)] = location
            for child in ast.iter_child_nodes(node):
                locate(child, location)

        for stmt in stmts:
            locate(stmt, user)
        self._expansions.append(stmts)
        saved = self.scope, self._blocks, self.scoped_out, self._mentioned
        self.scope, self._blocks, self.scoped_out = scope, statement_blocks(stmts), {}
        self._mentioned = mentioned_names(stmts)
        try:
            self.run_host_block(stmts)
        finally:
            self.scope, self._blocks, self.scoped_out, self._mentioned = saved
            self.enter(outer)

    # --------------------------------------------------------- statements --

    def location_of(self, node: ast.AST) -> exc.SourceLocation:
        location = self._locations.get(id(node))
        if location is None:
            location = self._locations[id(node)] = source.location(self.filename, node)
        return location

    def enter(self, stmt: ast.stmt) -> None:
        """Make `stmt` the running statement: its line goes on errors and recorded nodes."""
        take_swallowed()  # an earlier statement's, caught by the user's own code
        self.statement = stmt
        self.location = self.location_of(stmt)
        self.semantics.enter_statement(stmt, self.location)

    def execute(self, stmt: ast.stmt) -> None:
        """Run one simple statement with Python, in the kernel's scope."""
        self.enter(stmt)
        code = self._code.get(id(stmt))
        if code is None:
            code = self._code[id(stmt)] = self._compile(ast.Module(body=[stmt], type_ignores=[]), "exec")
        with self.user_code():
            exec(code, self.scope)
        self.shared.record(stmt, self.scope, self.semantics.is_device_value)
        self.semantics.statement_executed(stmt)

    def evaluate(self, expr: ast.expr, stmt: ast.stmt) -> Any:
        """The value of `expr`, part of `stmt`, in the kernel's scope."""
        self.enter(stmt)
        code = self._code.get(id(expr))
        if code is None:
            code = self._code[id(expr)] = self._compile(ast.Expression(body=expr), "eval")
        with self.user_code():
            return eval(code, self.scope)

    def _compile(self, tree: ast.mod, mode: str) -> Any:
        """Python code of `tree`; where the semantics give `and`/`or` a meaning of their own
        (`bool_op`: a traced operand has no truth value while tracing), each `a or b` calls it
        with its operands as thunks, so host operands still short-circuit."""
        bool_op = getattr(self.semantics, "bool_op", None)
        if bool_op is not None and any(isinstance(node, ast.BoolOp) or isinstance(node, ast.UnaryOp)
                                       and isinstance(node.op, ast.Not) for node in ast.walk(tree)):
            self.scope[BOOL_OP_NAME] = bool_op
            tree = ast.fix_missing_locations(_BoolOpsAsCalls().visit(copy.deepcopy(tree)))
        return compile(tree, self.filename, mode)

    @contextlib.contextmanager
    def user_code(self) -> Iterator[None]:
        """Errors of the running statement: pallasite errors get its line, the user's own a note."""
        try:
            yield
        except exc.PallasiteError as err:
            raise err.with_location(self.location) from None
        except NameError as err:
            why = self.scoped_out.get(err.name)
            if why is None:
                self._note(err)
                raise
            raise exc.UnsupportedOperation(why, self.location) from None
        except TypeError as err:
            swallowed = take_swallowed()
            if swallowed is not None:  # ours, turned into NotImplemented by a torch operator method
                raise swallowed.with_location(self.location) from None
            proxy = next((name for name in _PROXY_TYPES if name in str(err)), None)
            if proxy is None:  # the user's own error: keep its type, add the line
                self._note(err)
                raise
            raise exc.UnsupportedOperation(  # torch's argument parser met a traced value where it takes ints
                f"{str(err).splitlines()[0]}: a Python operation or torch argument that takes plain numbers "
                f"got a traced {_PROXY_TYPES[proxy]}; in device code build tile-shaped values with "
                "hl.zeros([tile, n]) / hl.full, pass a scalar argument through hl.specialize(...), and index a "
                "list argument with ints.", self.location) from None
        except Exception as err:  # the user's own error: keep its type, add the line
            self._note(err)
            raise

    def _note(self, err: Exception) -> None:
        """Add the running statement's line to the user's own error (once)."""
        if self.location is not None and not getattr(err, "_pallasite_noted", False):
            err.add_note(self.error_note.format(location=self.location))
            err._pallasite_noted = True

    def branch(self, stmt: ast.If, test: Any) -> list[ast.stmt]:
        """The branch an `if` on a host value takes (a traced test raises here, at the `if`)."""
        with self.user_code():
            return stmt.body if test else stmt.orelse

    def run_host_block(self, stmts: list[ast.stmt]) -> bool:
        """Run host statements; True once a `return` ran."""
        for stmt in stmts:
            if isinstance(stmt, ast.Return):
                self.result = None if stmt.value is None else self.evaluate(stmt.value, stmt)
                return True
            if source.looks_like_device_loop(stmt):
                iterable = self.evaluate(stmt.iter, stmt)
                if isinstance(iterable, hl.TileIterable):
                    self._device_loop(stmt, iterable)
                elif self.python_loop(stmt, iterable, self.run_host_block):
                    return True
            elif isinstance(stmt, ast.If) and source.must_walk(stmt):
                if self.run_host_block(self.branch(stmt, self.evaluate(stmt.test, stmt))):
                    return True
            elif isinstance(stmt, ast.For) and source.must_walk(stmt):
                if self.python_loop(stmt, self.evaluate(stmt.iter, stmt), self.run_host_block):
                    return True
            elif source.must_walk(stmt):
                raise source.unsupported_host_statement(stmt, self.location_of(stmt))
            else:
                self.execute(stmt)
        return False

    def run_device_block(self, stmts: list[ast.stmt], loop_body: bool = False) -> None:
        """Run statements inside a device loop (`loop_body`: the tile loop's own body, where
        `if <condition>: continue` skips the rest of the iteration)."""
        for position, stmt in enumerate(stmts):
            self.enter(stmt)
            if _is_continue_guard(stmt) or isinstance(stmt, ast.Continue):
                if not loop_body:
                    raise exc.UnsupportedSyntax(
                        "continue is supported as `if <condition>: continue` (or a bare continue) directly "
                        "in a tile loop's body, where it skips the rest of the iteration; here it is inside "
                        "another statement. Put the condition in an if around the statements it skips.",
                        self.location)
                if isinstance(stmt, ast.If):
                    self._unless(stmt, stmts[position + 1:])
                return
            if isinstance(stmt, ast.For):
                iterable = self.evaluate(stmt.iter, stmt)
                if isinstance(iterable, hl.TileIterable):
                    self._inner_loop(stmt, iterable)
                else:
                    self.python_loop(stmt, iterable, self.run_device_block)
            elif isinstance(stmt, ast.If):
                test = self.semantics.if_condition(stmt)
                if self.semantics.is_device_condition(test):
                    self.semantics.device_if(stmt, test)
                else:
                    self.run_device_block(self.branch(stmt, test))
            elif isinstance(stmt, _SIMPLE_DEVICE_STATEMENTS):
                self.execute(stmt)
            elif isinstance(stmt, ast.Return):
                raise exc.UnsupportedSyntax(
                    "return inside a device loop is not supported: a kernel returns once, after its loops. "
                    "Store the result into an output tensor in the loop and return that tensor after it.",
                    self.location)
            elif isinstance(stmt, ast.Break):
                raise exc.UnsupportedSyntax(
                    "break is not supported in device code: a tile loop's trip count is fixed when it starts. "
                    "Skip the remaining iterations instead (`if <condition>: continue` directly in the loop's "
                    "body), or bound the loop where it should stop (hl.tile(begin, end) with a computed end).",
                    self.location)
            else:
                raise exc.UnsupportedSyntax(
                    f"{type(stmt).__name__} statements are not supported in device code.", self.location)

    def check_in_place_update(self, target: Any, symbol: str) -> None:
        """`x op= v` on a device value `target` (at the running statement, or in a helper it
        calls) that another name holds, or a view relation of it, and reads later (`b = a;
        a += 1; ... b`, `r = bump(a, w)` whose `v += w` updates `a`, `col = a[:, 0]`): torch
        would change that name's tensor too; refused (both modes call this, shared_values.py)."""
        stmt = self.statement
        if stmt is None or not self.semantics.is_device_value(target):
            return
        rebound = stored_names(stmt)
        others = sorted(name for name in self._mentioned - rebound if name in self.scope  # only these are read
                        and self.shared.related(target, self.scope[name]) and read_after(self._blocks, stmt, name))
        if others:
            refuse_shared_update(stmt, symbol, others[0], self.location_of(stmt))

    def _check_carried_updates(self, loop: ast.For, assigned: list[str]) -> None:
        """`check_in_place_update` for the updates in an inner loop's body of a value another
        name holds from before the loop (`prev = acc`, then `acc += x` in the loop): tracing
        carries the updated name alone, so the check is made when the loop starts."""
        def read_later(other: str) -> bool:  # in the body, or after the loop if the body keeps it
            return reads_before_assigning(loop.body, other) or (
                other not in assigned and read_after(self._blocks, loop, other))

        for node in (node for body in loop.body for node in ast.walk(body)):
            if not (isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name)
                    and reads_before_assigning(loop.body, node.target.id)):
                continue
            value = self.scope.get(node.target.id, MISSING)
            if not self.semantics.is_device_value(value):
                continue
            others = sorted(other for other in self._mentioned if other in self.scope and other != node.target.id
                            and self.shared.related(value, self.scope[other]) and read_later(other))
            if others:
                refuse_shared_update(node, "", others[0], self.location_of(node))

    def _unless(self, guard: ast.If, rest: list[ast.stmt]) -> None:
        """`if <test>: continue` followed by `rest`: `rest` runs when the test is false, as the
        else branch of an if with nothing in its then branch (a device test is traced into
        an IfBlock; a host one picks while tracing)."""
        test = self.semantics.if_condition(guard)
        if self.semantics.is_device_condition(test):
            skip = ast.copy_location(ast.If(test=guard.test, body=[], orelse=list(rest)), guard)
            self.semantics.device_if(skip, test)
        elif not self.branch(guard, test):
            self.run_device_block(rest, loop_body=True)

    def python_loop(self, stmt: ast.For, iterable: Any, run_block: Callable) -> bool:
        """A `for` over a Python iterable around device code: unrolled. True once a `return` ran."""
        location = self.location_of(stmt)
        if stmt.orelse or any(isinstance(n, (ast.Break, ast.Continue)) for n in ast.walk(stmt)):
            raise exc.UnsupportedSyntax("break/continue/else in a loop around device code are not supported.",
                                        location)
        self.semantics.check_python_iterable(iterable, location)
        outer = self.python_loops
        try:
            for iteration, item in enumerate(iterable):
                self.python_loops = outer + ((id(stmt), iteration),)
                self.assign(stmt.target, item, stmt)
                if run_block(stmt.body):
                    return True
        finally:
            self.python_loops = outer
        return False

    def assign(self, target: ast.expr, value: Any, stmt: ast.stmt) -> None:
        """Bind a loop target (a name or a tuple of names) to `value`."""
        if isinstance(target, ast.Name):
            self.scope[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = list(value)
            if len(values) != len(target.elts):
                raise exc.UnsupportedSyntax(f"Cannot unpack {len(values)} values into {len(target.elts)} names.",
                                            self.location_of(stmt))
            for element, item in zip(target.elts, values):
                self.assign(element, item, stmt)
        else:
            raise exc.UnsupportedSyntax("Loop targets must be names or tuples of names.", self.location_of(stmt))

    # --------------------------------------------------------- tile loops --

    def _body_runner(self, stmt: ast.For) -> Callable[[Any], None]:
        def run_body(loop_variable: Any) -> None:
            self.assign(stmt.target, loop_variable, stmt)
            self.run_device_block(stmt.body, loop_body=True)

        return run_body

    def _device_loop(self, stmt: ast.For, spec: hl.TileIterable) -> None:
        if stmt.orelse:
            raise exc.UnsupportedSyntax("for ... else on a device loop is not supported.", self.location_of(stmt))
        state = LoopState(stmt, self.scope, self.semantics.is_device_value, reads_before_assigning)
        self.semantics.device_loop(stmt, spec, self._body_runner(stmt))
        state.check(self.scope, self.location_of(stmt))

    def _inner_loop(self, stmt: ast.For, spec: hl.TileIterable) -> None:
        """Device values assigned in an inner loop do not escape it, but for the carried ones:
        after it their names are unbound (`scoped_out` says why when one is read), whatever
        they named before (a global too: assigned in the kernel, a name is the kernel's own).
        Host values it assigns keep their value from the body (the same at every tile)."""
        location = self.location_of(stmt)
        if stmt.orelse:
            raise exc.UnsupportedSyntax("for ... else on a device loop is not supported.", location)
        assigned = assigned_names(stmt.body)
        before = {name: self.scope.get(name, MISSING) for name in assigned}
        self._check_carried_updates(stmt, assigned)
        state = LoopState(stmt, self.scope, self.semantics.is_device_value, reads_before_assigning)
        may_carry = [name for name in assigned
                     if reads_before_assigning(stmt.body, name) or read_after(self._blocks, stmt, name)]
        carried = self.semantics.inner_loop(stmt, spec, self._body_runner(stmt), may_carry)
        state.check(self.scope, location)
        for name, old in before.items():
            if name in carried:
                continue
            new = self.scope.get(name, MISSING)
            if not self.semantics.is_device_value(new):
                continue
            if old is not MISSING and reads_before_assigning(stmt.body, name):  # `s = 0.0`; `s = s + x[t]`
                raise exc.UnsupportedOperation(
                    f"'{name}' is {_host_text(old)} before this loop and a device value updated in it: only "
                    "a device tensor assigned before a loop is carried from tile to tile. Start it as one "
                    f"(e.g. {name} = hl.zeros([tile, ...], dtype=...) or hl.full(..., value)).", location)
            self.scope.pop(name, None)
            self.scoped_out[name] = (
                f"'{name}' is computed inside the loop at line {location.lineno} and read after that loop "
                "ended: a loop's body runs once per tile, and only the values it carries come out of it "
                "(a device tensor assigned before the loop and updated in it).")
        self.scope.update(carried)


def mentioned_names(stmts: list[ast.stmt]) -> frozenset[str]:
    """Every name `stmts` mention (only these can be read by them)."""
    return frozenset(node.id for stmt in stmts for node in ast.walk(stmt) if isinstance(node, ast.Name))


def assigned_names(stmts: list[ast.stmt]) -> list[str]:
    """The names a block of statements assigns, sorted."""
    return sorted({node.id for stmt in stmts for node in ast.walk(stmt)
                   if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)})


def statement_blocks(body: list[ast.stmt]) -> dict[int, tuple[list[ast.stmt], int, ast.stmt | None]]:
    """Where each statement of a kernel's body sits: (its block, its index in it, the
    statement owning the block; None for the body itself), by the statement's id."""
    blocks = {}

    def visit(block: list[ast.stmt], owner: ast.stmt | None) -> None:
        for index, stmt in enumerate(block):
            blocks[id(stmt)] = (block, index, owner)
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    visit(inner, stmt)
            for handler in getattr(stmt, "handlers", ()):
                visit(handler.body, stmt)

    visit(body, None)
    return blocks


def read_after(blocks: dict[int, tuple[list[ast.stmt], int, ast.stmt | None]], stmt: ast.stmt,
               name: str) -> bool:
    """Whether `name` may be read after `stmt` ends, before being assigned again: by the
    statements after it in each enclosing block, or by an enclosing loop's next step.
    Conservative: a read on any path counts."""
    while id(stmt) in blocks:
        block, index, owner = blocks[id(stmt)]
        first = _block_first_use(block[index + 1:], name)
        if first is not None:
            return first == "read"
        if isinstance(owner, (ast.For, ast.While)) and _block_first_use(owner.body, name) == "read":
            return True
        stmt = owner
    return False


def reads_before_assigning(stmts: list[ast.stmt], name: str) -> bool:
    """Whether a run of `stmts` may read `name` before assigning it (a loop body that does
    reads the previous tile's value: a value carried from tile to tile)."""
    return _block_first_use(stmts, name) == "read"


def _first_use(node: ast.stmt, name: str) -> str | None:
    """'read' if `node` may read `name` before assigning it, 'write' if it surely assigns it
    first, None if it does neither surely (conservative: a read on any path counts)."""
    def reads(*exprs) -> bool:
        return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
                   for e in exprs if e is not None for n in ast.walk(e))

    def writes(*targets) -> bool:
        return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
                   for t in targets for n in ast.walk(t))

    if isinstance(node, ast.AugAssign):
        return "read" if reads(node.value) or writes(node.target) else None
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return "read" if reads(node.value, *targets) else "write" if writes(*targets) else None
    if isinstance(node, ast.If):
        if reads(node.test):
            return "read"
        branches = [_block_first_use(node.body, name), _block_first_use(node.orelse, name)]
        return "read" if "read" in branches else "write" if branches == ["write", "write"] else None
    if isinstance(node, (ast.For, ast.While, ast.With)):
        header = [node.iter] if isinstance(node, ast.For) else [node.test] if isinstance(node, ast.While) else \
            [item.context_expr for item in node.items]
        if reads(*header):
            return "read"
        if isinstance(node, ast.For) and writes(node.target):  # the body reads the loop variable
            return None  # (and a loop that runs no step assigns nothing)
        inner = _block_first_use(node.body, name)
        return "read" if inner == "read" else None  # a loop's body may not run
    return "read" if reads(node) else "write" if writes(node) else None


def _block_first_use(stmts: list[ast.stmt], name: str) -> str | None:
    """`_first_use` of the first statement of `stmts` that surely reads or writes `name`."""
    for stmt in stmts:
        first = _first_use(stmt, name)
        if first is not None:
            return first
    return None


def _host_text(value: Any) -> str:
    return f"the Python {type(value).__name__} {value!r}" if isinstance(value, (int, float, bool)) else \
        f"a host value ({type(value).__name__})"


def restore(scope: dict[str, Any], before: dict[str, Any]) -> None:
    """Give names their values from before a block (`MISSING`: the name had none)."""
    for name, value in before.items():
        if value is MISSING:
            scope.pop(name, None)
        else:
            scope[name] = value


def kernel_scope(fn: Callable) -> dict[str, Any]:
    """The scope a kernel's statements run in: its globals, then its closure variables."""
    scope = dict(fn.__globals__)
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        scope[name] = cell.cell_contents
    return scope


def loop_names(target: ast.expr, count: int, kind: str) -> list[str]:
    """A name per dim of a tile/grid loop: the target's names, else numbered from it."""
    if isinstance(target, ast.Tuple) and len(target.elts) == count and all(
            isinstance(e, ast.Name) for e in target.elts):
        return [e.id for e in target.elts]
    base = target.id if isinstance(target, ast.Name) else kind
    return [base] if count == 1 else [f"{base}_{i}" for i in range(count)]


def _is_continue_guard(stmt: ast.stmt) -> bool:
    """`if <test>: continue` with no else."""
    return (isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1
            and isinstance(stmt.body[0], ast.Continue))


BOOL_OP_NAME = "__pallasite_bool_op__"


class _BoolOpsAsCalls(ast.NodeTransformer):
    """`a and b` -> `__pallasite_bool_op__(True, [lambda: a, lambda: b])` (`or`: False;
    `not a`: None, [lambda: a])."""

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        self.generic_visit(node)
        if not isinstance(node.op, ast.Not):
            return node
        return ast.copy_location(_bool_op_call(None, [node.operand]), node)

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.expr:
        self.generic_visit(node)
        return ast.copy_location(_bool_op_call(isinstance(node.op, ast.And), node.values), node)


def _bool_op_call(is_and: bool | None, operands: list[ast.expr]) -> ast.Call:
    no_arguments = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
    thunks = [ast.Lambda(args=no_arguments, body=operand) for operand in operands]
    return ast.Call(func=ast.Name(BOOL_OP_NAME, ast.Load()),
                    args=[ast.Constant(is_and), ast.List(thunks, ast.Load())], keywords=[])
