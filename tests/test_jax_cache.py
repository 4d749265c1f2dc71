"""JAX's persistent compilation cache under $PALLASITE_CACHE_DIR/jax (issue 23 §3): used for
kernels compiled by Mosaic on a TPU. Here (no TPU) the wiring is checked with a plain jitted
program, which JAX stores as it would a Mosaic kernel: a second process loads it, a corrupt
entry is compiled again with a warning. Interpret-mode kernels leave the cache alone (JAX
stores no program with host callbacks)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import torch

import pallasite
import pallasite.language as hl
from pallasite.runtime import jax_cache

ROOT = Path(__file__).resolve().parent.parent

PROGRAM = textwrap.dedent("""
    import jax, jax.numpy as jnp
    from jax import monitoring
    hits = []
    monitoring.register_event_listener(lambda name, **kw: hits.append(name) if name.endswith("cache_hits") else None)
    from pallasite.runtime.jax_cache import use_persistent_cache
    print("dir", use_persistent_cache())
    value = float(jax.jit(lambda x: jnp.sin(x) * 2 + 1)(jnp.float32(1.0)))
    print("value", round(value, 5), "hits", len(hits))
""")


def _run(tmp_path, **env):
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "PALLASITE_CACHE_DIR": str(tmp_path / "cache"),
                               **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_a_second_process_loads_the_compiled_program_and_a_corrupt_entry_is_compiled_again(tmp_path):
    first = _run(tmp_path)
    assert f"dir {tmp_path / 'cache' / 'jax'}" in first.stdout
    assert "value 2.68294 hits 0" in first.stdout
    entries = list((tmp_path / "cache" / "jax").glob("*-cache"))
    assert entries, "the first process stored its programs"
    second = _run(tmp_path)
    assert "value 2.68294 hits 0" not in second.stdout and "value 2.68294 hits" in second.stdout
    for entry in entries:
        entry.write_bytes(b"not a compiled program")
    third = _run(tmp_path)
    assert "value 2.68294 hits 0" in third.stdout  # compiled again, the same result
    assert "Error reading persistent compilation cache entry" in third.stderr


def test_turned_off_by_the_environment(monkeypatch):
    before = jax.config.jax_compilation_cache_dir
    monkeypatch.setenv("PALLASITE_JAX_CACHE", "0")
    assert jax_cache.use_persistent_cache() is None
    assert jax.config.jax_compilation_cache_dir == before


def test_a_directory_the_user_chose_is_kept(tmp_path):
    before = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", str(tmp_path / "mine"))
    try:
        assert jax_cache.use_persistent_cache() == tmp_path / "mine"
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "mine")
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


def test_interpret_mode_kernels_leave_jax_s_cache_alone():
    """On the CPU every kernel program has host callbacks, which JAX never stores: pallasite
    does not turn the cache on for them (each compile would pay for a key for nothing)."""

    @pallasite.kernel
    def doubled(x):
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile] * 2
        return out

    before = jax.config.jax_compilation_cache_dir
    x = torch.randn(256)
    torch.testing.assert_close(doubled(x), x * 2)
    assert jax.config.jax_compilation_cache_dir == before
