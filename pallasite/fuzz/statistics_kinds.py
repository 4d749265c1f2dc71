"""The `statistics` kind: reductions over several dims at once and torch's statistics.

A 2-D or 3-D input read as tiles (partial tails included) is reduced over one or
more axes by sum/mean/amax/amin (a list or tuple of dims, sometimes keepdim),
var/std/var_mean/std_mean (with `correction` or `unbiased`), logsumexp, or a vector norm, directly
in the device loop or summed over the tiles of an inner loop under each loop type
(where the inner loop's `v` may reuse a name holding a value of another shape before it).
"""
from __future__ import annotations

from typing import Any

import torch

from .cases import Case, InputSpec, Line
from .expressions import FLOATS, dtype_name

_STATISTICS = (
    "{v}.sum({d}{k})", "torch.mean({v}, dim={d}{k})", "torch.amax({v}, {d}{k})", "{v}.amin(dim={d}{k})",
    "torch.var({v}, dim={d}{k})", "{v}.var({d}, correction=0{k})", "torch.std({v}, {d}, unbiased=False{k})",
    "{v}.std(dim={d}{k})", "torch.var_mean({v}, dim={d}{k})[0]", "torch.std_mean({v}, {d}, correction=0{k})[1]",
    "torch.logsumexp({v}, dim={d}{k})", "{v}.sum({d}{k}, dtype=torch.float32)",
    "torch.mean({v}, dim={d}{k}, dtype=torch.float32)", "torch.linalg.vector_norm({v}, dim={d}{k})",
    "{v}.norm(1, {d}{k})", "torch.norm({v}, dim={d}{k})",
)


def _size(rng, small: bool = False) -> int:
    return rng.choice((2, 5, 8, 13, 16) if small else (3, 8, 37, 128, 129, 200))


def _dims_text(rng, reduced: list[int], rank: int) -> str:
    """A spelling of the reduced axes: an int (sometimes negative), a list or a tuple."""
    if len(reduced) == 1 and rng.random() < 0.5:
        return str(reduced[0] - rank if rng.random() < 0.4 else reduced[0])
    items = ", ".join(str(axis) for axis in reduced)
    return f"[{items}]" if rng.random() < 0.5 else f"({items},)" if len(reduced) == 1 else f"({items})"


def statistics(draw: Any, name: str) -> Case:
    rng = draw.rng
    dtype = rng.choice(FLOATS)
    rank = rng.choice((2, 3))
    axes = ("b", "m", "n")[3 - rank:]
    dims = {a: _size(rng, small=a != "n") for a in axes}
    inner = rank == 2 and rng.random() < 0.4  # summed over the tiles of an inner loop
    if inner:
        reduced = [1]
    else:
        reduced = sorted(rng.sample(range(1, rank), rng.randint(1, rank - 1)))
        if rng.random() < 0.25:
            reduced = list(range(rank))  # the outer tile's axis too: one number per tile
    keepdim = rng.random() < 0.3
    text = rng.choice(_STATISTICS).format(v="v", d=_dims_text(rng, reduced, rank),
                                          k=", keepdim=True" if keepdim else "")
    result = f"({text}){_squeezed(keepdim, reduced, rank)}.float()"
    kept = [a for i, a in enumerate(axes) if i not in reduced]
    body = [Line(0, f"{', '.join(axes)} = x.size()")]
    loop_type = None
    if inner:
        body += [Line(0, f"out = torch.zeros([{axes[0]}], dtype=torch.float32, device=x.device)"),
                 Line(0, f"for to in hl.tile({axes[0]}, block_size=8):"),
                 Line(1, "acc = hl.zeros([to], dtype=torch.float32)")]
        if rng.random() < 0.5:  # a name the inner loop assigns before reading it: the body's own
            body.append(Line(1, f"v = x[to, {rng.choice((0, -1))}].float() * 2.0", droppable=True))
        body += [Line(1, f"for tn in hl.tile({axes[1]}):"),
                 Line(2, "v = x[to, tn]"),
                 Line(2, f"acc = acc + {result}"),
                 Line(1, "out[to] = acc")]
        loop_type = draw.loop_type()
    else:
        out_shape = f"[({axes[0]} + 7) // 8]" if not kept else f"[{', '.join(kept)}]"
        store = "to.id" if not kept else ", ".join(["to"] + [":"] * (len(kept) - 1))
        body += [Line(0, f"out = torch.zeros({out_shape}, dtype=torch.float32, device=x.device)"),
                 Line(0, f"for to in hl.tile({axes[0]}, block_size=8):"),
                 Line(1, f"v = x[{', '.join(['to'] + [':'] * (rank - 1))}]"),
                 Line(1, f"out[{store}] = {result}")]
    body.append(Line(0, "return out"))
    return Case("statistics", name, (InputSpec("x", axes, dtype),), tuple(body), dims, loop_type=loop_type,
                tags=("statistics", text.split("(")[0], dtype_name(dtype)))


def _squeezed(keepdim: bool, reduced: list[int], rank: int) -> str:
    """An index dropping the reduced axes a keepdim result keeps as size 1."""
    if not keepdim:
        return ""
    return "[" + ", ".join("0" if axis in reduced else ":" for axis in range(rank)) + "]"
