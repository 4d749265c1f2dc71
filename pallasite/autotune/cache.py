"""The on-disk cache of tuned configs.

One JSON file per (kernel source hash, argument signature, the globals and closure
values the trace read, chip, pallasite version, search settings) under `$PALLASITE_CACHE_DIR/autotune/` (default
`~/.cache/pallasite/autotune/`). A file that does not parse, or whose recorded key
is not the one asked for (a foreign or stale file), is ignored with a warning, as is one that cannot be read or decoded; a write that
fails (read-only or full directory) warns once and the call still returns.
Writers write a temporary file and `os.replace` it into place (atomic), under a
`filelock` lock when that package is installed, so concurrent processes never
leave a torn file. `PALLASITE_FORCE_AUTOTUNE=1` ignores the cache (a search runs and
rewrites the entry).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ..config import Config
from ..exc import warn_user

CACHE_DIR_ENV = "PALLASITE_CACHE_DIR"
FORCE_ENV = "PALLASITE_FORCE_AUTOTUNE"
FORMAT = "pallasite-autotune-v1"

try:  # optional: a cross-process lock around the write
    from filelock import FileLock as _FileLock
except ImportError:  # pragma: no cover - depends on the environment
    _FileLock = None


def cache_root() -> Path:
    """$PALLASITE_CACHE_DIR, else ~/.cache/pallasite: tuned configs and JAX's compiled programs."""
    return Path(os.environ.get(CACHE_DIR_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "pallasite"))


def cache_dir() -> Path:
    return cache_root() / "autotune"


def forced() -> bool:
    return os.environ.get(FORCE_ENV, "0") not in ("", "0")


def cache_key(fields: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The entry's file stem and its recorded key (every field as text)."""
    recorded = {name: str(value) for name, value in sorted(fields.items())}
    digest = hashlib.sha256(json.dumps(recorded, sort_keys=True).encode()).hexdigest()[:24]
    return digest, recorded


def _path(name: str, digest: str) -> Path:
    return cache_dir() / f"{name}-{digest}.json"


def load(name: str, fields: dict[str, Any]) -> Config | None:
    """The cached config for this key, or None (missing, forced, corrupt or foreign)."""
    if forced():
        return None
    digest, recorded = cache_key(fields)
    path = _path(name, digest)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        warn_user(f"pallasite autotune cache: cannot read {path} ({err}); ignoring it.")
        return None
    try:
        entry = json.loads(raw.decode("utf-8"))
        if not isinstance(entry, dict) or entry.get("format") != FORMAT:
            raise ValueError("not a pallasite autotune cache entry")
        if entry.get("key") != recorded:
            raise ValueError("its key is not this kernel's (foreign or stale entry)")
        return Config(entry["config"])
    except Exception as err:  # noqa: BLE001 - any bad content: ignore the file, never crash
        warn_user(f"pallasite autotune cache: ignoring {path}: {err}")
        return None


def store(name: str, fields: dict[str, Any], config: Config, extra: dict[str, Any] | None = None
          ) -> Path | None:
    """Write the entry atomically; returns its path, or None (with one warning naming the
    path) when it cannot be written (read-only or full directory, a directory in the way):
    the tuned config still serves this process, it is just not kept."""
    digest, recorded = cache_key(fields)
    path = _path(name, digest)
    entry = {"format": FORMAT, "key": recorded, "config": dict(config), **(extra or {})}
    text = json.dumps(entry, indent=1, sort_keys=True, default=str)
    temp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = _FileLock(str(path) + ".lock") if _FileLock is not None else None
        if lock is not None:
            lock.acquire()
        try:
            handle, temp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
            with os.fdopen(handle, "w") as out:
                out.write(text)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temp, 0o666 & ~umask)  # readable as its .lock is (mkstemp makes it 0600): a shared cache
            os.replace(temp, path)
            temp = None
        finally:
            if lock is not None:
                lock.release()
    except Exception as err:  # noqa: BLE001 - a cache that cannot be written must not fail the call
        warn_user(f"pallasite autotune cache: could not cache the tuned config of {name} in {path} "
                  f"({type(err).__name__}: {err}); it is used for this process only.")
        return None
    finally:
        if temp is not None:
            try:
                os.unlink(temp)
            except OSError:
                pass
    return path
