"""The reduction kind's two-pass form: a row statistic carried over one inner loop (as a
name, or in a tuple or list of device values), then used by a sibling loop."""
from __future__ import annotations

from typing import Any

from ..config import FOLDED_LOOP_TYPE
from .cases import Case, InputSpec, Line
from .expressions import FLOATS


def _lines(indent: int, *texts: str) -> list[Line]:
    return [Line(indent, text) for text in texts]


def two_pass(draw: Any, name: str) -> Case:
    """A row statistic carried over one inner loop, then used by a sibling loop (two passes)."""
    rng = draw.rng
    dtype = draw.dtype(FLOATS)
    dims = {"m": draw.size(0.4), "n": draw.size(0.8)}
    stat, init, update, use = rng.choice((
        ("mean", "hl.zeros([tm], dtype=torch.float32)", "stat + x[tm, tn].sum(1)", "x[tm, tn] - (stat / n)[:, None]"),
        ("max", 'hl.full([tm], float("-inf"), dtype=torch.float32)', "torch.maximum(stat, torch.amax(x[tm, tn], 1))",
         "torch.exp(x[tm, tn] - stat[:, None])"),
        ("sumsq", "hl.zeros([tm], dtype=torch.float32)", "stat + (x[tm, tn] * x[tm, tn]).sum(-1)",
         "x[tm, tn] * torch.rsqrt(stat / n + 1e-5)[:, None]"),
        # the sizes of a partial tile's block are its extent (frontend/tile_sizes.py)
        ("count", "hl.zeros([tm], dtype=torch.float32)",
         rng.choice(("stat + x[tm, tn].size(1)", "stat + x[tm, tn].new_ones(x[tm, tn].shape).sum(1)",
                     "stat + x[tm, tn].numel() / x[tm, tn].size(0)")), "x[tm, tn] * stat[:, None]"),
    ))
    body = _lines(0, "m, n = x.size()", "out = torch.empty([m, n], dtype=torch.float32, device=x.device)",
                  "for tm in hl.tile(m):")
    carried = rng.choice(("stat", "stat", "tuple", "list"))  # a tuple or list of device values is carried too
    if carried == "stat":
        body += _lines(1, f"stat = {init}", "for tn in hl.tile(n):")
        body.append(Line(2, f"stat = {update}"))
    else:
        left, right = ("(", ",)") if carried == "tuple" else ("[", "]")
        body += _lines(1, f"state = {left}{init}, hl.zeros([tm], dtype=torch.float32){right}", "for tn in hl.tile(n):")
        body.append(Line(2, f"state = {left}{update.replace('stat', 'state[0]')}, state[1] + 1{right}"))
        body.append(Line(1, "stat = state[0] + state[1] * 0"))
    body.append(Line(1, "for tn in hl.tile(n):"))
    body.append(Line(2, f"out[tm, tn] = {use}"))
    body.append(Line(0, "return out"))
    loop_type = draw.loop_types_each(2)
    if draw.folds and (draw.only_folds or draw.chance(0.3)):  # fold one pass: the first carries, the second after
        folded = rng.randrange(2)
        loop_type = tuple(FOLDED_LOOP_TYPE if i == folded else draw.loop_type() for i in range(2))
    return Case("reduction", name, (InputSpec("x", ("m", "n"), dtype),), tuple(body), dims,
                loop_type=loop_type, tags=("two_pass", stat, carried))
