"""The `wide_integers` kind: integers torch holds in int64, hashed, narrowed or needed.

An integer sum, `.long()` and the arithmetic taking them on are int64 in torch and int32 on
the device (plan/int64_values.py). A value only ring ops (+, -, *, ^, <<) take on to a cast
to int32, an int32 store or a mask by a literal is torch's answer even past int32; a use that
needs torch's number (a comparison, `% 1000`, a float cast, an int64 store) makes both modes
raise at the line whose number left int32. The cases draw values large enough to leave int32
half the time, a row's hash computed whole or carried through an inner tile loop, and one
ending of each family, so a check placed at the wrong op, or missing, shows as a mismatch.
"""
from __future__ import annotations

from typing import Any

import torch

from .cases import Case, InputSpec, Line

_SOURCES = ("x[tm, {cols}].sum(1)", "(x[tm, {cols}].long() * {k}).sum(1)", "x[tm, {cols}].to(torch.int64).sum(1)")
_STEPS = ("h * {k} + {c}", "h ^ (h << 3)", "h - {c} * h", "(h + {c}) * (h - {c})")
# (ending, output dtype): narrowed (torch wraps too) or needing torch's number
_ENDINGS = (("h.to(torch.int32)", torch.int32), ("h", torch.int32), ("h & 1023", torch.int32),
            ("(h % 1024).to(torch.int32)", torch.int32), ("h", torch.int64),
            ("(h % 1000).to(torch.int32)", torch.int32), ("h.float()", torch.float32),
            ("(h > 0).to(torch.int32)", torch.int32), ("table[h & 1023]", torch.float32))


def wide_integers(draw: Any, name: str) -> Case:
    rng = draw.rng
    dims = {"m": rng.choice((1, 8, 13, 64)), "n": rng.choice((4, 40, 128, 300))}
    k, c = rng.choice((3, 31, 65599, 1000003, 2654435761)), rng.choice((1, 7, 12345))  # Knuth's: past int32
    ending, out_dtype = rng.choice(_ENDINGS)
    inputs = [InputSpec("x", ("m", "n"), torch.int32, "large" if draw.chance(0.5) else "randint")]
    if "table" in ending:
        inputs.append(InputSpec("table", ("v",), torch.float32, "randn"))
        dims["v"] = 1024
    body = [Line(0, "m, n = x.size()"),
            Line(0, f"out = torch.zeros([m], dtype={_NAMES[out_dtype]}, device=x.device)"),
            Line(0, "for tm in hl.tile(m):")]
    loop_type = None
    if draw.chance(0.4):  # a checksum carried through an inner loop: int64 from its first step
        loop_type = draw.loop_type()
        body += [Line(1, "h = hl.zeros([tm], dtype=torch.int32)"), Line(1, "for tn in hl.tile(n):"),
                 Line(2, f"h = h * {k} + " + rng.choice(_SOURCES).format(cols="tn", k=k))]
    else:
        body.append(Line(1, "h = " + rng.choice(_SOURCES).format(cols=":", k=k)))
    for _ in range(rng.randint(0, 2)):
        body.append(Line(1, "h = " + rng.choice(_STEPS).format(k=k, c=c)))
    body += [Line(1, f"out[tm] = {ending}"), Line(0, "return out")]
    return Case("wide_integers", name, tuple(inputs), tuple(body), dims, loop_type=loop_type,
                exact=out_dtype != torch.float32, tags=("wide_integers", ending))


_NAMES = {torch.int32: "torch.int32", torch.int64: "torch.int64", torch.float32: "torch.float32"}
