"""The `segment_rows` and `segment_mean` kinds. `segment_rows`: a grid over jagged segments
whose q-tile loop writes each tile's rows, the shape plan/worklists.py flattens into
(segment, q-tile) work items.

The rows are a pointwise function of the segment's own rows, or (`attend`) each q row
combined with every row of its segment up to its tile's end through a nested loop (a
causal jagged reduction, as jagged attention walks its keys). Half the cases name the q
loop `compact_worklist` (Helion's loop type: flatten, or the config is refused), the others
a loop type drawn for it; `pallas_worklist_grouping` and `pallas_flatten_worklist` are
drawn too, so flattened and per-segment grids are both compared with reference mode.
Outside `compact_worklist`, a pointwise store may sit under a device `if` on a per-segment
flag (rows it skips keep their zeros) and the grid may step by 2 (`g` scales the rows): forms
plan/worklists.py does not flatten.
"""
from __future__ import annotations

from typing import Any

import torch

from ..config import COMPACT_WORKLIST
from .cases import Case, InputSpec, Line

_POINTWISE = ("x[tq, :] * 2.0", "torch.sigmoid(x[tq, :]) - 0.5", "torch.abs(x[tq, :]) + x[tq, :]")


def segment_rows(draw: Any, name: str) -> Case:
    rng = draw.rng
    count = rng.randint(1, 6)
    segments = tuple(rng.choice((0, 1, 3, 8, 13, 16, 29, 40)) for _ in range(count))
    dims = {"d": rng.choice((8, 128, 200))}
    block = rng.choice(("", ", block_size=8", ", block_size=16"))
    form = rng.choice(("pointwise", "attend"))
    compact = rng.random() < 0.5
    stepped = not compact and rng.random() < 0.3
    body = [Line(0, "segments = offsets.size(0) - 1"), Line(0, "out = torch.zeros_like(x)"),
            Line(0, "for g in hl.grid(0, segments, 2):" if stepped else "for g in hl.grid(segments):"),
            Line(1, f"for tq in hl.tile(offsets[g], offsets[g + 1]{block}):")]
    flagged = form == "pointwise" and not compact and rng.random() < 0.6
    if form == "pointwise":
        value = rng.choice(_POINTWISE) + (" * (g + 1)" if stepped else "")
        if flagged:
            body += [Line(2, "if flags[g] > 0:"), Line(3, f"out[tq, :] = {value}")]
        else:
            body.append(Line(2, f"out[tq, :] = {value}"))
        loops = 1
    else:
        body += [Line(2, "acc = hl.zeros([tq, x.size(1)], dtype=torch.float32)"),
                 Line(2, f"for tk in hl.tile(offsets[g], tq.end{block}):"),
                 Line(3, "w = (tk.index[None, :] <= tq.index[:, None]).to(torch.float32)"),
                 Line(3, "acc = acc + w @ x[tk, :]"),
                 Line(2, "out[tq, :] = acc")]
        loops = 2
    body.append(Line(0, "return out"))
    first = COMPACT_WORKLIST if compact else draw.loop_type()
    loop_type = first if loops == 1 else (first, draw.loop_type())
    knobs = [("pallas_worklist_grouping", rng.choice((1, 2)))]
    if not compact and rng.random() < 0.3:
        knobs.append(("pallas_flatten_worklist", False))
    inputs = (InputSpec("x", ("T", "d"), torch.float32), InputSpec("offsets", (), torch.int32, "offsets"))
    if flagged:
        inputs += (InputSpec("flags", (len(segments),), torch.int32, "randint"),)
    return Case("segment_rows", name, inputs, tuple(body), dims, segments=segments, loop_type=loop_type,
                knobs=tuple(knobs), tags=("segment_rows", form, "compact" if compact else "drawn",
                                           *(("stepped",) if stepped else ()), *(("flagged",) if flagged else ())))


def segment_mean(draw: Any, name: str) -> Case:
    """The `segment_mean` kind: a masked mean inside a jagged segment loop (`x[t, :].mean(0)`
    per tile), or the tile's rows counted with `torch.ones_like` or its size."""
    rng = draw.rng
    dtype = draw.dtype((torch.float32, torch.bfloat16, torch.float16))
    dims = {"d": rng.choice((1, 16, 128, 200, 256))}
    size = rng.choice((None, 4, 8, 16, 32))
    block = "" if size is None else f", block_size={size}"
    body = [Line(0, "segments = offsets.size(0) - 1"), Line(0, "d = x.size(1)"),
            Line(0, "out = torch.empty([segments, d], dtype=torch.float32, device=x.device)"),
            Line(0, "for g in hl.grid(segments):"), Line(1, "acc = hl.zeros([d], dtype=torch.float32)"),
            Line(1, f"for t in hl.tile(offsets[g], offsets[g + 1]{block}):"),
            Line(2, rng.choice(("acc = acc + x[t, :].mean(0)", "acc = acc + torch.abs(x[t, :]).mean(0)",
                                "acc = torch.maximum(acc, x[t, :].mean(dim=0))",
                                "acc = acc + torch.ones_like(x[t, :]).sum(0)",
                                "acc = acc + x[t, :].sum(0) / x[t, :].size(0)",
                                "acc = acc + x[t, :].new_ones(x[t, :].shape).sum(0)"))),
            Line(1, "out[g, :] = acc"), Line(0, "return out")]
    inputs = (InputSpec("x", ("T", "d"), dtype), InputSpec("offsets", (), torch.int32, "offsets"))
    segments = tuple(rng.choice((0, 0, 1, 3, 5, 8, 13, 16, 20, 37, 64)) for _ in range(rng.randint(1, 6)))
    return Case("segment_mean", name, inputs, tuple(body), dims, segments=segments,
                loop_type=draw.loop_type(), tags=("segment_mean",))
