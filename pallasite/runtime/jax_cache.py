"""JAX's persistent compilation cache under `$PALLASITE_CACHE_DIR/jax`: a second process
running the same kernels on a TPU loads their compiled Mosaic programs instead of
compiling them again.

Only kernels compiled for a TPU use it. TPU interpret mode (the CPU) compiles programs
that call back into Python at every memory access and DMA, and JAX does not store a
program with host callbacks (their addresses are baked into it); computing the cache key
of each would only cost time there, so on the CPU the cache is left as the user set it.

JAX's own file cache does the work, with what the autotune cache also needs: a size bound
(least recently used entries evicted; `PALLASITE_JAX_CACHE_MAX_BYTES`, default 2 GiB), a
file lock around reads and writes, so processes sharing the directory are safe, and an
entry that fails to load is reported with a warning and compiled again. A cache directory
the user configured (`jax_compilation_cache_dir`) is kept; `PALLASITE_JAX_CACHE=0` turns
pallasite's off.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

import jax

from ..autotune.cache import cache_root

ENABLE_ENV = "PALLASITE_JAX_CACHE"
MAX_BYTES_ENV = "PALLASITE_JAX_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 2 * 2**30

_lock = threading.Lock()


def use_persistent_cache() -> Path | None:
    """Point JAX's persistent compilation cache at `$PALLASITE_CACHE_DIR/jax` unless the
    user chose a directory or turned it off; the directory in use (None: no cache)."""
    if os.environ.get(ENABLE_ENV, "1").lower() in ("0", "false", "no", "off"):
        return None
    with _lock:
        chosen = jax.config.jax_compilation_cache_dir
        if chosen:
            return Path(chosen)
        path = cache_root() / "jax"
        max_bytes = int(os.environ.get(MAX_BYTES_ENV, DEFAULT_MAX_BYTES))
        jax.config.update("jax_compilation_cache_max_size", max_bytes)
        # a Mosaic kernel compiles in well under JAX's default 1 s threshold: store every one
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_compilation_cache_dir", str(path))
        return path
