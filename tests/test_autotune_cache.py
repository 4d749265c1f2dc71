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


def _reference_add(x, y):
    return x + y


def _reference_sub(x, y):
    return x - y


def _baseline_key(**settings):
    from pallasite.autotune.tuner import cache_fields
    from plan_helpers import add_kernel

    return cache.cache_key(cache_fields(add_kernel(autotune_effort="quick", **settings).bind(X_ADD)))[0]


X_ADD = (torch.randn(16, 128), torch.randn(16, 128))


def test_the_baseline_and_its_tolerances_are_part_of_the_cache_key():
    """A config accepted against one baseline (or tolerance, or with the check off) is not
    reused under another: each setting that decides acceptance changes the entry's key."""
    plain = _baseline_key()
    keys = {
        "add": _baseline_key(autotune_baseline_fn=_reference_add),
        "sub": _baseline_key(autotune_baseline_fn=_reference_sub),
        "torch.add": _baseline_key(autotune_baseline_fn=torch.add),  # no Python source
        "atol": _baseline_key(autotune_baseline_fn=_reference_add, autotune_baseline_atol=0.5),
        "rtol": _baseline_key(autotune_baseline_fn=_reference_add, autotune_baseline_rtol=0.5),
        "unchecked": _baseline_key(autotune_accuracy_check=False),
    }
    assert len({plain, *keys.values()}) == 1 + len(keys)
    # the identity is stable: the same settings give the same key (a second process hits)
    assert _baseline_key(autotune_baseline_fn=_reference_add) == keys["add"]
    assert _baseline_key() == plain


def test_a_baseline_with_the_same_name_but_new_source_is_a_new_key():
    namespace: dict = {}
    exec("def reference(x, y):\n    return x + y\n", namespace)
    first = namespace["reference"]
    exec("def reference(x, y):\n    return x * y\n", namespace)
    second = namespace["reference"]
    assert first.__qualname__ == second.__qualname__
    assert _baseline_key(autotune_baseline_fn=first) != _baseline_key(autotune_baseline_fn=second)


def _entry_path(kernel, args):
    fields = pallasite.autotune.tuner.cache_fields(kernel.bind(args))
    digest, _ = cache.cache_key(fields)
    return cache.cache_dir() / f"{kernel.fn.__name__}-{digest}.json", fields


def test_an_undecodable_cache_file_is_ignored_with_a_warning(tmp_path, monkeypatch):
    """Bytes that are not UTF-8 (a foreign binary file) are ignored like any corrupt entry."""
    monkeypatch.setenv("PALLASITE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PALLASITE_AUTOTUNE_QUIET", "1")
    kernel = _scale_kernel()
    target, fields = _entry_path(kernel, (X,))
    target.parent.mkdir(parents=True)
    target.write_bytes(b'\xff\xfe{"x":1}')
    with pytest.warns(UserWarning, match="ignoring"):
        out = kernel(X)
    torch.testing.assert_close(out, X * 3.0)
    assert cache.load("triple", fields) is not None  # rewritten with a good entry


@pytest.mark.parametrize("obstacle", ["directory", "read_only"])
def test_a_failed_cache_write_warns_and_still_returns_the_result(obstacle, tmp_path, monkeypatch):
    monkeypatch.setenv("PALLASITE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PALLASITE_AUTOTUNE_QUIET", "1")
    kernel = _scale_kernel()
    target, _ = _entry_path(kernel, (X,))
    target.parent.mkdir(parents=True)
    if obstacle == "directory":
        target.mkdir()  # a directory where the entry goes
    else:
        def refuse(*args, **kwargs):
            raise PermissionError(13, "Permission denied", str(target.parent))
        monkeypatch.setattr(cache.os, "replace", refuse)
    with pytest.warns(UserWarning, match="could not cache|cannot read") as caught:  # (a dir: unreadable too)
        out = kernel(X)
    torch.testing.assert_close(out, X * 3.0)
    messages = [str(w.message) for w in caught if "could not cache" in str(w.message)]
    assert len(messages) == 1 and str(target) in messages[0]
    # the warning points at the user's call, not into pallasite
    assert all(w.filename == __file__ for w in caught if "could not cache" in str(w.message))
    assert [p.name for p in target.parent.iterdir() if p.name.endswith(".tmp")] == []


def _make_scaled(factor, two_pass):
    @pallasite.kernel(autotune_effort="quick")
    def scaled(x):
        m, n = x.size()
        out = torch.empty_like(x)
        for tile_m, tile_n in hl.tile([m, n]):
            out[tile_m, tile_n] = x[tile_m, tile_n] * factor
        if two_pass:
            for tile_m, tile_n in hl.tile([m, n]):
                out[tile_m, tile_n] = out[tile_m, tile_n] + 1.0
        return out
    return scaled


def test_kernels_from_one_factory_with_other_closure_values_have_their_own_entries():
    from pallasite.autotune.tuner import cache_fields

    def key(*made):
        return cache.cache_key(cache_fields(_make_scaled(*made).bind((X,))))[0]

    assert key(2.0, False) != key(3.0, False)  # a captured constant
    assert key(2.0, False) != key(2.0, True)  # a captured flag that changes the loops
    assert key(2.0, False) == key(2.0, False)  # the same values: the same entry (stable)


def test_a_first_call_under_jax_jit_runs_the_cached_config(tmp_path, monkeypatch):
    """`kernel.jax_fn` inside `jax.jit` cannot run candidates: it runs this signature's
    cached config (tuned by an earlier call on concrete arrays); with none cached, the
    default, with a note saying how to tune."""
    import jax
    import jax.numpy as jnp
    monkeypatch.setenv("PALLASITE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PALLASITE_AUTOTUNE_QUIET", "1")
    untuned = _scale_kernel()
    with pytest.warns(UserWarning, match="first called under jax.jit .* the default config runs. Call it once "
                                         "on concrete arrays") as caught:
        out = jax.jit(untuned.jax_fn)(jnp.asarray(X.numpy()))
    assert caught[0].filename == __file__  # the user's line, not JAX's tracing internals
    torch.testing.assert_close(torch.from_numpy(jax.device_get(out).copy()), X * 3.0)
    default = untuned.bind((X,)).config_spec.default_config()
    assert untuned.bind((X,)).resolve_config() == untuned.bind((X,)).config_spec.normalize(default)
    under_jit = _scale_kernel()  # a fresh kernel (a new process, as far as its memory goes)
    bound = under_jit.bind((X,))
    other = [16, 128] if list(default.block_sizes) == [8, 128] else [8, 128]
    cache.store("triple", pallasite.autotune.tuner.cache_fields(bound), pallasite.Config(block_sizes=other))
    out = jax.jit(under_jit.jax_fn)(jnp.asarray(X.numpy()))
    torch.testing.assert_close(torch.from_numpy(jax.device_get(out).copy()), X * 3.0)
    assert list(bound.resolve_config().block_sizes) == other


def _load_as(module_name: str, path):
    """The file at `path` run as module `module_name` (`__main__`: as a script runs)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_script_and_its_import_share_one_cache_name(tmp_path):
    """`python mykernels.py` (module `__main__`) and `pallasite run mykernels` (module
    `mykernels`) name the kernel by its file, so they share tuned configs (issue 23)."""
    from pallasite.autotune.tuner import kernel_identity

    path = tmp_path / "mykernels.py"
    path.write_text(MODULE)
    names = []
    for module_name in ("__main__", "mykernels"):
        module = _load_as(module_name, path)
        assert module.scale.fn.__module__ == module_name
        names.append(kernel_identity(module.scale.fn))
    assert names[0] == names[1] == f"{os.path.realpath(path)}:scale"
    other = tmp_path / "elsewhere.py"
    other.write_text(MODULE)
    assert kernel_identity(_load_as("mykernels", other).scale.fn) != names[0]  # another file: another kernel


FACTORY_MODULE = textwrap.dedent('''
    import torch
    import pallasite
    import pallasite.language as hl

    SCALE = 3.0

    def epilogue(v):
        return v * SCALE

    def make(offset):
        @pallasite.kernel
        def shifted(x, fn):
            out = torch.empty_like(x)
            for tile in hl.tile(x.size(0)):
                out[tile] = fn(x[tile]) + offset
            return out
        return shifted

    shifted = make(1.0)
''')


def test_a_script_and_its_import_share_the_whole_cache_key(tmp_path):
    """(trial F) The key's other fields named the module too (the closure's identity, an
    epilogue argument's), so `python mykernels.py` and `pallasite run mykernels` still
    searched and stored apart."""
    from pallasite.autotune.tuner import cache_fields

    path = tmp_path / "factory_kernels.py"
    path.write_text(FACTORY_MODULE)
    keys = []
    for module_name in ("__main__", "factory_kernels"):
        module = _load_as(module_name, path)
        keys.append(cache_fields(module.shifted.bind((torch.randn(64), module.epilogue))))
    assert keys[0] == keys[1]
    module = _load_as("factory_kernels", path)
    other = cache_fields(module.make(2.0).bind((torch.randn(64), module.epilogue)))
    assert other["closure"] != keys[0]["closure"]  # another closure value: another kernel


class _Stream:
    """stderr as a test sees it: a terminal or not."""

    def __init__(self, terminal: bool):
        self.terminal, self.text = terminal, []

    def isatty(self) -> bool:
        return self.terminal

    def write(self, text: str) -> int:
        self.text.append(text)
        return len(text)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("terminal", [False, True])
def test_progress_in_a_log_is_one_line_per_search(terminal, monkeypatch):
    """Not on a terminal (a log file, CI), a search prints one line, when it ends, however
    long it runs; on a terminal the bar (tqdm) or a status line per second redraws."""
    from pallasite.autotune import progress

    stream = _Stream(terminal)
    monkeypatch.setattr(progress.sys, "stderr", stream)
    monkeypatch.delenv(progress.QUIET_ENV, raising=False)
    clock = iter(range(0, 1000, 2))  # every advance looks 2 s after the last
    monkeypatch.setattr(progress.time, "perf_counter", lambda: float(next(clock)))
    with progress.Progress("search", total=5) as bar:
        for _ in range(5):
            bar.advance(1e-3)
    text = "".join(stream.text)
    if terminal:
        assert "search" in text and (text.count("\n") >= 2 or "\r" in text)  # redrawn
    else:
        lines = [line for line in text.splitlines() if line]
        assert len(lines) == 1 and "search: 5/5 candidates" in lines[0], text


def test_a_cache_entry_is_readable_as_a_file_open_creates(tmp_path, monkeypatch):
    """(trial F) Entries were written 0600 (mkstemp's mode), their locks 0644: a cache directory
    shared between users could not be read by the others."""
    monkeypatch.setenv("PALLASITE_CACHE_DIR", str(tmp_path))
    umask = os.umask(0o022)
    try:
        path = cache.store("perm", {"kernel": "k"}, pallasite.Config(block_sizes=[8]))
    finally:
        os.umask(umask)
    assert path is not None and (os.stat(path).st_mode & 0o777) == 0o644
