"""The supported-forms page (docs/supported-forms.md), generated from where the facts live.

Every row comes from the definition it describes, so adding a form is adding its facts
there, never editing the page:
- torch ops: the op registry (`ir/ops`): each `OpDef`'s spellings and Python operator, its
  `dtypes` and `note`, and facts of its kind (`Elementwise.transcendental`, a `Reduction`'s
  accumulator and partials, the runtime function its lowering calls); each `Composite`'s
  spellings, `dtypes` and `note`; the torch allocations (`Factory`);
- index forms: the `FORM` of each index item type (`ir/nodes.py`), and the frontend's
  combined and refused subscripts (`frontend/indexing.py:SUBSCRIPT_FORMS`, `REFUSED_FORMS`);
- `hl`: each name of `pallasite.language.__all__` with the first paragraph of its
  docstring; the names a TPU has no equivalent of with their `why` and `instead`;
- refused torch functions with a hint (`frontend/torch_names.py`).

`python -m pallasite forms --write` writes the page; `tests/test_supported_forms.py` fails
when the committed page differs, and names the fact a new op, item type or `hl` name lacks.
Section headings are the anchors errors point to (`exc.supported_forms_pointer`).
"""
from __future__ import annotations

import inspect
import typing
from pathlib import Path
from typing import Any, Iterable

import torch
import torch.nn.functional as F

from . import exc
from . import language as hl
from .codegen.lowering import IMPORTS
from .frontend import indexing
from .frontend.torch_names import refused_hints
from .ir import nodes
from .ir import ops
from .ir.index_forms import IndexForm
from .ir.ops import OpDef, OpKind

REGENERATE = "python -m pallasite forms --write"
PAGE_PATH = Path(__file__).resolve().parent.parent / exc.SUPPORTED_FORMS_PAGE

# Each kind of op gets a section of the page: (heading, what its ops have in common).
KIND_SECTIONS: dict[OpKind, tuple[str, str]] = {
    OpKind.ELEMENTWISE: ("Elementwise", "Lane by lane; operands broadcast and promote as in torch (a Python "
                         "number is a weak scalar). EUP: through the TPU's transcendental unit."),
    OpKind.REDUCTION: ("Reductions", "Over `dim` (an int, a list where noted, or every axis), with `keepdim`; "
                       "a partial tile's padding becomes the reduction's identity first."),
    OpKind.CONTRACTION: ("Matrix products", "The last axis of the first factor with the second-to-last of the "
                         "second; padded contracted lanes become 0 first."),
    OpKind.VIEW: ("Views", "Move or relabel elements without computing."),
    OpKind.INDEXED: ("Indexed", "Read positions an index tensor holds."),
}
# Kinds no user spells: written by `hl` functions and the kernel emitter (see the hl section).
UNSPELLED_KINDS = (OpKind.CREATION, OpKind.STRUCTURAL)

# Python's operator methods, as a user writes them.
_OPERATOR_TEXT = {
    "__add__": "a + b", "__sub__": "a - b", "__mul__": "a * b", "__truediv__": "a / b",
    "__floordiv__": "a // b", "__mod__": "a % b", "__pow__": "a ** b", "__matmul__": "a @ b",
    "__and__": "a & b", "__or__": "a | b", "__xor__": "a ^ b", "__lshift__": "a << b", "__rshift__": "a >> b",
    "__neg__": "-a", "__pos__": "+a", "__abs__": "abs(a)", "__invert__": "~a",
    "__lt__": "a < b", "__le__": "a <= b", "__gt__": "a > b", "__ge__": "a >= b", "__eq__": "a == b",
    "__ne__": "a != b",
}
_PYTHON_SYNTAX = {"getitem": "v[...]"}  # spellings that are Python syntax, not a torch callable
_DTYPE_GROUPS = (("floats", ops.FLOATS), ("ints", ops.INTEGERS), ("bool", ops.BOOL))
_DTYPE_ORDER = (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int16, torch.int8, torch.uint8,
                torch.bool)


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as '-'."""
    kept = "".join(c for c in heading.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


# ------------------------------------------------------------- one row --


def spelling_texts(name: str) -> list[str]:
    """How a user writes spelling `name`: the torch function, the Tensor method,
    torch.nn.functional's and torch.special's, or Python syntax."""
    if name in _PYTHON_SYNTAX:
        return [_PYTHON_SYNTAX[name]]
    texts = []
    for owner, text in ((torch, f"torch.{name}"), (torch.Tensor, f"x.{name}()"), (F, f"F.{name}"),
                        (torch.special, f"torch.special.{name}")):
        if callable(getattr(owner, name, None)):
            texts.append(text)
    return texts


def op_spellings(op: OpDef) -> list[str]:
    texts = [text for spelling in op.spellings for text in spelling_texts(spelling.name)]
    if op.operator is not None:
        texts.append(_OPERATOR_TEXT[op.operator.dunder])
    return list(dict.fromkeys(texts))


def dtype_text(dtypes: Iterable[torch.dtype]) -> str:
    """A dtype set in the page's words: whole groups by name, the rest one by one."""
    left, words = set(dtypes), []
    for word, group in _DTYPE_GROUPS:
        if group <= left:
            words.append(word)
            left -= group
    words += [str(d).removeprefix("torch.") for d in _DTYPE_ORDER if d in left]
    return ", ".join(words)


def derived_notes(op: OpDef) -> list[str]:
    """What the registry's facts of its kind say about an op (beside its own `note`)."""
    notes = []
    if op.transcendental:
        notes.append("EUP")
    if op.reduction is not None:
        if op.reduction.accumulator.widens_half_floats:
            notes.append("16-bit floats accumulate in float32")
        if op.reduction.partials is None:
            notes.append("reduced in one piece (a reduction loop does not split its dim)")
    if op.name in IMPORTS:  # the runtime function its lowering calls, and the import's comment: why
        helper = IMPORTS[op.name][0]
        source, _, name = helper.statement.removeprefix("from ").partition(" import ")
        why = helper.comment.removeprefix("# ").replace(" (see its docstring)", "")
        notes.append(f"`{source}.{name}`: {why}")
    return notes


def _code(texts: Iterable[str]) -> str:
    return ", ".join(f"`{t}`" for t in texts)


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """A markdown table; '|' in a cell is escaped (also inside code, as GitHub's tables need)."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows] + [""]


def _sentence(text: str) -> str:
    text = text.strip()
    return text if not text or text.endswith((".", ")", "`")) else text + "."


def _notes(*parts: str) -> str:
    return "; ".join(part for part in parts if part)


# ------------------------------------------------------------ sections --


def _op_row(op: OpDef) -> tuple[str, ...]:
    return (f"`{op.name}`", _code(op_spellings(op)), dtype_text(op.dtypes or ()),
            _notes(*derived_notes(op), op.note))


def op_sections() -> list[str]:
    lines = ["## Ops", "",
             "Torch functions, Tensor methods and Python operators on device values (inside `hl.tile` / "
             "`hl.grid` loops). Host code (outside them) is compiled with the kernel and takes these ops on "
             "whole tensors, but for the few built on a device loop's steps (scans such as torch.cumsum, torch.flip, "
             "torch.tril/triu): those are refused there by name; compute them before calling the kernel. "
             "`F` is `torch.nn.functional`; `x.name()` is the Tensor method. A spelling refused in device "
             "code raises `pallasite.exc.UnsupportedOperation` pointing here.", ""]
    for kind, (heading, summary) in KIND_SECTIONS.items():
        rows = [_op_row(op) for op in ops.OPS.values() if op.kind is kind and (op.spellings or op.operator)]
        lines += [f"### {heading}", "", summary, ""]
        lines += _table(("Op", "Spellings", "Dtypes", "Notes"), rows)
    lines += ["### Composites", "",
              "Recorded as several of the ops above (so partial tiles are masked like theirs).", ""]
    composites = {c.name: c for c in ops.COMPOSITES.values()}.values()
    lines += _table(("Function", "Spellings", "Dtypes", "Notes"), [
        (f"`{c.name}`", _code(t for name in c.spellings for t in spelling_texts(name)), dtype_text(c.dtypes or ()),
         c.note) for c in composites])
    lines += ["### Allocations", "",
              "In host code these allocate a tensor (its contents as the function says). In device code the "
              "`*_like` and `new_*` forms make a device value shaped by tiles and ints (like `hl.zeros` / "
              "`hl.full`; uninitialized is zeros); the others are refused there: use `hl.zeros` / `hl.full`.", ""]
    forms = {"size": "host code", "like": "host and device code", "new": "host and device code"}
    lines += _table(("Function", "Spellings", "Where"), [
        (f"`{f.name}`", _code(spelling_texts(f.name)), forms[f.form]) for f in ops.FACTORIES.values()])
    lines += [HOST_ARANGE, "", HOST_TENSOR, "", HOST_ITEM, ""]
    return lines


# frontend/host_program.py `HostProgram.arange`
HOST_ARANGE = ("`torch.arange(start, end, step, dtype=...)` in host code, of compile-time numbers (sizes, "
               "constants, specialized scalars), allocates the ramp (built at each call) that device loops read "
               "like an argument: int32 (torch's default int64 is refused: pass `dtype=torch.int32`) or float32, "
               "whole-number start and step, values within int32. In device code write `hl.arange(n)` or "
               "`tile.index`.")

# frontend/op_recorder.py `OpRecorder.torch_function`; frontend/operands.py (0-d tensors in device code)
HOST_TENSOR = ("`torch.tensor(number, dtype=...)` in host code, of a compile-time number, is "
               "`torch.full([], number)`: a 0-d tensor (int64 without a dtype, as in torch: device code may not "
               "read that one; give `dtype=torch.int32`). A 0-d tensor used whole in device code "
               "(`torch.minimum(kv_len, limit)`) is its one value, as `limit[()]` reads it; it must be 32-bit "
               "(float32, int32, or int64 narrowed): a TPU kernel reads it as a scalar.")

# frontend/host_items.py
HOST_ITEM = ("`t[i].item()` in host code, of an integer element of a tensor argument chosen by numbers "
             "(`offsets[-1].item()`, `params[0, 1].item()`), is read from the data at each call and is a "
             "constant of the compiled variant (a new value compiles a new one): it may size tensors. A float "
             "element, or `.item()` of a value host code computes, is refused: read it in device code "
             "(`t[()]` or `t.item()` there).")


def tile_attribute_section() -> list[str]:
    lines = ["## Tile attributes", "",
             "A tile loop's variable (`for tile in hl.tile(n)`) has these attributes in device code, and "
             "`tile.block_size` (an int: the config's block size). Indexing with the tile itself is an index "
             "form (below).", "",
             "The last tile of a range its block does not divide is shorter: its extent. As in torch, a "
             "value read at such a tile meets only axes of its extent: stored into, or combined with, an axis "
             "of a fixed size or of another tile (a matmul contracting two tiles too), it is "
             "`pallasite.exc.ShapeMismatch` wherever an extent differs — when planning if the ranges are "
             "static or computed from the outer tiles, at run time in interpret mode if data decides them. "
             "Unlike torch, a value built from the block size (`hl.zeros([tm, tn.block_size])`, "
             "`hl.arange(tile.block_size)`) beside or into a partial tile is cut to the tile's extent, as "
             "Helion's masked tiles are (reference mode does the same).", "",
             "The sizes of a value along such a tile (`v.size(d)`, `v.shape`, `v.numel()`) are the tile's, as in "
             "torch: in arithmetic its extent, a device scalar (`v.sum(1) / v.size(1)` is the mean, "
             "`count + chunk.size(-1)` counts the valid elements), and as a size of a device value "
             "(`hl.zeros([v.size(0)])`, `v.new_ones(v.shape)`, `v.reshape(v.size(0), -1)`) the tile's axis, "
             "padding included; compared, its extent too (`if v.size(0) == 8:` is a device if); torch calls and builtin "
             "min/max take it as that device scalar (`torch.clamp(i, max=v.size(1))`), `hl.arange(v.size(1))` is the "
             "tile's lane positions. Such a size has no "
             "Python number (`math.sqrt(v.size(1))`, `range(v.size(0))`, `len(v)` are refused; `tile.block_size` "
             "is the block). Along a dim its blocks divide, sizes are ints.", ""]
    return lines + _table(("Attribute", "Value"), [
        (f"`tile.{attribute}`", op.note) for attribute, op in ops.TILE_ATTRIBUTES.items()])


def index_item_types() -> list[type]:
    """The index item types of the IR (what `frontend/indexing.py` normalizes a subscript into,
    and a narrowing read's items), each once."""
    items = [*typing.get_args(nodes.IndexItem), *typing.get_args(nodes.NarrowItem)]
    return list(dict.fromkeys(items))


def index_sections() -> list[str]:
    lines = ["## Index forms", "",
             "How device code indexes a tensor (`x[...]`, `hl.load`, `hl.store`, the target of `=` and `+=`). "
             "Items combine per axis (`x[g, tile, :]`). A refused subscript raises `pallasite.exc.IndexingError` "
             "pointing here.", ""]
    forms = [item.FORM for item in index_item_types()] + list(indexing.SUBSCRIPT_FORMS)
    lines += _table(("Form", "Examples", "Notes"), [(f.name, _code(f.examples), f.note) for f in forms])
    lines += ["### Refused index forms", "",
              "In the examples, `tile` is a tile of `x`'s first axis, `blk = x[tile, :]` and `v = blk`; `x`, "
              "`out` are float tensors, `idx`, `idx_a`, `idx_b`, `idx2d` int32 ones and `mask` a bool one.", ""]
    lines += _table(("Form", "Examples", "Why", "Write instead"), [
        (f.name, _code(f.examples), f.why, f.instead) for f in indexing.REFUSED_FORMS])
    return lines


def hl_entries() -> list[tuple[str, Any]]:
    return [(name, getattr(hl, name)) for name in hl.__all__]


def hl_summary(item: Any) -> str:
    """The first paragraph of an `hl` name's docstring, on one line."""
    doc = inspect.getdoc(item) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _hl_form(name: str, item: Any) -> str:
    """`hl.name(params)` as a user calls it: parameters and defaults, no annotations."""
    if not inspect.isfunction(item):
        return f"`hl.{name}`"
    params = []
    for param in inspect.signature(item).parameters.values():
        text = {param.VAR_POSITIONAL: f"*{param.name}", param.VAR_KEYWORD: f"**{param.name}"}.get(
            param.kind, param.name)
        if param.default is not param.empty:
            text += f"={param.default!r}"
        params.append(text)
    return f"`hl.{name}({', '.join(params)})`"


def hl_sections() -> list[str]:
    lines = ["## hl", "",
             "`import pallasite.language as hl` (Helion's `helion.language`).", ""]
    entries = hl_entries()
    lines += _table(("Name", "What it does"), [
        (_hl_form(name, item), hl_summary(item)) for name, item in entries if not hl.is_refused(item)])
    lines += ["### Refused hl names", "",
              "Helion names a TPU has no equivalent of: calling one raises "
              "`pallasite.exc.UnsupportedOperation` pointing here.", ""]
    lines += _table(("Name", "Why", "Write instead"), [
        (f"`hl.{name}`", _sentence(item.why), item.instead) for name, item in entries if hl.is_refused(item)])
    return lines


def refused_torch_section() -> list[str]:
    lines = ["## Refused torch functions", "",
             "Torch functions refused in device code with a hint (any other unlisted function is refused "
             "too, naming it).", ""]
    return lines + _table(("Function", "Write instead"), [
        (_code(spelling_texts(name) or [name]), hint.strip()) for name, hint in refused_hints().items()])


def dtype_section() -> list[str]:
    groups = ", ".join(f"{word} ({', '.join(str(d).removeprefix('torch.') for d in _DTYPE_ORDER if d in group)})"
                       for word, group in _DTYPE_GROUPS[:-1])
    return ["## Dtypes", "",
            f"A TPU vector holds {groups} and bool. The Dtypes column lists the input dtypes an op accepts (torch's rule); "
            "results follow torch's promotion, except that an int64 result is int32 in device code: torch's "
            "number while it fits int32. Where torch computes in int64 (an integer sum, prod, cumsum or "
            "cumprod, `.long()`, and integer arithmetic on such a value), an op could leave int32 and a later use "
            "needs torch's number (a comparison, division, index, float cast or int64 store), interpret "
            "mode recomputes it exactly and a number past int32 raises `exc.ShapeMismatch` at the line (reference "
            "mode too; a TPU does not check). A value only +, -, *, sums, bitwise ops and selections take on to a "
            "cast to int32, an int32 store or `h & 1023` is torch's answer past int32 too (hashes, checksums). "
            "Ask for int32 where torch would wrap too "
            "(`.sum(dim, dtype=torch.int32)`, `s.to(torch.int32) * k`); sums of bools or bytes are proven and "
            "not checked. 64-bit "
            "(float64, int64) and complex data are refused with `pallasite.exc.UnsupportedDtype` pointing "
            "here: cast to 32 bits first. int64 tensor arguments used only as indices, offsets or loop bounds "
            "are narrowed to int32 on the host, with a range check; host code may compute positions from them "
            "(`torch.where(idx < 0, idx + n, idx)`: +, -, *, // and % by numbers, min/max/clamp, neg/abs, where, "
            "casts), checked before each call to stay within int32. Device code may compute with such a "
            "tensor's values once it casts them where it reads them (`labels[tile].to(torch.int32) + 1`: torch "
            "computes in int32 from there too), and store them as read (`out[tile] = labels[tile]`: each value "
            "cast as torch casts it); computing with them uncast (`labels[tile] // 2`, int64 in torch) "
            "and storing the result is refused. Uncast integer steps that end in a float or a comparison "
            "(`(labels[t] * 1000).float()`, `labels[t].sum().float()`, a cumsum, a group's row mask "
            "`offsets[g] + tile.index < end` over a loop of static extent, one an int argument bounds, or with "
            "`hl.arange`) are followed as "
            "host steps are and checked before each call to stay within int32 (a step that could leave it is an "
            "`exc.KernelArgumentError` naming its line); a step without a range rule (a product with another "
            "tensor's values, positions of a loop whose extent data decides) is refused there, and "
            "so is a number past int32 beside an integer device value. An int64 tensor host code allocates "
            "(`torch.empty([m], "
            "dtype=torch.long)`, `torch.empty_like(labels)`) that the kernel only stores integers into (argmax's "
            "indices) is held as int32 and returned as int64; a device read of it, a float stored into it, "
            "host code using it, or a fill past int32 is refused.", "",
            "Numerics as a TPU computes them: float32 subnormals (below 2 ** -126) flush to zero in device code "
            "(torch keeps them; interpret mode flushes them too); 16-bit float ops are rounded to 16 bits at each op, "
            "as torch rounds them, float16 subnormals included, and a number (a literal or a float argument) a 16-bit "
            "value is multiplied, divided or floor-divided by is taken in float32, as torch's CPU takes it; "
            "a float cast to a 32-bit or narrower integer saturates (NaN is 0; "
            "torch calls an out-of-range value undefined), in both modes; `.long()` past int32 raises (torch's "
            "int64 is exact there). `abs` of the lowest integer is itself, as torch's. An integer `//`, `%`, `torch.fmod` "
            "or rounded `torch.div` by 0 is an error in both modes (torch's ZeroDivisionError; a TPU "
            "returns garbage): interpret mode checks each divisor planning cannot prove nonzero, on the lanes "
            "that hold data, and the call raises `pallasite.exc.ShapeMismatch` at the line.", ""]


def missing_facts() -> list[str]:
    """What a definition lacks for its row, each with where to add it (empty: none)."""
    problems = []
    dtype_hint = ("dtypes=ops.FLOATS / NUMBERS / EVERY_DTYPE / ... (the input dtypes torch accepts, within "
                  "EVERY_DTYPE) and, where its behaviour needs one, note=\"...\"")
    for op in ops.OPS.values():
        if op.kind not in KIND_SECTIONS and op.kind not in UNSPELLED_KINDS:
            problems.append(f"OpKind.{op.kind.name} (of op {op.name!r}) has no section: add it to "
                            "pallasite/supported_forms.py:KIND_SECTIONS")
        if (op.spellings or op.operator) and not op.dtypes:
            problems.append(f"op {op.name!r} has no dtypes: add {dtype_hint} to its OpDef entry "
                            "(pallasite/ir/ops/catalog.py or the module defining it)")
        elif op.dtypes and not op.dtypes <= ops.EVERY_DTYPE:
            problems.append(f"op {op.name!r} states dtypes a TPU vector cannot hold: "
                            f"{sorted(map(str, op.dtypes - ops.EVERY_DTYPE))}")
    for composite in ops.COMPOSITES.values():
        if not composite.dtypes:
            problems.append(f"composite {composite.name!r} has no dtypes: add {dtype_hint} to its Composite "
                            "(pallasite/ir/ops/composites.py or the module defining it)")
    for item in index_item_types():
        if not isinstance(getattr(item, "FORM", None), IndexForm):
            problems.append(f"index item type {item.__name__} has no FORM: add `FORM: ClassVar[IndexForm] = "
                            f"IndexForm(name, examples, note)` to the class (pallasite/ir/nodes.py)")
    for attribute, op in ops.TILE_ATTRIBUTES.items():
        if not op.note:
            problems.append(f"tile.{attribute} (op {op.name!r}) has no note: add note=\"...\" to its entry "
                            "(pallasite/ir/ops/catalog.py)")
    for name, item in hl_entries():
        if not hl_summary(item):
            problems.append(f"hl.{name} has no docstring: its first paragraph is its row (pallasite/language)")
    return problems


def render() -> str:
    """The page's text; a definition without the facts of its row is an error naming them."""
    problems = missing_facts()
    if problems:
        raise ValueError("the supported-forms page lacks rows:\n  " + "\n  ".join(problems))
    lines = ["# Supported forms", "",
             f"<!-- Generated by `{REGENERATE}` from the op registry (pallasite/ir/ops), the index forms "
             "(pallasite/ir/nodes.py, pallasite/frontend/indexing.py) and pallasite.language. Do not edit: "
             "change the definitions and regenerate. -->", "",
             "What pallasite compiles in a kernel's device code, one row per form, generated from the "
             "definitions the compiler itself uses. Contents: [Dtypes](#dtypes), [Ops](#ops), "
             "[Tile attributes](#tile-attributes), [Index forms](#index-forms), [hl](#hl), [Refused torch functions](#refused-torch-functions).", ""]
    for section in (dtype_section, op_sections, tile_attribute_section, index_sections, hl_sections,
                    refused_torch_section):
        lines += section()
    return "\n".join(lines).rstrip("\n") + "\n"


def anchors(text: str) -> set[str]:
    """The anchors of the page's headings."""
    return {anchor(line.lstrip("#").strip()) for line in text.splitlines() if line.startswith("#")}


def write(path: Path = PAGE_PATH) -> Path:
    path.write_text(render())
    return path
