"""The `narrowing` kind: narrowing reads of loaded blocks (`blk[ts.index]`, `blk[ts.begin]`,
`blk[2]`, `blk[1:3]`, a head view then a run, a `None` beside a run, runs weighted by a
second block, runs of a two-dim inner loop's tiles) under every loop type.

A block is loaded once per outer tile (`blk = x[tt, :]`) and read in runs of an inner
loop over the tile's live rows (`hl.tile(tt.end - tt.begin)`, or fewer). The outer tile
is a grid tile, an inner tile of a grid index, or a jagged segment's tile; the reads are
summed into an accumulator per outer tile or per segment, or stored one row per step
(a recurrence, as examples/short_conv.py does). Block sizes are written in the source:
the inner block divides the outer one, as a narrowing read requires.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .cases import Case, InputSpec, Line
from .expressions import FLOATS

_LIVE = "tt.end - tt.begin"


def _run_terms(draw, rank: int, block: int, heads: int) -> list[str]:
    """Reads of `blk` at the inner tile `ts`, each of shape [d] (f32 or the block's dtype)."""
    rng = draw.rng
    head = rng.randrange(heads) if rank == 3 else 0
    if rank == 2:
        forms = ["blk[ts.index].sum(0)", "blk[ts.begin]", "blk[ts.index, None, :].sum(0)[0]",
                 "blk[None, ts.index].sum(1)[0]", "(blk[ts.index] * wb[ts.index]).sum(0)",
                 "(blk[ts.index] * 2.0 + 1.0).sum(0)", "(blk[ts.begin] * wb[ts.begin])",
                 "blk[ts.index][None].sum(1)[0]", "(blk[ts.index].sum(0) + blk[ts.begin][-1])",
                 "(blk[ts.begin] - blk[ts.begin][-3:].sum(0) + blk[ts.begin][:-1][-2])"]
    else:
        forms = [f"blk[:, {head}, :][ts.index].sum(0)", f"blk[:, {head}][ts.begin]",
                 f"blk[ts.begin][{head}]", f"blk[ts.index, {head}].sum(0)", "blk[ts.index].sum(0).sum(0)",
                 f"(blk[ts.index, {head}] * wb[ts.index, {head}]).sum(0)",
                 f"blk[ts.index, None, {head}, :].sum(0)[0]", f"(blk[ts.index, {head}].sum(0) + blk[ts.begin, -1][-1])"]
    return rng.sample(forms, rng.choice((1, 1, 2, 3)))


def _multi_dim_terms(draw) -> list[str]:
    """Reads of a 3-D `blk` at the tiles of a two-dim inner loop `ts, th` (rows, heads), each
    of shape [d]. Two index vectors in one subscript pair up in torch: refused, now and then."""
    forms = ["blk[ts, th].sum(0).sum(0)", "blk[ts.index][:, th.index].sum(0).sum(0)",
             "blk[ts.begin][th.index].sum(0)", "blk[:, th][ts.index].sum(0).sum(0)"]
    terms = draw.rng.sample(forms, draw.rng.choice((1, 2)))
    return terms + (["blk[ts.index, th.index].sum(0)"] if draw.chance(0.1) else [])


def _constant_terms(draw, rank: int, block: int, heads: int) -> list[str]:
    """Constant reads of `blk` in the outer tile's own body (a short tile may refuse them)."""
    rng = draw.rng
    row = rng.choice((0, 0, 1, block - 1))
    head = rng.randrange(heads) if rank == 3 else None
    forms = [f"blk[{row}]" if head is None else f"blk[{row}, {head}]",
             "blk[-1]" if head is None else f"blk[-1, {head - heads}]"]  # from the end: a short tile refuses it
    if block >= 3:
        forms.append("blk[1:3].sum(0)" if head is None else f"blk[1:3, {head}].sum(0)")
    return rng.sample(forms, 1) if draw.chance(0.3) else []


def _inner_bound(draw, block: int, inner: int, divides: bool) -> str:
    rng = draw.rng
    choices = [_LIVE, _LIVE, f"min({_LIVE}, {rng.choice([m for m in range(inner, block + 1, inner)])})"]
    if divides:  # a static extent: every outer tile is whole
        choices.append(str(block))
    return rng.choice(choices)


@dataclass(frozen=True)
class _Shape:
    """What one case reads: its block sizes, dims and how the rows are grouped."""

    rank: int
    dtype: torch.dtype
    block: int
    inner: int
    heads: int
    structure: str  # "grid", "nested" or "jagged"
    rows: bool  # a recurrence storing one row per step
    dims: dict
    segments: tuple[int, ...]
    row_dims: tuple[str, ...]
    rest_dims: tuple[str, ...]
    divides: bool  # every outer tile is whole

    @property
    def rest(self) -> str:
        return ", ".join(":" for _ in self.rest_dims)

    @property
    def rest_shape(self) -> str:
        return ", ".join(self.rest_dims)

    @property
    def lead(self) -> str:
        return {"grid": "", "nested": "g, ", "jagged": ""}[self.structure]


def _draw_shape(draw) -> _Shape:
    rng = draw.rng
    rank = rng.choice((2, 2, 3))
    dtype = draw.dtype(FLOATS)
    block = rng.choice((4, 8, 8, 16))
    inner = rng.choice([b for b in (1, 2, 4, 8, 16) if b <= block])
    heads = rng.choice((2, 3, 4)) if rank == 3 else 1
    d = rng.choice((8, 128, 128, 256))
    structure = rng.choice(("grid", "grid", "nested", "jagged"))
    rows = inner == 1 and draw.chance(0.4)
    dims = {"d": d}
    segments: tuple[int, ...] = ()
    rest_dims = ("h", "d") if rank == 3 else ("d",)
    if rank == 3:
        dims["h"] = heads
    if structure == "jagged":
        segments = tuple(rng.choice((0, 1, 3, 5, 8, 13, 16, 21)) for _ in range(rng.randint(1, 4)))
        row_dims: tuple[str, ...] = ("T",)
        divides = False
    else:
        dims["t"] = rng.choice((block, 2 * block, 3 * block - rng.randint(1, block - 1), 13, 16, 37))
        row_dims = ("b", "t") if structure == "nested" else ("t",)
        if structure == "nested":
            dims["b"] = rng.choice((1, 2, 3))
        divides = dims["t"] % block == 0
    return _Shape(rank, dtype, block, inner, heads, structure, rows, dims, segments, row_dims, rest_dims, divides)


def narrowing(draw, name: str) -> Case:
    shape = _draw_shape(draw)
    x = InputSpec("x", (*shape.row_dims, *shape.rest_dims), shape.dtype)
    w = InputSpec("w", (shape.block, *shape.rest_dims), draw.dtype(FLOATS))
    inputs = [x, w] + ([InputSpec("offsets", (), torch.int32, "offsets")] if shape.structure == "jagged" else [])
    body, indent = _outer_lines(shape)
    body += _inner_lines(draw, shape, indent)
    body.append(Line(0, "return out"))
    inner_loops = 1 if shape.structure == "grid" else 2
    return Case("narrowing", name, tuple(inputs), tuple(body), shape.dims, segments=shape.segments,
                loop_type=draw.loop_types_each(inner_loops), tags=("narrowing", shape.structure))


def _outer_lines(shape: _Shape) -> tuple[list[Line], int]:
    """The output, the outer loops and the loaded block; and the indent of the outer tile's body."""
    rank, block, rest, rest_shape, structure = shape.rank, shape.block, shape.rest, shape.rest_shape, shape.structure
    body = [Line(0, f"{rest_shape}{',' if rank == 2 else ''} = x.shape[{len(shape.row_dims)}:]")]
    if shape.rows:
        body.append(Line(0, "out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)"))
    elif structure == "grid":
        body.append(Line(0, f"out = torch.zeros([(x.size(0) + {block - 1}) // {block}, {rest_shape}], "
                            "dtype=torch.float32, device=x.device)"))
    else:
        groups = "x.size(0)" if structure == "nested" else "offsets.size(0) - 1"
        body.append(Line(0, f"out = torch.zeros([{groups}, {rest_shape}], dtype=torch.float32, device=x.device)"))
    if structure == "grid":
        body.append(Line(0, f"for tt in hl.tile(x.size(0), block_size={block}):"))
        indent = 1
    else:
        outer = "hl.grid(x.size(0))" if structure == "nested" else "hl.grid(offsets.size(0) - 1)"
        body.append(Line(0, f"for g in {outer}:"))
        if not shape.rows:
            body.append(Line(1, f"acc = hl.zeros([{rest_shape}], dtype=torch.float32)"))
        span = "x.size(1)" if structure == "nested" else "offsets[g], offsets[g + 1]"
        body.append(Line(1, f"for tt in hl.tile({span}, block_size={block}):"))
        indent = 2
    body.append(Line(indent, f"blk = x[{shape.lead}tt, {rest}]"))
    body.append(Line(indent, f"wb = w[:, {rest}]"))
    if structure == "grid" and not shape.rows:
        body.append(Line(indent, f"acc = hl.zeros([{rest_shape}], dtype=torch.float32)"))
    return body, indent


def _inner_lines(draw, shape: _Shape, indent: int) -> list[Line]:
    """The constant reads, the inner loop's reads and the stores."""
    rng, rank, block, heads, rest = draw.rng, shape.rank, shape.block, shape.heads, shape.rest
    body = []
    if not shape.rows:
        for term in _constant_terms(draw, rank, block, heads):
            body.append(Line(indent, f"acc = acc + {term}", droppable=True))
    bound = _inner_bound(draw, block, shape.inner, shape.divides)
    if shape.rows:
        body.append(Line(indent, f"state = hl.zeros([{shape.rest_shape}], dtype=torch.float32)"))
    multi = rank == 3 and not shape.rows and draw.chance(0.35)  # a two-dim inner loop: rows and heads
    if multi:
        head_block = rng.choice([b for b in (1, 2, 3, 4) if heads % b == 0])
        body.append(Line(indent, f"for ts, th in hl.tile([{bound}, h], block_size=[{shape.inner}, {head_block}]):"))
        terms = _multi_dim_terms(draw)
    else:
        body.append(Line(indent, f"for ts in hl.tile({bound}, block_size={shape.inner}):"))
        terms = _run_terms(draw, rank, block, heads)
    if shape.rows:
        terms = [t for t in terms if "ts.index" not in t] or [("blk[ts.begin]" if rank == 2 else "blk[ts.begin][0]")]
        body.append(Line(indent + 1, f"state = state * 0.5 + {' + '.join(terms)}"))
        body.append(Line(indent + 1, f"out[{shape.lead}tt.begin + ts.begin, {rest}] = state"))
    else:
        for term in terms:
            body.append(Line(indent + 1, f"acc = acc + {term}", droppable=len(terms) > 1))
        if shape.structure == "grid":
            body.append(Line(indent, f"out[tt.id, {rest}] = acc"))
        else:
            body.append(Line(1, f"out[g, {rest}] = acc"))
    return body
