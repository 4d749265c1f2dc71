"""Kinds whose accesses a device `if` guards.

`guarded_loops`: a device `if` that encloses tile loops (Helion's grouped GEMM
and MoE: `if rows != 0: for tile in hl.tile(...)`).

A grid over jagged segments reads each segment's bounds, tests them (or a value read
from a per-segment flag, or both), and only then walks the segment's rows with an inner
tile loop: rows copied and scaled (stores skipped when the if is false), or an
accumulator defined before the if and carried through the loop, with or without an
`else` that changes it, stored after the if. The loop's bound may be read inside the
if. Empty segments make the false branch run; each inner loop type is drawn.
"""
from __future__ import annotations

from typing import Any

import torch

from .cases import Case, InputSpec, Line

_CONDITIONS = ("rows != 0", "rows > 0", "end > start", "flags[g] != 0", "rows != 0 and flags[g] > 0",
               "rows > limit")  # limit: a host torch.tensor constant, a 0-d tensor used whole


def guarded_loops(draw: Any, name: str) -> Case:
    rng = draw.rng
    dtype = draw.dtype((torch.float32, torch.float32, torch.int32))
    count = rng.randint(1, 6)
    segments = tuple(rng.choice((0, 0, 1, 5, 8, 13, 16, 37)) for _ in range(count))
    dims = {"d": rng.choice((1, 8, 128, 200)), "G": count}
    block = rng.choice(("", "", ", block_size=8", ", block_size=16"))
    condition = rng.choice(_CONDITIONS)
    inputs = [InputSpec("x", ("T", "d"), dtype, "randint" if dtype == torch.int32 else "randn"),
              InputSpec("offsets", (), torch.int32, "offsets"),
              InputSpec("flags", ("G",), torch.int32, "randint")]
    body = [Line(0, "segments = offsets.size(0) - 1"), Line(0, "d = x.size(1)")]
    if condition == "rows > limit":
        body.append(Line(0, f"limit = torch.tensor({rng.choice((0, 3, 8))}, dtype=torch.int32, device=x.device)"))
    form = rng.choice(("copy", "accumulate", "accumulate_else"))
    bound_inside = rng.random() < 0.4  # the loop's end read from the tensor inside the if
    acc_dtype = "torch.int32" if dtype == torch.int32 else "torch.float32"
    if form == "copy":
        body.append(Line(0, "out = torch.zeros_like(x)"))
    else:
        body.append(Line(0, f"out = torch.zeros([segments, d], dtype={acc_dtype}, device=x.device)"))
    body.append(Line(0, "for g in hl.grid(segments):"))
    body += [Line(1, "start = offsets[g]"), Line(1, "end = offsets[g + 1]"), Line(1, "rows = end - start")]
    if form != "copy":
        body.append(Line(1, f"acc = hl.full([d], {rng.choice((0, 1, -2))}, dtype={acc_dtype})"))
    body.append(Line(1, f"if {condition}:"))
    end = "end"
    if bound_inside:
        body.append(Line(2, "last = offsets[g + 1]"))
        end = "last"
    body.append(Line(2, f"for t in hl.tile(start, {end}{block}):"))
    if form == "copy":
        body.append(Line(3, rng.choice(("out[t, :] = x[t, :] * 2 + g", "out[t, :] = x[t, :] - t.id"))))
    else:
        body.append(Line(3, rng.choice(("acc = acc + x[t, :].sum(0)", "acc = torch.maximum(acc, x[t, :].amax(0))"))))
        if form == "accumulate_else":
            body.append(Line(1, "else:"))
            body.append(Line(2, rng.choice(("acc = acc - 1", "acc = acc * 2 + g"))))
        body.append(Line(1, "out[g, :] = acc"))
    body.append(Line(0, "return out"))
    return Case("guarded_loops", name, tuple(inputs), tuple(body), dims, segments=segments,
                loop_type=draw.loop_type(), exact=dtype == torch.int32, tags=(form, condition))



_SENTINEL_TESTS = ("s >= 0", "s != -1", "s > -1")
_EDGE_FORMS = (  # (condition, statement) over rows g of x, c drawn in [1, 3]
    ("g > {c1}", "out[g, :] = x[g - {c}, :] + x[g, :]"),
    ("g >= {c}", "out[g - {c}, :] = x[g, :] * 2"),
    ("g < m - {c}", "out[g + {c}, :] = x[g, :]"),
    ("g + {c} < m", "out[g, :] = x[g + {c}, :] - x[g, :]"),
)


def guarded_rows(draw: Any, name: str) -> Case:
    rng = draw.rng
    dtype = draw.dtype((torch.float32, torch.float32, torch.int32, torch.bfloat16))
    fill = "randint" if dtype == torch.int32 else "randn"
    dims = {"m": rng.choice((1, 3, 8, 13)), "n": rng.choice((1, 16, 128, 200)), "r": rng.choice((1, 3, 8, 20, 40))}
    name_of = {torch.float32: "torch.float32", torch.int32: "torch.int32", torch.bfloat16: "torch.bfloat16"}[dtype]
    if draw.chance(0.3):  # a neighbour's row at the grid's edges
        c = rng.randint(1, 3)
        condition, statement = (part.format(c=c, c1=c - 1) for part in rng.choice(_EDGE_FORMS))
        inputs = (InputSpec("x", ("m", "n"), dtype, fill),)
        body = [Line(0, "m, n = x.size()"), Line(0, "out = torch.zeros_like(x)"), Line(0, "for g in hl.grid(m):"),
                Line(1, f"if {condition}:"), Line(2, statement), Line(0, "return out")]
        return Case("guarded_rows", name, inputs, tuple(body), dims, exact=True, tags=("edge", condition))
    test = rng.choice(_SENTINEL_TESTS)
    form = rng.choice(("read", "read_else", "read_3d", "store", "update", "atomic_add"))
    if form == "atomic_add" and dtype == torch.bfloat16:
        form = "store"
    three_d = form == "read_3d"
    table = ("r", "k", "n") if three_d else ("r", "n")
    dims["k"] = rng.choice((1, 4, 8))
    inputs = (InputSpec("x", ("m", "k", "n") if three_d else ("m", "n"), dtype, fill),
              InputSpec("table", table, dtype, fill), InputSpec("seg", ("m",), torch.int32, "sentinel:r"))
    body = [Line(0, "m = x.size(0)")]
    if form.startswith("read"):
        body.append(Line(0, "out = torch.zeros_like(x)"))
    else:
        body.append(Line(0, f"out = torch.zeros([table.size(0), x.size(1)], dtype={name_of}, device=x.device)"))
    body += [Line(0, "for g in hl.grid(m):"), Line(1, "s = seg[g]"), Line(1, f"if {test}:")]
    whole = ", :, :" if three_d else ", :"
    if form.startswith("read"):
        body.append(Line(2, f"out[g{whole}] = table[s{whole}] {rng.choice(('* 2', '+ x[g' + whole + ']'))}"))
        if form == "read_else":
            body += [Line(1, "else:"), Line(2, "out[g, :] = x[g, :] - 1")]
    elif form == "store":
        body.append(Line(2, "out[s, :] = x[g, :] + table[s, :]"))
    elif form == "update":
        body.append(Line(2, "out[s, :] = out[s, :] + x[g, :]"))
    else:
        body.append(Line(2, "hl.atomic_add(out, [s, slice(None)], x[g, :])"))
    body.append(Line(0, "return out"))
    # a float sum's last bits depend on its order (updates and atomics of repeated rows)
    exact = dtype == torch.int32 or form.startswith("read") or form == "store"
    return Case("guarded_rows", name, inputs, tuple(body), dims, exact=exact, tags=(form, test))
