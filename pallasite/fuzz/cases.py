"""A generated kernel as data: source lines, named dims, inputs and a config.

A case is kept structured (not only as text) so the shrinker can drop a line,
shrink a dim or a block size and render the result again; the same rendering
feeds the runner and the regression tests it writes, so both run the same code.
"""
from __future__ import annotations

import importlib.util
import re
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

DTYPE_NAMES = {torch.float32: "torch.float32", torch.bfloat16: "torch.bfloat16", torch.int32: "torch.int32",
               torch.bool: "torch.bool", torch.float16: "torch.float16", torch.int8: "torch.int8",
               torch.int16: "torch.int16", torch.int64: "torch.int64", torch.uint8: "torch.uint8"}


@dataclass(frozen=True)
class Line:
    """One source line of the kernel function body (indent counted in levels below `def`)."""

    indent: int
    text: str
    droppable: bool = False  # the shrinker may delete it or replace its expression by an operand


@dataclass(frozen=True)
class InputSpec:
    """A kernel argument: a tensor shaped by named dims, or jagged offsets from `Case.segments`."""

    name: str
    dims: tuple[str | int, ...] = ()
    dtype: torch.dtype = torch.float32
    # "randn" | "randint" | "large" (int32 past int32 in sums) | "bytes" | "bool" | "offsets" | "positive" | "index:<dim>" (in [0, dim))
    # | "sentinel:<dim>" (in [-1, dim): -1 marks "no row", about one in four) | "specials" (randn
    # with NaN, inf and -inf) | "int:<value>" (a Python int argument, not a tensor)
    fill: str = "randn"

    def expression(self, case: Case, seed: int) -> str:
        """Python source building this input (deterministic: its own seeded generator)."""
        if self.fill == "offsets":
            return f"torch.tensor({list(case.offsets())}, dtype={DTYPE_NAMES[self.dtype]})"
        if self.fill.startswith("int:"):  # a runtime int argument: the number itself
            return self.fill[4:]
        shape = ", ".join(str(case.size(d)) for d in self.dims)
        shape = f"({shape},)" if len(self.dims) == 1 else f"({shape})"
        generator = f"torch.Generator().manual_seed({seed})"
        if self.fill.startswith("index:"):  # indices into a named dim, duplicates included
            return (f"torch.randint(0, {case.size(self.fill[6:])}, {shape}, generator={generator}, "
                    f"dtype={DTYPE_NAMES[self.dtype]})")
        if self.fill.startswith("sentinel:"):
            return (f"torch.randint(0, {case.size(self.fill[9:])}, {shape}, generator={generator}, "
                    f"dtype={DTYPE_NAMES[self.dtype]}).masked_fill(torch.randn({shape}, generator={generator}) "
                    "< -0.67, -1)")
        if self.fill == "bytes":  # uint8's whole range
            return f"torch.randint(0, 256, {shape}, generator={generator}, dtype={DTYPE_NAMES[self.dtype]})"
        if self.fill == "large":  # int32 values whose sums leave int32 (torch's int64 holds them)
            return f"torch.randint(-2**30, 2**30, {shape}, generator={generator}, dtype={DTYPE_NAMES[self.dtype]})"
        if self.fill == "randint":
            return f"torch.randint(-8, 9, {shape}, generator={generator}, dtype={DTYPE_NAMES[self.dtype]})"
        if self.fill == "bool":  # about half True
            return f"torch.randn({shape}, generator={generator}) > 0"
        value = f"torch.randn({shape}, generator={generator})"
        if self.fill == "specials":  # about 1 in 20 of each: NaN, inf, -inf
            value = (f"(lambda u, r: r.masked_fill(u < 0.05, float('nan')).masked_fill(u > 0.95, float('inf'))"
                     f".masked_fill((u > 0.5) & (u < 0.55), float('-inf')))(torch.rand({shape}, "
                     f"generator=torch.Generator().manual_seed({seed + 1})), {value})")
        if self.fill == "positive":
            value = f"{value}.abs().add(0.5)"
        if self.dtype != torch.float32:
            value = f"{value}.to({DTYPE_NAMES[self.dtype]})"
        return value


@dataclass(frozen=True)
class ScopeConstant:
    """A global or closure constant the kernel reads: its first value (Python source) and
    the statement that changes it between the case's two calls (None: left as it is)."""

    name: str
    value: str
    change: str | None = None


@dataclass(frozen=True)
class Case:
    """One generated kernel with its inputs and config."""

    kind: str
    name: str  # the kernel function's name, unique per (seed, case)
    inputs: tuple[InputSpec, ...]
    body: tuple[Line, ...]  # after the `def` line, at one indent
    dims: dict[str, int] = field(default_factory=dict)
    segments: tuple[int, ...] = ()  # jagged segment lengths; the dim "T" is their sum
    block_sizes: tuple[int, ...] | None = None  # None: chosen after binding (`with_config`)
    loop_type: str | tuple[str, ...] | None = None  # a tuple: one per inner loop (source order)
    # other config keys (`pallas_load_buffer_count`, `pallas_pre_broadcast`, `reduction_loops`),
    # drawn with the block sizes
    knobs: tuple[tuple[str, Any], ...] = ()
    data_seed: int = 0
    exact: bool = False  # integer / argmax results: compared exactly
    tags: tuple[str, ...] = ()  # forms this case exercises (e.g. "lane_accumulator")
    # Read by the kernel from its module (or, `closure`, from a factory function's scope); the
    # runner calls the kernel, runs `rebind_constants()`, then compares the second call.
    constants: tuple[ScopeConstant, ...] = ()
    closure: bool = False
    static_shapes: bool = True  # False: `@pallasite.kernel(static_shapes=False)`, sizes as formulas
    # tensor inputs passed together as one list argument, `group`, after the others (the body
    # reads `name = group[i]` first)
    grouped: tuple[str, ...] = ()

    def size(self, dim: str | int) -> int:
        if isinstance(dim, int):
            return dim
        if dim == "T":
            return sum(self.segments)
        return self.dims[dim]

    def offsets(self) -> tuple[int, ...]:
        bounds = [0]
        for length in self.segments:
            bounds.append(bounds[-1] + length)
        return tuple(bounds)

    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = {}
        if self.block_sizes is not None:
            config["block_sizes"] = list(self.block_sizes)
        if self.loop_type is not None:
            config["pallas_loop_type"] = list(self.loop_type) if isinstance(self.loop_type, tuple) else self.loop_type
        config.update((key, list(value) if isinstance(value, tuple) else value) for key, value in self.knobs)
        return config

    def imports(self) -> list[str]:
        return ["import math", *(["import types"] if any("types." in c.value for c in self.constants) else []),
                "", "import torch", "", "import pallasite", "import pallasite.language as hl"]

    def source(self) -> str:
        """The kernel module's source: imports, then the decorated function (with `constants`:
        their definitions before it and `rebind_constants()` after it)."""
        params = ", ".join([spec.name for spec in self.inputs if spec.name not in self.grouped]
                           + (["group"] if self.grouped else []))
        decorator = "@pallasite.kernel" if self.static_shapes else "@pallasite.kernel(static_shapes=False)"
        kernel = [decorator, f"def {self.name}({params}):"]
        kernel += [f"    {name} = group[{index}]" for index, name in enumerate(self.grouped)]
        kernel += ["    " * (line.indent + 1) + line.text for line in self.body]
        if not self.constants:
            return "\n".join([*self.imports(), "", "", *kernel]) + "\n"
        return "\n".join([*self.imports(), "", "", *self._with_constants(kernel)]) + "\n"

    def _with_constants(self, kernel: list[str]) -> list[str]:
        definitions = [f"{c.name} = {c.value}" for c in self.constants]
        rebind = ["def rebind_constants():", '    """The values of the constants at the second call."""',
                  f"    {'nonlocal' if self.closure else 'global'} {', '.join(c.name for c in self.constants)}"]
        rebind += [f"    {c.change}" for c in self.constants if c.change]
        if not self.closure:
            return [*definitions, "", "", *kernel, "", "", *rebind]
        inner = [*definitions, "", *kernel, "", *rebind, "", f"return {self.name}, rebind_constants"]
        return [f"def make_{self.name}():", *("    " + line if line else "" for line in inner), "", "",
                f"{self.name}, rebind_constants = make_{self.name}()"]

    def input_lines(self) -> list[str]:
        """`name = <expression>` per input."""
        return [f"{spec.name} = {spec.expression(self, self.data_seed * 16 + i)}"
                for i, spec in enumerate(self.inputs)]

    def make_inputs(self) -> tuple[Any, ...]:
        namespace: dict[str, Any] = {"torch": torch}
        for text in self.input_lines():
            exec(text, namespace)  # noqa: S102 - our own generated input expressions
        return eval(self.call_arguments(), namespace)  # noqa: S307 - names this case defines

    def call_arguments(self) -> str:
        """The kernel's arguments as a tuple expression of the inputs' names (`(x, [w, y])`)."""
        names = [spec.name for spec in self.inputs if spec.name not in self.grouped]
        if self.grouped:
            names.append(f"[{', '.join(self.grouped)}]")
        return f"({', '.join(names)},)"

    def with_(self, **changes: Any) -> Case:
        return replace(self, **changes)

    def with_index_dtype(self, dtype: torch.dtype) -> Case:
        """The case with its offsets and index tensors in `dtype` (int64: torch's default
        integer type, which the host narrows to int32 where the kernel reads them as indices)."""
        if dtype == torch.int32:
            return self
        indices = ("offsets", "index:", "sentinel:")
        inputs = tuple(replace(spec, dtype=dtype) if spec.fill.startswith(indices) else spec for spec in self.inputs)
        if inputs == self.inputs:
            return self
        return replace(self, inputs=inputs, tags=(*self.tags, f"{DTYPE_NAMES[dtype].removeprefix('torch.')}_indices"))


_MODULE_DIR: Path | None = None
_LOADED = 0


def load_kernel(case: Case) -> Any:
    """Write the case's source to a real file (pallasite reads kernels with `inspect`) and import it."""
    global _MODULE_DIR, _LOADED
    if _MODULE_DIR is None:
        _MODULE_DIR = Path(tempfile.mkdtemp(prefix="pallasite_fuzz_"))
    _LOADED += 1
    module_name = f"pallasite_fuzz_case_{_LOADED}"
    path = _MODULE_DIR / f"{module_name}.py"
    path.write_text(case.source())
    spec = importlib.util.spec_from_file_location(module_name, path)
    module: ModuleType = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return getattr(module, case.name)


def unload_all() -> None:
    """Forget the modules this process imported for cases (they are not reused)."""
    for name in [n for n in sys.modules if n.startswith("pallasite_fuzz_case_")]:
        del sys.modules[name]


_NAME = re.compile(r"\b[a-z]\w*\b")


def assigned_name(line: Line) -> str | None:
    """`v3` for `v3 = ...` (plain single-name assignments only)."""
    match = re.match(r"^([A-Za-z_]\w*) = (.+)$", line.text)
    return match.group(1) if match else None


def operand_names(line: Line, known: set[str]) -> list[str]:
    """The previously assigned names a line's expression reads, in order of appearance."""
    match = re.match(r"^[A-Za-z_]\w* = (.+)$", line.text)
    if not match:
        return []
    seen: list[str] = []
    for name in _NAME.findall(match.group(1)):
        if name in known and name not in seen:
            seen.append(name)
    return seen
