"""The `scans` kind: scans, orderings and user-combined reductions along a dim of a tile.

torch.cumsum/cumprod, torch.cummax/cummin, torch.sort/argsort/msort, a top-1 torch.topk,
hl.cumsum/cumprod (reverse too), hl.associative_scan with a
combine written in the kernel (a lambda over one value, or over a pair: the affine
recurrence, whose combine is not commutative), and hl.reduce with a combine, along
either axis of a 2-D tile whose tails may be partial, in the device loop or in an
inner loop under each loop type. bfloat16 inputs go only through scans that are
exact in any order (max/min) or accumulate in float32 (cumsum): a bfloat16 add or
product rounds each step, and the log-step scan combines in another order than
reference mode's loop.
"""
from __future__ import annotations

from typing import Any

import torch

from .cases import Case, InputSpec, Line
from .expressions import dtype_name

_ORDER_FREE = ("torch.maximum(a, b)", "torch.minimum(a, b)")
_FLOAT32_ONLY = ("a + b", "a * b")


def _scan(rng, dtype: torch.dtype, dim: int) -> tuple[str, str]:
    """(an expression of the tile value `v` of the same shape, a tag)."""
    reverse = rng.random() < 0.4
    flag = ", reverse=True" if reverse else ""
    combines = _ORDER_FREE + (_FLOAT32_ONLY if dtype == torch.float32 else ())
    form = rng.choice(("cumsum", "cumprod", "hl_cumsum", "hl_cumprod", "scan", "pair_scan", "order", "order")
                      if dtype == torch.float32 else ("cumsum", "hl_cumsum", "scan", "order"))
    if form == "order":  # exact in any order: copies of elements, or their positions
        return rng.choice((f"torch.cummax(v, {dim}).values", f"v.cummin({dim})[0]",
                           f"torch.cummax(v, dim={dim}).indices.to(v.dtype)", f"torch.sort(v, {dim}).values",
                           f"torch.sort(v, dim={dim}, descending=True)[1].to(v.dtype)",
                           f"torch.argsort(v, dim={dim}).to(v.dtype)", "torch.msort(v)" if dim == 0 else
                           f"v.sort({dim}, True).values")), form
    near_one = "(1 + v * 0.01)"
    if form == "cumsum":
        return rng.choice((f"torch.cumsum(v, {dim})", f"v.cumsum(dim={dim - 2})")), form
    if form == "cumprod":
        return f"torch.cumprod({near_one}, dim={dim})", form
    if form in ("hl_cumsum", "hl_cumprod"):
        source = near_one if form == "hl_cumprod" else "v"
        return f"hl.{form[3:]}({source}, {dim}{flag})", form
    if form == "scan":
        combine = rng.choice(combines)
        source = near_one if combine == "a * b" else "v"
        return f"hl.associative_scan(lambda a, b: {combine}, {source}, {dim}{flag})", f"scan:{combine}"
    pair = f"hl.associative_scan(lambda a, b: (b[0] * a[0], b[0] * a[1] + b[1]), ({near_one}, v), {dim}{flag})"
    return f"{pair}[1]", form


def _reduce(rng, dtype: torch.dtype, dim: int) -> tuple[str, str]:
    """(an expression of `v` reduced along `dim` with keep_dims, a tag)."""
    combines = _ORDER_FREE + (_FLOAT32_ONLY[:1] if dtype == torch.float32 else ())
    if rng.random() < 0.2:  # the largest (or smallest) element: a top-1 keeps the dim
        return f"torch.topk(v, 1, dim={dim}, largest={rng.random() < 0.5}).values", "topk"
    combine = rng.choice(combines)
    other = rng.choice(("", ", other=0", ", other=-1.0"))
    return f"hl.reduce(lambda a, b: {combine}, v, {dim}{other}, keep_dims=True)", f"reduce:{combine}"


def scans(draw: Any, name: str) -> Case:
    rng = draw.rng
    dtype = rng.choice((torch.float32, torch.float32, torch.bfloat16))
    dims = {"m": rng.choice((3, 8, 13, 16, 37)), "n": rng.choice((5, 128, 129, 200, 300))}
    dim = rng.choice((0, 1))
    reduce = rng.random() < 0.3
    text, tag = (_reduce if reduce else _scan)(rng, dtype, dim)
    inner = rng.random() < 0.4
    body = [Line(0, "m, n = x.size()"),
            Line(0, f"out = torch.zeros([m, n], dtype={dtype_name(dtype)}, device=x.device)")]
    store = "(v * 0 + {})" if reduce else "{}"  # a keep_dims reduce broadcasts over the tile
    loop_type = None
    if inner:
        body += [Line(0, "for tm in hl.tile(m):"), Line(1, "for tn in hl.tile(n):"), Line(2, "v = x[tm, tn]"),
                 Line(2, f"out[tm, tn] = {store.format(text)}")]
        loop_type = draw.loop_type()
    else:
        body += [Line(0, "for tm, tn in hl.tile([m, n]):"), Line(1, "v = x[tm, tn]"),
                 Line(1, f"out[tm, tn] = {store.format(text)}")]
    body.append(Line(0, "return out"))
    return Case("scans", name, (InputSpec("x", ("m", "n"), dtype),), tuple(body), dims, loop_type=loop_type,
                tags=("scans", tag, dtype_name(dtype)))
