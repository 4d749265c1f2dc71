"""`python -m pallasite autotune | code | run` (issue 10)."""
from __future__ import annotations

import json

import pytest

from pallasite.__main__ import main


@pytest.fixture(autouse=True)
def _quiet(monkeypatch, tmp_path):
    monkeypatch.setenv("PALLASITE_AUTOTUNE_QUIET", "1")
    monkeypatch.setenv("PALLASITE_CACHE_DIR", str(tmp_path / "cache"))


def test_autotune_prints_the_top_configs_and_writes_the_history(capsys, tmp_path):
    stem = tmp_path / "history"
    assert main(["autotune", "examples.add:add", "--effort", "quick", "--top", "3", "--out", str(stem)]) == 0
    out = capsys.readouterr().out
    assert "cost model" in out and "memory us" in out and "exposed_dma us" in out
    rows = [line for line in out.splitlines() if line.strip()[:1].isdigit() and "block_sizes" in line]
    assert 1 <= len(rows) <= 3
    lines = (tmp_path / "history.csv").read_text().splitlines()
    assert lines[0] == "candidate,seconds,best_so_far,config" and len(lines) > 2
    assert "history.csv" in out
    # The plot: matplotlib is in the test extra, so it is written, not skipped.
    assert (tmp_path / "history.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_code_prints_the_module_for_a_config(capsys):
    assert main(["code", "examples.add:add", "--config", json.dumps({"block_sizes": [8, 128]})]) == 0
    out = capsys.readouterr().out
    assert "# Config: Config(block_sizes=[8, 128])" in out and "pallas_call" in out


def test_lower_lowers_a_kernel_for_each_chip(capsys):
    """Trial BB: the TPU lowering check had no command (`pallasite.testing.check_tpu_lowering`)."""
    assert main(["lower", "examples.add:add", "--config", json.dumps({"block_sizes": [8, 128]})]) == 0
    assert "examples.add:add: lowered to Mosaic for v5e, v6e, v7x" in capsys.readouterr().out
    assert main(["lower", "examples.add:add", "--chips", "v6e", "--config", json.dumps({"block_sizes": [8]})]) == 1
    assert "block_sizes has 1 entries" in capsys.readouterr().err


def test_bad_targets_and_configs_are_usage_messages(capsys):
    """Trial DD: a name that is no kernel, a --config that is not a JSON object, bad JSON and an
    empty --chips gave Python tracebacks (or claimed a lowering for no chip)."""
    assert main(["lower", "examples.add:torch"]) == 2
    assert "is not a @pallasite.kernel" in capsys.readouterr().err
    assert main(["lower", "examples.add:add", "--config", "[16]"]) == 2
    assert "--config must be a JSON object" in capsys.readouterr().err
    assert main(["code", "examples.add:add", "--config", "{bad"]) == 2
    assert "--config is not JSON" in capsys.readouterr().err
    assert main(["lower", "examples.add:add", "--chips", ""]) == 2
    assert "--chips names no TPU generation" in capsys.readouterr().err


def test_run_runs_the_examples_check(capsys):
    assert main(["run", "examples.add"]) == 0
    assert "examples.add: check() passed" in capsys.readouterr().out


def test_a_bad_config_is_an_error_message(capsys):
    assert main(["code", "examples.add:add", "--config", json.dumps({"block_sizes": [8]})]) == 1
    assert "block_sizes has 1 entries" in capsys.readouterr().err


def test_an_unknown_module_or_kernel_is_a_usage_message(capsys):
    assert main(["run", "examples.no_such_example"]) == 2
    assert "no module 'examples.no_such_example'" in capsys.readouterr().err
    assert main(["code", "examples.add:no_such_kernel"]) == 2
    assert "examples.add has no kernel 'no_such_kernel'" in capsys.readouterr().err


def test_the_console_script_imports_targets_from_the_working_directory(tmp_path):
    import shutil
    import subprocess
    from pathlib import Path

    script = shutil.which("pallasite")
    assert script, "the `pallasite` console script is installed with the package"
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([script, "run", "examples/add.py"], cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "check() passed" in done.stdout
