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
'''


def test_harness_classifies_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "test_synthetic.py"
    path.write_text(SYNTHETIC)
    rows = helion_tests.run_file(path, timeout=120.0, only=[], emit=lambda row: None)
    outcomes = {row["test"].split(".")[-1]: row for row in rows}
    assert {name: row["outcome"] for name, row in outcomes.items()} == {
        "test_passes": "passed", "test_fails": "failed",
        "test_reads_internals": "excluded", "test_gpu_only": "skipped"}
    assert outcomes["test_fails"]["detail"].startswith("AssertionError: Tensor-likes are not close")
    summary = "\n".join(helion_tests.summarize({path.name: rows}))
    assert "test_synthetic.py" in summary and "1       2  50.0%        1       1" in summary
