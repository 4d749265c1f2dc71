"""The `shared_rows` kind: programs that write one output row chosen by an index that
repeats rows at steps that need not be consecutive (`g % c`, `tile.id % c`, `g // c`, a row
read from data), beside forms whose rows tell steps apart (`g + c`, `(bh // h, bh % h)`).

Each program stores its value (the last writer wins), adds it to the row it read, or adds
it with `hl.atomic_add` / `hl.atomic_max`; a row no step chooses keeps the output's zeros.
A block per step would lose the writes of earlier visits (plan/memory.py keeps such an axis
whole and runs the steps in order).
"""
from __future__ import annotations

from typing import Any

import torch

from .cases import Case, InputSpec, Line
from .expressions import dtype_name, fill_of

_GRID_ROWS = ("g % {c}", "g // {c}", "(g * 3) % {c}", "seg[g]", "{c} - 1 - g % {c}")
_TILE_ROWS = ("tm.id % {c}", "tm.id // 2", "(tm.begin // {b}) % {c}")
_WRITES = ("store", "update", "atomic_add", "atomic_max")


def shared_rows(draw: Any, name: str) -> Case:
    rng = draw.rng
    dtype = draw.dtype((torch.float32, torch.float32, torch.int32, torch.bfloat16))
    write = rng.choice(_WRITES if dtype != torch.bfloat16 else ("store", "update", "atomic_max"))
    c = rng.choice((1, 2, 3, 5))
    dims = {"n": rng.choice((1, 16, 128, 200)), "c": c}
    fill = fill_of(dtype)
    if draw.chance(0.6):  # one program per row of x
        dims["m"] = rng.choice((1, 4, 7, 10, 13))
        row = rng.choice(_GRID_ROWS).format(c=c)
        dims["c"] = c if "//" not in row else (dims["m"] - 1) // c + 1
        body = [Line(0, "m, n = x.size()"),
                Line(0, f"out = torch.zeros([{dims['c']}, n], dtype={dtype_name(dtype)}, device=x.device)"),
                Line(0, "for g in hl.grid(m):")]
        value = rng.choice(("x[g, :]", "x[g, :] * 2", "x[g, :] + g"))
        inputs = [InputSpec("x", ("m", "n"), dtype, fill), InputSpec("seg", ("m",), torch.int32, "index:c")]
    else:  # one program per tile of rows of x, reduced to one row
        block = rng.choice((8, 16))
        dims["m"] = rng.choice((8, 20, 40, 65))
        row = rng.choice(_TILE_ROWS).format(c=c, b=block)
        trips = (dims["m"] + block - 1) // block
        dims["c"] = c if "// 2" not in row else (trips - 1) // 2 + 1
        body = [Line(0, "m, n = x.size()"),
                Line(0, f"out = torch.zeros([{dims['c']}, n], dtype={dtype_name(dtype)}, device=x.device)"),
                Line(0, f"for tm in hl.tile(m, block_size={block}):")]
        value = rng.choice(("x[tm, :].sum(0)", "torch.amax(x[tm, :], dim=0)"))
        if dtype == torch.bfloat16 and value.endswith("sum(0)"):
            value = "torch.amax(x[tm, :], dim=0)"  # a bf16 sum's rounding depends on its order
        inputs = [InputSpec("x", ("m", "n"), dtype, fill)]
    if write == "store":
        body.append(Line(1, f"out[{row}, :] = {value}"))
    elif write == "update":
        body.append(Line(1, f"out[{row}, :] = out[{row}, :] + {value}"))
    else:
        body.append(Line(1, f"hl.{write}(out, [{row}, slice(None)], {value})"))
    body.append(Line(0, "return out"))
    if "seg" not in row:
        inputs = [spec for spec in inputs if spec.name != "seg"]
    # a float sum's last bits depend on its order; a stored or maxed copy must match exactly
    exact = dtype == torch.int32 or (write in ("store", "atomic_max") and "sum" not in value)
    return Case("shared_rows", name, tuple(inputs), tuple(body), dims, exact=exact,
                tags=("shared_rows", write))
