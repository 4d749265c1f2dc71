"""benchmarks/helion_corpus.py runs a program written for Helion, unchanged, and tells
right from wrong: two small programs of ours in Helion's spelling (one whose kernel
matches its torch baseline, one whose baseline disagrees), one importing the first as
`examples.right`, one that needs Triton and one that needs a module of its own."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PROGRAM = '''
import torch
import helion
import helion.language as hl
from helion._testing import DEVICE, run_example


@helion.kernel(static_shapes=True)
def scale_rows(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.size()):
        out[tile_m, tile_n] = x[tile_m, tile_n] * w[tile_n][None, :]
    return out


def main() -> None:
    x = torch.randn([40, 72], device="cuda", dtype=torch.float32)
    w = torch.randn([72], device=DEVICE, dtype=torch.float32)
    run_example(scale_rows, BASELINE, (x, w))
'''


def test_harness_counts_a_right_and_a_wrong_program_and_skips_triton(tmp_path):
    (tmp_path / "right.py").write_text(PROGRAM.replace("BASELINE", "lambda x, w: x * w"))
    (tmp_path / "wrong.py").write_text(PROGRAM.replace("BASELINE", "lambda x, w: x + w"))
    (tmp_path / "needs_triton.py").write_text("import triton\nimport helion\n")
    (tmp_path / "needs_task.py").write_text("import helion\nfrom task import inputs\n")
    # programs import each other as `examples.<name>` (Helion's gemma3 decode step does)
    (tmp_path / "sibling.py").write_text("import helion\nfrom examples.right import main\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "helion_corpus.py"), "--helion-dir", str(tmp_path),
         "--timeout", "300", "--jobs", "2"],
        env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    assert rows["right"].split()[1] == "correct"
    assert "wrong result" in rows["wrong"]
    assert "not drivable" in rows["needs_triton"] and "Triton" in rows["needs_triton"]
    assert "not drivable" in rows["needs_task"] and "'task'" in rows["needs_task"]
    assert rows["sibling"].split()[1] == "correct"
    assert "drivable programs: 3; correct: 2 of 3" in done.stdout
