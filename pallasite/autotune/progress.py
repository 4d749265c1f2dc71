"""The search's progress on stderr: candidates tried, best estimate so far, ETA.

On a terminal, drawn with `tqdm` (or, without it, one status line per second and a
last one at the end); elsewhere (a log file, a pipe, CI) one line per search, when it
ends: a log should not fill with redrawn bars. `PALLASITE_AUTOTUNE_QUIET=1` silences it, and the
autotuner's one-line log messages (`log`).
"""
from __future__ import annotations

import math
import os
import sys
import time


QUIET_ENV = "PALLASITE_AUTOTUNE_QUIET"

try:  # optional: a well-kept progress bar library
    from tqdm import tqdm as _tqdm
except ImportError:  # pragma: no cover - depends on the environment
    _tqdm = None


def quiet_by_env() -> bool:
    return os.environ.get(QUIET_ENV, "0") not in ("", "0")




def log(message: str, quiet: bool = False) -> None:
    """One line of the autotuner's log on stderr (unless quiet: the environment's, or the
    kernel's `autotune_log_level`)."""
    if not quiet and not quiet_by_env():
        print(f"[pallasite autotune] {message}", file=sys.stderr, flush=True)


def _seconds(value: float) -> str:
    if not math.isfinite(value):
        return "none yet"
    return f"{value * 1e6:.2f} us" if value < 1e-3 else f"{value * 1e3:.3f} ms"


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream: not a terminal
        return False


class Progress:
    """`with Progress(title, total) as p: ... p.advance(best_seconds)`."""

    def __init__(self, title: str, total: int, quiet: bool | None = None, label: str = "model"):
        self.title, self.total, self.label = title, max(total, 1), label
        self.quiet = quiet_by_env() if quiet is None else quiet
        self.done = 0
        self.best = math.inf
        self._start = time.perf_counter()
        self._last_line = 0.0
        self._bar = None
        self._terminal = _is_terminal(sys.stderr)

    def __enter__(self) -> Progress:
        if not self.quiet and self._terminal and _tqdm is not None:
            self._bar = _tqdm(total=self.total, desc=self.title, unit="config", file=sys.stderr,
                              leave=True, dynamic_ncols=True)
        return self

    def advance(self, best: float) -> None:
        self.done += 1
        self.best = best
        if self.quiet:
            return
        if self._bar is not None:
            if self.done > self.total:
                self._bar.total = self.done
            self._bar.set_postfix_str(f"best {_seconds(best)} ({self.label})", refresh=False)
            self._bar.update(1)
        elif self._terminal and time.perf_counter() - self._last_line >= 1.0:
            self._line()

    def _line(self) -> None:
        self._last_line = time.perf_counter()
        elapsed = self._last_line - self._start
        left = max(self.total - self.done, 0)
        eta = elapsed / self.done * left if self.done else math.inf
        print(f"[pallasite autotune] {self.title}: {self.done}/{self.total} candidates, "
              f"best {_seconds(self.best)} ({self.label}), ETA {eta:.1f}s", file=sys.stderr, flush=True)

    def __exit__(self, *exc_info) -> None:
        if self.quiet:
            return
        if self._bar is not None:
            # the search stops when it stops improving: its total is what it tried, so a
            # finished search does not look aborted
            self._bar.total = self.done
            self._bar.refresh()
            self._bar.close()
        else:
            self.total = self.done
            self._line()
