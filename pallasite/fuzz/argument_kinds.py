"""The `argument_rows` kind: runtime int arguments in index arithmetic.

An int kernel argument is a runtime value: its interval is unknown when planning, so
arithmetic on it (`((r + g) * k) % m`) is checked against int32 at each call
(`plan/bounds.py:check_scalar_arithmetic`), and an index it computes is range-checked in
interpret mode. Rows of x are read (or written) at positions computed from the grid index
and one or two int arguments, some products large (a few times 10^9, inside int32), and an
argument may start an inner tile loop. The arguments' values are drawn so that every step
stays inside int32: the check must pass them, and the rows must be torch's.
"""
from __future__ import annotations

from typing import Any

import torch

from .cases import Case, InputSpec, Line

_READS = (  # a row of x chosen by g and the arguments r, s (r, s >= 0)
    "x[(r + g) % m, :]", "x[((r + g) * {k}) % m, :]", "x[(r * g + s) % m, :]", "x[(g * {k} + r * s) % m, :]",
    "x[(r - g) % m, :]", "x[max(g - r, 0), :]", "x[min(g + s, m - 1), :]",
)


def argument_rows(draw: Any, name: str) -> Case:
    rng = draw.rng
    dtype = draw.dtype((torch.float32, torch.int32))
    dims = {"m": rng.choice((1, 5, 8, 37, 64)), "d": rng.choice((1, 16, 128, 200))}
    k = rng.choice((3, 7, 1009, 1000003))
    r, s = rng.choice((0, 1, 17, 2000)), rng.choice((0, 2, 5))
    inputs = (InputSpec("x", ("m", "d"), dtype, "randint" if dtype == torch.int32 else "randn"),
              InputSpec("r", (), torch.int32, f"int:{r}"), InputSpec("s", (), torch.int32, f"int:{s}"))
    form = rng.choice(("read", "write", "loop"))
    if form == "loop" and dims["m"] == 1:  # a tile over a size-1 axis broadcasts: no store through it
        dims["m"] = 37
    body = [Line(0, "m, d = x.size()"), Line(0, "out = torch.zeros_like(x)")]
    if form == "loop":  # rows [s, m) in tiles, an inner loop starting at an argument (s < m)
        block = rng.choice(("", ", block_size=8"))
        s = min(s, dims["m"] - 1)
        inputs = (*inputs[:2], InputSpec("s", (), torch.int32, f"int:{s}"))
        body += [Line(0, "for tc in hl.tile(d):"), Line(1, f"for t in hl.tile(s, m{block}):"),
                 Line(2, "out[t, tc] = x[t, tc] * 2 + r % 5")]
    else:
        read = rng.choice(_READS).format(k=k)
        body.append(Line(0, "for g in hl.grid(m):"))
        if form == "read":
            body.append(Line(1, f"out[g, :] = {read} + g"))
        else:  # the row written is computed; reads are the grid's own (a permutation needs none)
            body.append(Line(1, f"out[(r + g) % m, :] = x[g, :] - s"))
    body.append(Line(0, "return out"))
    return Case("argument_rows", name, inputs, tuple(body), dims, exact=dtype == torch.int32,
                tags=("argument_rows", form))
