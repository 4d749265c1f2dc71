"""What `pallasite autotune` shows: a table of the best configs with the cost model's
breakdown, and the search history (time per candidate in search order, best so far)
as a CSV file and, when matplotlib is installed, a plot."""
from __future__ import annotations

import csv
import math
from pathlib import Path

from .. import exc
from .cost_model import estimate
from .search import SearchResult

PARTS = ("memory", "compute", "overhead", "exposed_dma")


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:10.2f}" if math.isfinite(seconds) else "  rejected"


def format_table(result: SearchResult, kernel, args, kwargs=None, chip: str | None = None,
                 top: int = 5, label: str = "model") -> str:
    """The top configs, fastest first, each with its modelled breakdown (microseconds)."""
    header = f"{'rank':>4}  {'time us':>10}  " + "  ".join(f"{p + ' us':>14}" for p in PARTS) + "  config"
    lines = [f"top {top} of {len(result.ranked())} legal configs ({len(result.trials)} tried, "
             f"{result.wall_seconds:.2f}s); times are the TPU cost model's ({label})", header,
             "-" * len(header)]
    for rank, trial in enumerate(result.ranked()[:top], 1):
        try:
            parts = estimate(kernel, args, trial.config, kwargs=kwargs, chip=chip).breakdown
        except exc.PallasiteError:
            parts = {}
        cells = "  ".join(f"{_us(parts[p]) if p in parts else '-':>14}" for p in PARTS)
        marker = " (default)" if trial.config == result.default else ""
        lines.append(f"{rank:>4}  {_us(trial.seconds)}  {cells}  {dict(trial.config)}{marker}")
    default = next((t for t in result.trials if t.config == result.default), None)
    if default is not None and math.isfinite(default.seconds) and result.best_seconds > 0:
        lines.append(f"default config: {_us(default.seconds).strip()} us; best: "
                     f"{_us(result.best_seconds).strip()} us ({default.seconds / result.best_seconds:.2f}x)")
    return "\n".join(lines)


def history(result: SearchResult) -> list[tuple[int, float, float]]:
    """(candidate number, its time, the best time so far) in search order."""
    best, rows = math.inf, []
    for i, trial in enumerate(result.trials, 1):
        best = min(best, trial.seconds)
        rows.append((i, trial.seconds, best))
    return rows


def write_history(result: SearchResult, stem: Path, title: str) -> list[Path]:
    """`stem`.csv always, `stem`.png when matplotlib is installed; the files written."""
    rows = history(result)
    written = [stem.with_suffix(".csv")]
    with open(written[0], "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["candidate", "seconds", "best_so_far", "config"])
        for (i, seconds, best), trial in zip(rows, result.trials):
            writer.writerow([i, seconds, best, dict(trial.config)])
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return written
    finite = [(i, s * 1e6) for i, s, _ in rows if math.isfinite(s)]
    figure, axes = plt.subplots(figsize=(8, 4.5))
    axes.scatter([i for i, _ in finite], [s for _, s in finite], s=12, label="candidate (model)")
    axes.step([i for i, _, b in rows if math.isfinite(b)], [b * 1e6 for _, _, b in rows if math.isfinite(b)],
              where="post", color="tab:red", label="best so far")
    axes.set_xlabel("candidate (search order)")
    axes.set_ylabel("estimated time (us, TPU cost model)")
    axes.set_title(title)
    axes.legend()
    figure.tight_layout()
    written.append(stem.with_suffix(".png"))
    figure.savefig(written[-1], dpi=120)
    plt.close(figure)
    return written
