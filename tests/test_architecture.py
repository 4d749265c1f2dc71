"""The architecture's rules, checked on the source (issue 21): each stage imports only the
stages below it (no import circle), no function in `pallasite/` is over 80 lines, no
regular expression reads generated code, and the architecture pages (docs/ARCHITECTURE.md
and docs/design/) name only files and symbols that exist."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pallasite"
MAX_FUNCTION_LINES = 80


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def import_graph() -> dict[str, set[str]]:
    """Module -> the pallasite modules it imports (at any depth of its code, so an import
    inside a function or under TYPE_CHECKING counts: it is still a dependency)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, path, node)
                # `from pkg import sub`: the submodule when it is one, else the package
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_no_import_circle():
    circles = import_circles(import_graph())
    assert not circles, "modules that import each other (directly or around a circle):\n" + "\n".join(
        " <-> ".join(circle) for circle in circles)


def test_the_checker_sees_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(graph) == [["a", "b", "c"]]


def test_no_function_over_80_lines():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    assert not long, "functions over 80 lines:\n" + "\n".join(long)


def test_codegen_reads_no_generated_code_with_regular_expressions():
    """Generated code is a tree until it is rendered: nothing in codegen/ parses text back."""
    users = [str(path.relative_to(ROOT)) for path in sorted((PACKAGE / "codegen").rglob("*.py"))
             if any(isinstance(node, (ast.Import, ast.ImportFrom)) and
                    any(alias.name == "re" for alias in node.names) or
                    isinstance(node, ast.ImportFrom) and node.module == "re"
                    for node in ast.walk(ast.parse(path.read_text())))]
    assert not users, f"codegen modules importing re: {users}"


def _defines(path: Path, symbol: str) -> bool:
    """Whether `path` defines `symbol` (a top-level def, class or assignment; `Class.attr`
    for a member)."""
    scopes = [ast.parse(path.read_text())]
    for part in symbol.split("."):
        found = None
        for scope in scopes:
            for node in scope.body:
                names = []
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names = [node.name]
                elif isinstance(node, ast.Assign):
                    names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    names = [node.target.id]
                if part in names:
                    found = node
        if found is None:
            return False
        scopes = [found] if isinstance(found, ast.ClassDef) else []
    return True


def _where_to_add() -> str:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    start = text.index("## Where to add")
    return text[start:text.index("\n## ", start + 1)]


def test_where_to_add_names_only_files_and_symbols_that_exist():
    section = _where_to_add()
    named = re.findall(r"`((?:pallasite|tests)/[\w/]*\.py|pallasite/[\w/]+/)(?::([\w.]+))?`", section)
    assert len(named) > 20  # the section is read, not skipped
    missing = []
    for path, symbol in named:
        file = ROOT / path
        if not file.exists():
            missing.append(path)
        elif symbol and not _defines(file, symbol):
            missing.append(f"{path}:{symbol}")
    assert not missing, f"docs/ARCHITECTURE.md 'Where to add' names what does not exist: {missing}"


def test_the_first_three_additions_touch_at_most_three_files():
    section = _where_to_add()
    for item in ("(a)", "(b)", "(c)"):
        entry = section[section.index(f"**{item}"):].split("\n- **")[0]
        counted = re.search(r"— (\d) files?:", entry)
        assert counted and int(counted.group(1)) <= 3, entry


DOC_PAGES = [ROOT / "docs" / "ARCHITECTURE.md", *sorted((ROOT / "docs" / "design").glob("*.md"))]
_SEARCHED = ("pallasite", "tests", "benchmarks", "examples", "docs")


def _files_named(path: str) -> list[Path]:
    """The files a page's backticked `path` may mean: relative to the repository or to one of
    its top folders (`plan/memory.py` is pallasite/plan/memory.py), or, a bare file name
    written inside its package's section (`memory.py`), any file of that name."""
    found = [ROOT / path, *(ROOT / top / path for top in _SEARCHED)]
    found = [file for file in found if file.exists()]
    if not found and "/" not in path:
        found = [file for top in _SEARCHED for file in (ROOT / top).rglob(path)]
    return found


def test_architecture_pages_name_only_files_and_symbols_that_exist():
    missing = []
    for page in DOC_PAGES:
        named = re.findall(r"`([\w./-]+\.(?:py|md))(?::([\w.]+))?`", page.read_text())
        assert named, page  # the page is read, not skipped
        for path, symbol in named:
            files = _files_named(path)
            if not files:
                missing.append(f"{page.name}: {path}")
            elif symbol and not any(_defines(file, symbol) for file in files if file.suffix == ".py"):
                missing.append(f"{page.name}: {path}:{symbol}")
    assert not missing, "the architecture pages name what does not exist:\n" + "\n".join(missing)


def test_the_design_pages_are_each_listed_on_the_map():
    listed = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    unlisted = [page.name for page in DOC_PAGES[1:] if f"`docs/design/{page.name}`" not in listed]
    assert not unlisted, f"docs/design pages ARCHITECTURE.md does not list: {unlisted}"
