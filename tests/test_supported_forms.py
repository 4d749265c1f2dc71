"""The supported-forms page (docs/supported-forms.md) is generated from the definitions and
kept current: every op, index item type and `hl` name has the facts of its row, the stated
dtypes are ones torch accepts, and refused forms' errors point at sections that exist."""
from __future__ import annotations

import dataclasses
import importlib.util
import inspect

import pytest
import torch
import torch.nn.functional as F

import pallasite
import pallasite.language as hl
from pallasite import exc, supported_forms
from pallasite.__main__ import main
from pallasite.frontend import indexing, torch_names
from pallasite.ir import ops
from pallasite.ir.ops import OpKind

PAGE = supported_forms.PAGE_PATH


def test_the_committed_page_is_current():
    assert PAGE.exists(), f"{exc.SUPPORTED_FORMS_PAGE} is missing: run `{supported_forms.REGENERATE}` and commit it"
    assert PAGE.read_text() == supported_forms.render(), (
        f"{exc.SUPPORTED_FORMS_PAGE} is out of date with the definitions: run `{supported_forms.REGENERATE}` "
        "and commit it")


def test_every_definition_has_the_facts_of_its_row():
    problems = supported_forms.missing_facts()
    assert not problems, "\n".join(problems)


def test_a_new_op_without_its_row_fails(monkeypatch):
    """What a helper adding an op sees when its entry states no dtypes."""
    bare = dataclasses.replace(ops.OPS["exp"], name="new_op", dtypes=None)
    monkeypatch.setitem(ops.OPS, "new_op", bare)
    problems = supported_forms.missing_facts()
    assert any("op 'new_op' has no dtypes" in p and "catalog.py" in p for p in problems), problems
    with pytest.raises(ValueError, match="new_op"):
        supported_forms.render()


def test_a_new_index_item_type_without_its_form_fails(monkeypatch):
    @dataclasses.dataclass(frozen=True)
    class OffsetTile:
        offset: int

    monkeypatch.setattr(supported_forms, "index_item_types", lambda: [OffsetTile])
    assert any("OffsetTile has no FORM" in p for p in supported_forms.missing_facts())


# ------------------------------------------------------- dtypes vs torch --

_SAMPLE_ATTRS = {"dim": -1, "dtype": torch.float32}


def _torch_callable(names):
    for name in names:
        functions = [fn for fn in torch_names.callables_of(name) if fn is not getattr(torch.Tensor, name, None)]
        if functions:
            return functions[0]
    name = names[0]
    return lambda x, *args, **kwargs: getattr(x, name)(*args, **kwargs)


def _accepts(function, operands, attrs, dtype) -> bool:
    args = [torch.ones(2, 4, dtype=torch.bool if name == "condition" else dtype) for name in operands]
    try:
        function(*args, **attrs)
    except (RuntimeError, TypeError, NotImplementedError):
        return False
    return True


def _probes():
    """(name, torch function, operand names, required attrs, stated dtypes) of the entries whose
    operands are all tensors of one shape: elementwise ops, reductions and composites."""
    for op in ops.OPS.values():
        if op.kind in (OpKind.ELEMENTWISE, OpKind.REDUCTION) and op.spellings:
            required = {k: _SAMPLE_ATTRS[k] for k, v in op.signature.attrs.items() if v is ops.REQUIRED}
            operands = list(op.signature.operands)  # optional ones too (clamp needs min or max)
            function = op.operator.function if op.operator else _torch_callable([s.name for s in op.spellings])
            yield op.name, function, operands, required, op.dtypes
    # composites whose torch call is not f(input, dim=...): how to call each on one tensor
    called = {"stack": lambda x: torch.stack([x, x]), "einsum": lambda x: torch.einsum("ij,kj->ik", x, x),
              "masked_fill": lambda x: x.masked_fill(x != x, 0),
              "layer_norm": lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:]),
              "threshold": lambda x: torch.nn.functional.threshold(x, 1, 2), "fmax": lambda x: torch.fmax(x, x),
              "fmin": lambda x: torch.fmin(x, x), "type_as": lambda x: x.type_as(x),
              "rms_norm": lambda x: torch.nn.functional.rms_norm(x, x.shape[-1:]),
              "isclose": lambda x: torch.isclose(x, x), "outer": lambda x: torch.outer(x[0], x[1]),
              "repeat": lambda x: x.repeat(2, 1), "flip": lambda x: torch.flip(x, [0]),
              "heaviside": lambda x: torch.heaviside(x, x), "mv": lambda x: torch.mv(x, x[0]),
              "roll": lambda x: torch.roll(x, 1, 0), "topk": lambda x: torch.topk(x, 1),
              "repeat_interleave": lambda x: x.repeat_interleave(2, 0)}
    for composite in {c.name: c for c in ops.COMPOSITES.values()}.values():
        attrs = {"dim": -1} if composite.name in ("softmax", "log_softmax", "cumsum", "cumprod", "cummax",
                                                  "cummin") else {}
        function = called.get(composite.name) or _torch_callable(composite.spellings)
        yield composite.name, function, ["input"], attrs, composite.dtypes


def test_torch_accepts_every_stated_dtype():
    """An entry's `dtypes` never claims a dtype torch itself refuses (1-element-scale CPU calls)."""
    wrong = {}
    for name, function, operands, attrs, dtypes in _probes():
        refused = [str(d) for d in dtypes if not _accepts(function, operands, attrs, d)]
        if refused:
            wrong[name] = refused
    assert not wrong, f"stated dtypes torch refuses (fix the entry's dtypes=): {wrong}"


# ------------------------------------------- refused index forms refuse --

_REFUSAL_KERNEL = """
import torch
import pallasite
import pallasite.language as hl


@pallasite.kernel
def kernel(x, out, idx, idx_a, idx_b, idx2d, mask):
    for tile in hl.tile(x.size(0)):
        blk = x[tile, :]
        v = blk
        {statement}
    return out
"""


def _kernel_from_source(path, statement):
    path.write_text(_REFUSAL_KERNEL.format(statement=statement))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kernel


def _refusal_arguments():
    ints = torch.zeros(16, dtype=torch.int32)
    return (torch.ones(16, 128), torch.zeros(16, 128), ints, ints, ints, torch.zeros(16, 128, dtype=torch.int32),
            torch.ones(16, dtype=torch.bool))


def test_the_refusal_template_traces(tmp_path):
    _kernel_from_source(tmp_path / "template.py", "out[tile, :] = blk").bind(_refusal_arguments())


@pytest.mark.parametrize("statement", [example for form in indexing.REFUSED_FORMS for example in form.examples])
def test_each_refused_index_form_is_refused(tmp_path, statement):
    """The page's refused examples raise `IndexingError` when traced (bind runs the discovery
    trace, no compile), with the names `RefusedForm` documents, pointing at the index forms."""
    kernel = _kernel_from_source(tmp_path / "refused_form.py", statement)
    with pytest.raises(exc.IndexingError) as info:
        kernel.bind(_refusal_arguments())
    assert str(info.value).endswith(_pointer("index-forms"))


# ---------------------------------------------------- errors point here --


def test_every_anchor_an_error_names_is_on_the_page():
    text = supported_forms.render()
    named = {cls.forms_anchor for _, cls in inspect.getmembers(exc, inspect.isclass)
             if issubclass(cls, exc.PallasiteError) and cls.forms_anchor is not None}
    assert named >= {"ops", "index-forms", "dtypes"}
    assert named | {hl.REFUSED_ANCHOR} <= supported_forms.anchors(text)


def _pointer(anchor: str) -> str:
    return f"See {exc.SUPPORTED_FORMS_PAGE}#{anchor} for what works."


@pallasite.kernel
def _unsupported_op(x):
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.i0(x[tile])
    return out


@pallasite.kernel
def _boolean_mask(x, mask):
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[mask[tile]]
    return out


@pallasite.kernel
def _barrier(x):
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        hl.barrier()
        out[tile] = x[tile]
    return out


@pytest.mark.parametrize("kernel, args, error, anchor", [
    (_unsupported_op, (torch.ones(8),), exc.UnsupportedOperation, "ops"),
    (_boolean_mask, (torch.ones(8), torch.ones(8, dtype=torch.bool)), exc.IndexingError, "index-forms"),
    (_barrier, (torch.ones(8),), exc.UnsupportedOperation, hl.REFUSED_ANCHOR),
])
def test_a_refused_form_points_at_its_section(kernel, args, error, anchor):
    with pytest.raises(error) as info:
        kernel(*args)
    text = str(info.value)
    assert text.endswith(_pointer(anchor)), text
    assert "test_supported_forms.py" in text  # still names the user's line
    assert _pointer(anchor) not in info.value.message


def test_unsupported_dtype_points_at_dtypes():
    err = exc.UnsupportedDtype("x has dtype torch.float64")
    assert str(err).endswith(_pointer("dtypes"))


# ----------------------------------------------------------------- CLI --


def test_forms_command_writes_and_checks(tmp_path, capsys):
    page = tmp_path / "forms.md"
    assert main(["forms", "--check", "--out", str(page)]) == 1
    assert supported_forms.REGENERATE in capsys.readouterr().err
    assert main(["forms", "--write", "--out", str(page)]) == 0
    assert main(["forms", "--check", "--out", str(page)]) == 0
    assert "| `argmax` |" in page.read_text() and "ties: the lowest index" in page.read_text()
