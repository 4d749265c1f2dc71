"""`benchmarks/compile_latency.py --vs-helion` runs the same kernels under both compilers.

Without Helion and without timing anything: every example's source in Helion's spelling
imports only Helion's names (a pallasite test helper is bound to None, the kernel does not
use it), a result is told right from wrong against the example's torch reference, and
the child process that runs one first call runs pallasite's side and saves its result
and the modules the call imported."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import compile_latency
from benchmarks._helion_spelling import to_helion
from examples import add, softmax_dropout
from examples.run_all import EXAMPLES

REPO = Path(__file__).resolve().parent.parent


def _imported_modules(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module)
    return names


@pytest.mark.parametrize("name", [name for name in EXAMPLES if not name.startswith("ring_")])
def test_every_example_imports_helion_not_pallasite(name):
    source = to_helion((REPO / "examples" / f"{name}.py").read_text())
    imported = _imported_modules(source)
    assert {"helion", "helion.language"} <= imported
    assert not {module for module in imported if module.startswith("pallasite")}
    tree = ast.parse(source)
    kernel = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name)
    assert ast.unparse(kernel.decorator_list[0]).startswith("helion.kernel")


def test_a_pallasite_helper_import_binds_its_names_to_none():
    source = to_helion("import pallasite\nfrom pallasite.testing import reference_rand, code_and_output as c\n"
                       "config = pallasite.Config(block_sizes=[32])\n")
    namespace = {}
    exec(source.splitlines()[1], namespace)  # no Helion here: only the helper's line runs
    assert namespace["reference_rand"] is None and namespace["c"] is None
    assert "config = helion.Config(block_sizes=[32])" in source


def test_a_parenthesized_helper_import_is_refused():
    with pytest.raises(ValueError, match="one line"):
        to_helion("from pallasite.testing import (\n    reference_rand,\n)\n")


def test_result_problem_tells_right_from_wrong():
    inputs = add.example_inputs()
    expected = add.reference(*inputs)
    assert compile_latency.result_problem(add, inputs, expected) == ""
    wrong = expected.clone()
    wrong[3, 7] += 1.0
    assert "max abs error 1" in compile_latency.result_problem(add, inputs, wrong)
    assert "shape" in compile_latency.result_problem(add, inputs, expected[:10])
    # softmax_dropout's TOLERANCES are keyed by its input dtype, as its check() reads them
    x, p, seed = softmax_dropout.example_inputs()
    assert compile_latency.result_problem(softmax_dropout, (x, p, seed), softmax_dropout.reference(x, p, seed)) == ""


def test_helion_runs_with_its_pallas_interpreter_and_without_pallasite_on_its_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    env = compile_latency.helion_side("python").env(str(tmp_path))
    assert "PYTHONPATH" not in env
    assert {env[key] for key in ("HELION_BACKEND", "HELION_PALLAS_INTERPRET", "HELION_AUTOTUNE_EFFORT")} == {
        "pallas", "1", "none"}
    assert env["HELION_CACHE_DIR"].startswith(str(tmp_path))
    assert compile_latency.pallasite_side().env(str(tmp_path))["PALLASITE_AUTOTUNE_EFFORT"] == "none"


def test_the_first_call_child_saves_pallasite_result_and_its_imports(tmp_path):
    inputs = add.example_inputs()
    torch.save(inputs, tmp_path / "inputs.pt")
    side = compile_latency.pallasite_side()
    output = tmp_path / "out.pt"
    done = subprocess.run([sys.executable, str(compile_latency.FIRST_CALL), str(REPO / "examples" / "add.py"), "add",
                           str(tmp_path / "inputs.pt"), str(output)],
                          env=side.env(str(tmp_path / "cache")), capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    float(done.stdout.split()[-1])  # the seconds it prints (not judged here)
    assert compile_latency.result_problem(add, inputs, torch.load(output, weights_only=False)) == ""
    assert (tmp_path / "out.pt.modules").exists()
