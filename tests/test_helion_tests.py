"""The Helion test-suite harness (benchmarks/helion_tests.py) classifies and counts right."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import helion_tests  # noqa: E402

SYNTHETIC = '''
import unittest
import torch
import helion
import helion.language as hl
from helion._testing import TestCase, code_and_output, onlyBackends
import re

_OPTIONS = helion.OutputCodeOptions(jax_fn=True)  # a Helion-only object at module level: the file loads


@helion.kernel(static_shapes=True)
def add_one(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile] + 1.0
    return out


class TestSynthetic(TestCase):
    def test_passes(self):
        x = torch.arange(128, dtype=torch.float32)
        _code, out = code_and_output(add_one, (x,), block_sizes=[128])
        torch.testing.assert_close(out, x + 1.0)

    def test_fails(self):
        x = torch.arange(128, dtype=torch.float32)
        _code, out = code_and_output(add_one, (x,), block_sizes=[128])
        torch.testing.assert_close(out, x + 2.0)

    def test_reads_internals(self):
        x = torch.arange(128, dtype=torch.float32)
        code, _out = code_and_output(add_one, (x,), block_sizes=[128])
        self.assertIn("pl.program_id", code)

    @onlyBackends(["triton"])
    def test_gpu_only(self):
        raise AssertionError("must not run")

    def test_refused_in_own_words(self):
        x = torch.arange(128, dtype=torch.float32)
        with self.assertRaisesRegex(NotImplementedError, "Helion's own wording"):
            code_and_output(too_many_indices, (x,), block_sizes=[128])

    def test_refused_as_expected(self):
        x = torch.arange(128, dtype=torch.float32)
        self.assertRaises(helion.exc.IndexingError, code_and_output, too_many_indices, (x,), block_sizes=[128])

    def test_reads_code_with_a_regex(self):
        x = torch.arange(128, dtype=torch.float32)
        code, _out = code_and_output(add_one, (x,), block_sizes=[128])
        self.assertEqual(re.findall(r"pl\\.program_id", code), ["pl.program_id"])

    def test_passes_a_private_hook(self):
        add_one(torch.arange(128, dtype=torch.float32), _launcher=print)

    def test_uses_a_helion_only_object_built_at_module_level(self):
        x = torch.arange(128, dtype=torch.float32)
        add_one.bind((x,)).to_code(options=_OPTIONS)

    def test_runs_what_helion_refuses(self):
        x = torch.arange(128, dtype=torch.float32)
        with self.assertRaises(NotImplementedError):
            code_and_output(add_one, (x,), block_sizes=[128])


@helion.kernel(static_shapes=True)
def too_many_indices(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile, tile]
    return out
'''


def test_harness_classifies_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "test_synthetic.py"
    path.write_text(SYNTHETIC)
    rows = helion_tests.run_file(path, timeout=120.0, only=[], emit=lambda row: None)
    outcomes = {row["test"].split(".")[-1]: row for row in rows}
    assert {name: row["outcome"] for name, row in outcomes.items()} == {
        "test_passes": "passed", "test_fails": "failed",
        "test_reads_internals": "excluded", "test_gpu_only": "skipped",
        # a Helion refusal asserted: pallasite's own error in its place, its expected class, none
        "test_refused_in_own_words": "refused", "test_refused_as_expected": "passed",
        "test_runs_what_helion_refuses": "failed", "test_reads_code_with_a_regex": "excluded",
        "test_passes_a_private_hook": "excluded", "test_uses_a_helion_only_object_built_at_module_level": "excluded"}
    assert outcomes["test_fails"]["detail"].startswith("AssertionError: Tensor-likes are not close")
    assert outcomes["test_refused_in_own_words"]["detail"].startswith("IndexingError: Too many indices")
    assert outcomes["test_runs_what_helion_refuses"]["detail"] == "AssertionError: NotImplementedError not raised"
    summary = "\n".join(helion_tests.summarize({path.name: rows}))
    # passed 2, refused 1, counted 5: 60% with the refusal, 40% strict
    assert "test_synthetic.py" in summary and "2       1       5  60.0%    40.0%        4       1" in summary
