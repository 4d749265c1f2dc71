"""The autotuner's disk cache and progress output (issue 10): a second process reuses the
tuned config with no search; a corrupt or foreign file is ignored with a warning."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.autotune import cache

ROOT = os.path.join(os.path.dirname(__file__), "..")

MODULE = textwrap.dedent('''
    import torch
    import pallasite
    import pallasite.language as hl

    @pallasite.kernel(autotune_effort="quick")
    def scale(x):
        m, n = x.size()
        out = torch.empty_like(x)
        for tile_m, tile_n in hl.tile([m, n]):
            out[tile_m, tile_n] = x[tile_m, tile_n] * 3.0
        return out

    if __name__ == "__main__":
        x = torch.arange(64 * 256, dtype=torch.float32).reshape(64, 256)
        torch.testing.assert_close(scale(x), x * 3.0)
        print("config", dict(scale.bind((x,)).resolve_config()))
''')


def _run(path, cache_dir, **env):
    environment = {**os.environ, "PALLASITE_CACHE_DIR": str(cache_dir), "PYTHONPATH": ROOT, **env}
    for name in ("PALLASITE_AUTOTUNE_QUIET", "PALLASITE_FORCE_AUTOTUNE", "PALLASITE_AUTOTUNE_EFFORT"):
        if name not in env:
            environment.pop(name, None)
    done = subprocess.run([sys.executable, str(path)], env=environment, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def test_a_second_process_reuses_the_cached_config_without_searching(tmp_path):
    path = tmp_path / "scale_kernel.py"
    path.write_text(MODULE)
    first = _run(path, tmp_path / "cache")
    assert "candidates" in first.stderr  # the search and its progress, on stderr
    assert "scale: chose" in first.stderr
    entries = list((tmp_path / "cache" / "autotune").glob("scale-*.json"))
    assert len(entries) == 1
    second = _run(path, tmp_path / "cache")
    hits = [line for line in second.stderr.splitlines() if "using the cached config" in line]
    assert len(hits) == 1 and "no search" in hits[0]
    assert "candidates" not in second.stderr
    assert second.stdout == first.stdout  # the same config
    forced = _run(path, tmp_path / "cache", PALLASITE_FORCE_AUTOTUNE="1")
    assert "candidates" in forced.stderr and "using the cached config" not in forced.stderr


def _scale_kernel():
    @pallasite.kernel(autotune_effort="quick")
    def triple(x):
        m, n = x.size()
        out = torch.empty_like(x)
        for tile_m, tile_n in hl.tile([m, n]):
            out[tile_m, tile_n] = x[tile_m, tile_n] * 3.0
        return out
    return triple


X = torch.randn(32, 256)


@pytest.mark.parametrize("content", ["{not json", json.dumps({"format": "something-else"}),
                                     json.dumps({"format": cache.FORMAT, "key": {"kernel": "other"},
                                                 "config": {"block_sizes": [8, 128]}}),
                                     json.dumps({"format": cache.FORMAT, "config": {"colour": 1}})],
                         ids=["corrupt", "foreign_format", "foreign_key", "bad_config"])
def test_a_corrupt_or_foreign_cache_file_is_ignored_with_a_warning(content, tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("PALLASITE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PALLASITE_AUTOTUNE_QUIET", raising=False)
    kernel = _scale_kernel()
    bound = kernel.bind((X,))
    fields = pallasite.autotune.tuner.cache_fields(bound)
    digest, _ = cache.cache_key(fields)
    target = cache.cache_dir() / f"triple-{digest}.json"
    target.parent.mkdir(parents=True)
    target.write_text(content)
    with pytest.warns(UserWarning, match="ignoring"):
        out = kernel(X)
    torch.testing.assert_close(out, X * 3.0)
    assert "candidates" in capfd.readouterr().err  # it searched instead
    assert cache.load("triple", fields) is not None  # and rewrote a good entry


def test_cache_writes_are_atomic_replacements(tmp_path, monkeypatch):
    monkeypatch.setenv("PALLASITE_CACHE_DIR", str(tmp_path))
    fields = {"kernel": "k", "signature": "s"}
    first = cache.store("k", fields, pallasite.Config(block_sizes=[8, 128]))
    second = cache.store("k", fields, pallasite.Config(block_sizes=[16, 128]))
    assert first == second and cache.load("k", fields).block_sizes == [16, 128]
    assert [p.name for p in first.parent.iterdir() if p.suffix == ".tmp"] == []


def test_progress_goes_to_stderr_unless_quiet(monkeypatch, capfd, tmp_path):
    monkeypatch.setenv("PALLASITE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PALLASITE_AUTOTUNE_QUIET", raising=False)
    _scale_kernel()(X)
    captured = capfd.readouterr()
    assert "triple" in captured.err and "candidates" in captured.err and "best" in captured.err
    assert captured.out == ""
    monkeypatch.setenv("PALLASITE_AUTOTUNE_QUIET", "1")
    monkeypatch.setenv("PALLASITE_FORCE_AUTOTUNE", "1")
    _scale_kernel()(X)
    assert "autotune" not in capfd.readouterr().err
