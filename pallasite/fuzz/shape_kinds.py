"""The `shape_ops` kind: torch.cat/stack, hl.split/join, torch.gather and torch.einsum on tiles.

Each case loads rows of a few inputs with a row tile (whose last tile may be partial) and
whole lane axes, and stores one of: a concatenation along the lanes or the rows (widths
drawn aligned or not, so both of cat's lowerings run), a stack along any axis, RoPE's
reshape-split-rotate-join-reshape of lane pairs, a gather of a tile's lanes by an index
input, or an einsum of a matmul form, or matrix @ vector products accumulated over an inner loop
(folded too), or a composite of the row block (tril/triu, flip, roll, diff, repeat/tile,
repeat_interleave, sort, topk, cummax, outer,
glu, softmin, rms_norm, normalize). A concatenation may run in an inner loop over chunks of 128 lanes, under each
loop type.
"""
from __future__ import annotations

from typing import Any

import torch

from .cases import Case, InputSpec, Line
from .expressions import dtype_name, fill_of

_ROWS = (3, 8, 13, 16, 37)
_WIDTHS = (32, 64, 96, 128, 256)


def _cat(rng, dtype) -> tuple[list[Line], tuple[InputSpec, ...], dict[str, int], str]:
    dims = {"m": rng.choice(_ROWS), "p": rng.choice(_WIDTHS), "q": rng.choice(_WIDTHS)}
    inputs = (InputSpec("x", ("m", "p"), dtype, fill_of(dtype)), InputSpec("y", ("m", "q"), dtype, fill_of(dtype)))
    pieces = rng.choice(("[a, b]", "(b, a, b)", "[a * 2, b]"))
    width = {"[a, b]": "p + q", "(b, a, b)": "p + 2 * q", "[a * 2, b]": "p + q"}[pieces]
    dim = rng.choice(("1", "-1", "dim=1"))
    body = [Line(0, "m, p = x.size()"), Line(0, "q = y.size(1)"),
            Line(0, f"out = torch.zeros([m, {width}], dtype={dtype_name(dtype)}, device=x.device)"),
            Line(0, "for tm in hl.tile(m):"), Line(1, "a, b = x[tm, :], y[tm, :]"),
            Line(1, f"out[tm, :] = torch.cat({pieces}, {dim})")]
    return body, inputs, dims, "cat_lanes"


def _cat_rows(rng, dtype) -> tuple[list[Line], tuple[InputSpec, ...], dict[str, int], str]:
    dims = {"b": rng.choice((2, 3, 5)), "r": rng.choice((4, 8, 16)), "s": rng.choice((4, 8)), "n": 128}
    inputs = (InputSpec("x", ("b", "r", "n"), dtype, fill_of(dtype)), InputSpec("y", ("b", "s", "n"), dtype, fill_of(dtype)))
    body = [Line(0, "b, r, n = x.size()"),
            Line(0, f"out = torch.zeros([b, r + y.size(1), n], dtype={dtype_name(dtype)}, device=x.device)"),
            Line(0, "for tb in hl.tile(b):"),
            Line(1, "out[tb, :, :] = torch.cat([x[tb, :, :], y[tb, :, :]], 1)")]
    return body, inputs, dims, "cat_rows"


def _stack(rng, dtype) -> tuple[list[Line], tuple[InputSpec, ...], dict[str, int], str]:
    dims = {"m": rng.choice(_ROWS), "n": rng.choice((64, 128))}
    inputs = (InputSpec("x", ("m", "n"), dtype, fill_of(dtype)), InputSpec("y", ("m", "n"), dtype, fill_of(dtype)))
    dim = rng.choice((0, 1, 2))
    shape = {0: "[2, m, n]", 1: "[m, 2, n]", 2: "[m, n, 2]"}[dim]
    target = {0: "out[:, tm, :]", 1: "out[tm, :, :]", 2: "out[tm, :, :]"}[dim]
    body = [Line(0, "m, n = x.size()"),
            Line(0, f"out = torch.zeros({shape}, dtype={dtype_name(dtype)}, device=x.device)"),
            Line(0, "for tm in hl.tile(m):"),
            Line(1, f"{target} = torch.stack([x[tm, :], y[tm, :] + 1], {dim})")]
    return body, inputs, dims, f"stack_{dim}"


def _rope(rng, dtype) -> tuple[list[Line], tuple[InputSpec, ...], dict[str, int], str]:
    d = rng.choice((64, 128, 256))
    dims = {"m": rng.choice(_ROWS), "d": d, "h": d // 2}
    inputs = (InputSpec("x", ("m", "d"), dtype), InputSpec("c", ("m", "h")), InputSpec("s", ("m", "h")))
    reshape = rng.choice(("reshape(v.size(0), d)", "view(v.size(0), d)", "flatten(1)"))
    body = [Line(0, "m, d = x.size()"), Line(0, "out = torch.zeros_like(x)"),
            Line(0, "for tm in hl.tile(m):"),
            Line(1, "v = x[tm, :].float()"),
            Line(1, "x0, x1 = hl.split(v.reshape(v.size(0), d // 2, 2))"),
            Line(1, "cs, sn = c[tm, :], s[tm, :]"),
            Line(1, f"out[tm, :] = hl.join(x0 * cs - x1 * sn, x0 * sn + x1 * cs).{reshape}.to(x.dtype)")]
    return body, inputs, dims, "rope"


def _gather(rng, dtype) -> tuple[list[Line], tuple[InputSpec, ...], dict[str, int], str]:
    dims = {"m": rng.choice(_ROWS), "n": rng.choice((64, 128)), "k": rng.choice((32, 128))}
    inputs = (InputSpec("x", ("m", "n"), dtype, fill_of(dtype)), InputSpec("idx", ("m", "k"), torch.int32, "index:n"))
    call = rng.choice(("torch.gather(x[tm, :], 1, idx[tm, :])", "x[tm, :].gather(-1, idx[tm, :])"))
    body = [Line(0, "m, k = idx.size()"),
            Line(0, f"out = torch.zeros([m, k], dtype={dtype_name(dtype)}, device=x.device)"),
            Line(0, "for tm in hl.tile(m):"), Line(1, f"out[tm, :] = {call}")]
    return body, inputs, dims, "tile_gather"


def _einsum(rng, dtype) -> tuple[list[Line], tuple[InputSpec, ...], dict[str, int], str]:
    dims = {"m": rng.choice(_ROWS), "k": rng.choice((64, 128)), "n": 128}
    transposed = rng.random() < 0.5
    inputs = (InputSpec("x", ("m", "k")), InputSpec("w", ("n", "k") if transposed else ("k", "n")))
    equation = "ij,kj->ik" if transposed else "ik,kj->ij"
    body = [Line(0, "m = x.size(0)"),
            Line(0, "out = torch.zeros([m, 128], device=x.device)"),
            Line(0, "for tm in hl.tile(m):"), Line(1, f"out[tm, :] = torch.einsum('{equation}', x[tm, :], w[:, :])")]
    return body, inputs, dims, f"einsum:{equation}"


def _cat_in_inner_loop(rng, dtype) -> tuple[list[Line], tuple[InputSpec, ...], dict[str, int], str]:
    dims = {"m": rng.choice(_ROWS), "n": rng.choice((128, 256, 384))}
    inputs = (InputSpec("x", ("m", "n"), dtype, fill_of(dtype)), InputSpec("y", ("m", "n"), dtype, fill_of(dtype)))
    body = [Line(0, "m, n = x.size()"), Line(0, "out = torch.zeros([m, 256], device=x.device)"),
            Line(0, "for tm in hl.tile(m):"), Line(1, "acc = hl.zeros([tm, 256])"),
            Line(1, "for tn in hl.tile(n, block_size=128):"),
            Line(2, "acc = acc + torch.cat([x[tm, tn], y[tm, tn]], 1).float()"),
            Line(1, "out[tm, :] = acc")]
    return body, inputs, dims, "cat_inner_loop"


def _vector_products(rng, dtype) -> tuple[list[Line], tuple[InputSpec, ...], dict[str, int], str]:
    """matrix @ vector and vector @ matrix over an inner loop whose last tile may be partial:
    both factors' padding is masked (the vector's was not: a trial's NaN)."""
    dims = {"m": rng.choice(_ROWS), "k": rng.choice((64, 70, 128, 200, 300))}
    inputs = (InputSpec("x", ("m", "k"), dtype), InputSpec("w", ("k",), dtype))
    product, tag = rng.choice((("x[tm, tk] @ w[tk]", "matvec"), ("torch.matmul(x[tm, tk], w[tk])", "matvec"),
                               ("w[tk] @ x[tm, tk].T", "vecmat"),
                               ("torch.einsum('mk,k->m', x[tm, tk], w[tk])", "einsum_matvec")))
    body = [Line(0, "m, k = x.size()"), Line(0, "out = torch.zeros([m], device=x.device)"),
            Line(0, "for tm in hl.tile(m):"), Line(1, "acc = hl.zeros([tm])"),
            Line(1, "for tk in hl.tile(k):"), Line(2, f"acc = acc + ({product}).float()"),
            Line(1, "out[tm] = acc")]
    return body, inputs, dims, tag


def _two_batch_dims(rng, dtype) -> tuple[list[Line], tuple[InputSpec, ...], dict[str, int], str]:
    """A product of 4-D tiles (batch and head dims both tiled): Mosaic's matmul takes one
    batch dim, so codegen merges them (a trial's lowering failure)."""
    dims = {"b": rng.choice((1, 2, 3)), "h": rng.choice((1, 2, 4)), "s": rng.choice((8, 40, 64)), "d": 64}
    inputs = (InputSpec("q", ("b", "h", "s", "d")), InputSpec("k", ("b", "h", "s", "d")))
    body = [Line(0, "b, h, s, d = q.size()"), Line(0, "out = torch.empty([b, h, s, s], device=q.device)"),
            Line(0, "for tb, th, tq in hl.tile([b, h, s]):"),
            Line(1, "out[tb, th, tq, :] = q[tb, th, tq, :] @ k[tb, th, :, :].transpose(-1, -2)")]
    return body, inputs, dims, "two_batch_dims"


# a composite of a row block (ir/ops/shapes.py, ir/ops/norms.py): the stored width in terms of n
_ROW_COMPOSITES = (("torch.tril(a)", "n", True), ("a.triu(1)", "n", True), ("torch.tril(a, -2)", "n", True),
                   ("a.repeat(1, 2)", "2 * n", True), ("torch.tile(a, (2,))", "2 * n", True),
                   ("torch.repeat_interleave(a, 2, dim=1)", "2 * n", True), ("torch.sort(a, 1).values", "n", True),
                   ("torch.topk(a, 2, dim=1).values", "2", False), ("torch.cummax(a, 1)[0] - a", "n", True),
                   ("torch.outer(a[:, 0], a[0, :])", "n", True), ("torch.flip(a, [1])", "n", True),
                   ("a.flip(-1) - a", "n", True), ("torch.roll(a, 3, 1)", "n", True),
                   ("torch.diff(a, dim=1, prepend=a[:, :1])", "n", True),
                   ("torch.nn.functional.softmin(a, dim=1)", "n", False), ("torch.nn.functional.glu(a)", "n // 2", False),
                   ("torch.nn.functional.rms_norm(a, [n])", "n", False),
                   ("torch.nn.functional.normalize(a, dim=1)", "n", False))


def _row_composite(rng, dtype) -> tuple[list[Line], tuple[InputSpec, ...], dict[str, int], str]:
    dims = {"m": rng.choice(_ROWS), "n": rng.choice((64, 128, 256))}
    text, width, any_dtype = rng.choice([form for form in _ROW_COMPOSITES if form[2] or dtype.is_floating_point])
    body = [Line(0, "m, n = x.size()"),
            Line(0, f"out = torch.zeros([m, {width}], dtype={dtype_name(dtype)}, device=x.device)"),
            Line(0, "for tm in hl.tile(m):"), Line(1, "a = x[tm, :]"), Line(1, f"out[tm, :] = {text}")]
    return body, (InputSpec("x", ("m", "n"), dtype, fill_of(dtype)),), dims, text.split("(")[0]


_FORMS = (_cat, _cat_rows, _stack, _rope, _gather, _einsum, _cat_in_inner_loop, _vector_products, _two_batch_dims,
          _row_composite)
_LOOPED = (_cat_in_inner_loop, _vector_products)  # forms with an inner loop, under each loop type


def shape_ops(draw: Any, name: str) -> Case:
    rng = draw.rng
    form = rng.choice(_FORMS)
    dtype = rng.choice((torch.float32, torch.float32, torch.bfloat16, torch.int32))
    if form in (_rope, _einsum, _vector_products, _two_batch_dims):
        dtype = rng.choice((torch.float32, torch.bfloat16)) if form in (_rope, _vector_products) else torch.float32
    body, inputs, dims, tag = form(rng, dtype)
    loop_type = (draw.foldable_loop_type() if form is _vector_products else draw.loop_type()) \
        if form in _LOOPED else None
    body = (*body, Line(0, "return out"))
    exact = form in (_cat, _cat_rows, _stack, _gather)  # moving values computes nothing
    return Case("shape_ops", name, inputs, body, dims, loop_type=loop_type, exact=exact and dtype != torch.bfloat16,
                tags=("shape_ops", tag, dtype_name(dtype)))
