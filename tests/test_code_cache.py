"""The generated-module cache under PALLASITE_CODE_DIR is safe to share (issue #11 item 7)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import pallasite
import pallasite.language as hl

ROOT = Path(__file__).resolve().parent.parent

KERNEL = textwrap.dedent("""
    import sys, torch, pallasite
    import pallasite.language as hl

    @pallasite.kernel
    def scale(x):
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile] * 3
        return out

    x = torch.arange(1024, dtype=torch.float32)
    assert torch.equal(scale(x), x * 3)
    print("ok")
""")


def test_two_processes_compiling_the_same_kernel_both_succeed(tmp_path):
    script = tmp_path / "kernel_module.py"
    script.write_text(KERNEL)
    env = {**os.environ, "PALLASITE_CODE_DIR": str(tmp_path / "code"), "PYTHONPATH": str(ROOT)}
    runs = [subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        assert out.strip() == "ok"
    files = list((tmp_path / "code").glob("scale_*.py"))
    assert len(files) == 1 and "def scale_kernel" in files[0].read_text()
    assert not list((tmp_path / "code").glob("*.tmp"))  # no temporary left behind


@pallasite.kernel
def double(x):
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * 2
    return out


def test_a_corrupt_cached_module_is_rewritten_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("PALLASITE_CODE_DIR", str(tmp_path))
    x = torch.arange(256, dtype=torch.float32)
    double.reset()
    torch.testing.assert_close(double(x), x * 2)
    (path,) = tmp_path.glob("double_*.py")
    good = path.read_text()
    path.write_text(good[: len(good) // 2])  # truncated, as by a crash mid-write
    double.reset()
    with pytest.warns(UserWarning, match="was corrupt; regenerated"):
        torch.testing.assert_close(double(x), x * 2)
    assert path.read_text() == good


def test_a_cached_module_that_is_not_text_is_rewritten_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("PALLASITE_CODE_DIR", str(tmp_path))
    x = torch.arange(256, dtype=torch.float32)
    double.reset()
    double(x)
    (path,) = tmp_path.glob("double_*.py")
    good = path.read_text()
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() creates files, not 0600
    path.write_bytes(b"\xff\xfe\x00garbage")
    double.reset()
    with pytest.warns(UserWarning, match="was corrupt; regenerated"):
        torch.testing.assert_close(double(x), x * 2)
    assert path.read_text() == good


def _mappings() -> int:
    with open("/proc/self/maps") as maps:
        return sum(1 for _ in maps)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="counts the process's memory mappings (Linux)")
def test_release_compiled_code_frees_the_executables_of_every_live_kernel():
    """A compiled interpret-mode kernel holds memory mappings until freed; a process keeping
    thousands of variants hits vm.max_map_count and is killed (the suite's workers were)."""

    @pallasite.kernel
    def shifted(x):
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile, :] = x[tile, :] + 1
        return out

    import gc
    gc.collect()
    before = _mappings()
    for rows in (8, 16, 24, 32, 40, 48):  # six signatures: six compiled programs kept by the kernel
        x = torch.randn(rows, 128)
        torch.testing.assert_close(shifted(x), x + 1)
    assert shifted.cache_size == 6
    grown = _mappings() - before
    assert grown > 0
    pallasite.release_compiled_code()
    gc.collect()
    assert shifted.cache_size == 0
    assert _mappings() - before < grown / 2, "the released programs' mappings are still there"
    x = torch.randn(8, 128)
    torch.testing.assert_close(shifted(x), x + 1)  # and the kernel compiles again when called
