"""The kernel grammar: one generator per kind of kernel, each returning a `Case`.

Every generator draws from a `random.Random` only, so a seed fixes the cases.
Block sizes that the config tunes are chosen later, after binding, from the
kernel's `config_spec` (`choose_config`); sizes written in the source
(`block_size=16`) are drawn here.
"""
from __future__ import annotations

import random
from dataclasses import replace
from typing import Callable

import torch

from ..config import FOLDED_LOOP_TYPE  # draws give it only where it may fold (Draw.foldable_loop_type)
from ..plan.loops import LOOP_TYPES  # every registered strategy, in the registry's order
from .argument_kinds import argument_rows
from .cases import Case, InputSpec, Line
from .constants import scope_constants
from .expressions import FLOATS, NARROW_EXTREMES, ChainBuilder, Value, dtype_name, fill_of
from .gather_kinds import flat_gather, paired_indices
from .guarded_kinds import guarded_loops, guarded_rows
from .narrowing import narrowing
from .range_kinds import chunk_ranges, jagged_rows, tile_ranges
from .row_kinds import shared_rows
from .scan_kinds import scans
from .shape_kinds import shape_ops
from .statistics_kinds import statistics
from .two_pass_kinds import two_pass
from .wide_int_kinds import wide_integers
from .window_kinds import window_shapes
from .worklist_kinds import segment_mean, segment_rows

SMALL_SIZES = (1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 37, 64)
LARGE_SIZES = (100, 127, 128, 129, 200, 256, 257, 300)
MIXED_DTYPES = (torch.float32, torch.float32, torch.bfloat16, torch.int32)

FUZZ_LOOP_TYPES = (*LOOP_TYPES, FOLDED_LOOP_TYPE)  # what --loop-types may name (the default: all)


class Draw:
    """The random choices of one case."""

    def __init__(self, rng: random.Random, loop_types: tuple[str, ...]):
        self.rng = rng
        self.loop_types = loop_types
        # the strategies any inner loop may take; outer_pipeline goes only where a loop may fold
        self.strategies = tuple(t for t in loop_types if t != FOLDED_LOOP_TYPE) or LOOP_TYPES
        self.folds = FOLDED_LOOP_TYPE in loop_types
        self.only_folds = tuple(loop_types) == (FOLDED_LOOP_TYPE,)

    def size(self, large: float = 0.5) -> int:
        return self.rng.choice(LARGE_SIZES if self.rng.random() < large else SMALL_SIZES)

    def dtype(self, choices=MIXED_DTYPES) -> torch.dtype:
        return self.rng.choice(choices)

    def loop_type(self) -> str:
        return self.rng.choice(self.strategies)

    def foldable_loop_type(self) -> str:
        """A loop type for an inner loop that may fold into the grid (plan/folded_loops.py):
        `outer_pipeline`, if the run's loop types hold it, 30% of the time (always when alone)."""
        if self.folds and (self.only_folds or self.chance(0.3)):
            return FOLDED_LOOP_TYPE
        return self.loop_type()

    def loop_types_each(self, loops: int) -> str | tuple[str, ...]:
        """One loop type for all `loops` inner loops, or sometimes one each (a mixed list)."""
        if loops > 1 and len(self.strategies) > 1 and self.chance(0.4):
            return tuple(self.loop_type() for _ in range(loops))
        return self.loop_type()

    def chance(self, p: float) -> bool:
        return self.rng.random() < p


def _lines(indent: int, *texts: str) -> list[Line]:
    return [Line(indent, text) for text in texts]


# ------------------------------------------------------------------ pointwise --

_AXES = {1: ("n",), 2: ("m", "n"), 3: ("b", "m", "n")}


def _elementwise_body(draw: Draw, in_place: bool) -> tuple[list[InputSpec], list[Line], dict[str, int], bool, str | None]:
    rng = draw.rng
    rank = rng.choice((1, 2, 2, 3))
    axes = _AXES[rank]
    # A 3-D case keeps its batch small: 200 x 300 x 300 with small blocks is tens of
    # thousands of grid steps, minutes in interpret mode, and finds nothing 2-D cases miss.
    dims = {a: draw.size(large=0.6 if a == "n" else 0.0 if a == "b" else 0.3) for a in axes}
    count = rng.choice((1, 2, 3))
    dtypes = [draw.dtype() for _ in range(count)]
    if in_place:
        dtypes[0] = draw.dtype(FLOATS)
    inputs = [InputSpec(f"x{i}", axes, d, fill_of(d)) for i, d in enumerate(dtypes)]
    tiles = [f"t{a}" for a in axes]
    inner = in_place and rank >= 2 and draw.chance(0.5)  # the last dim as an inner loop
    loop_type = draw.loop_type() if inner else None
    body = [Line(0, f"{', '.join(axes)}{',' if rank == 1 else ''} = x0.size()")]
    if not in_place:
        out_dtype = draw.dtype((torch.float32, torch.bfloat16, None))
    indent = 1
    if inner:
        outer = tiles[:-1]
        outer_spec = axes[0] if len(outer) == 1 else f"[{', '.join(axes[:-1])}]"
        body.append(Line(0, f"for {', '.join(outer)} in hl.tile({outer_spec}):"))
        body.append(Line(1, f"for {tiles[-1]} in hl.tile({axes[-1]}):"))
        indent = 2
    else:
        spec = axes[0] if rank == 1 else f"[{', '.join(axes)}]"
        body.append(Line(0, f"for {', '.join(tiles)} in hl.tile({spec}):"))
    index = ", ".join(tiles)
    leaves = [Value(f"a{i}", d, leaf=True) for i, d in enumerate(dtypes)]
    body += [Line(indent, f"a{i} = x{i}[{index}]") for i in range(count)]
    if rank >= 2 and draw.chance(0.3):  # a row vector broadcast over the other axes
        dtype = draw.dtype()
        inputs.append(InputSpec("r", ("n",), dtype, fill_of(dtype)))
        none_axes = ", ".join(["None"] * (rank - 1))
        body.append(Line(indent, f"a{count} = r[{tiles[-1]}][{none_axes}, :]"))
        leaves.append(Value(f"a{count}", dtype, leaf=True))
    if rank >= 2 and draw.chance(0.2):  # a tile's index vector
        none_axes = ", ".join(["None"] * (rank - 1))
        body.append(Line(indent, f"a{len(leaves)} = {tiles[-1]}.index[{none_axes}, :]"))
        leaves.append(Value(f"a{len(leaves)}", torch.int32))
    if rank >= 2 and draw.chance(0.2):  # a size-1 axis read by its tile: broadcast, as torch does
        dtype = draw.dtype()
        ones = rng.randrange(rank)
        inputs.append(InputSpec("s", tuple(1 if i == ones else a for i, a in enumerate(axes)), dtype, fill_of(dtype)))
        if draw.chance(0.4):  # or by the tile's begin: index 0 too, the axis dropped (put back)
            items = ", ".join(f"{t}.begin" if i == ones else t for i, t in enumerate(tiles))
            body.append(Line(indent, f"a{len(leaves)} = s[{items}].unsqueeze({ones})"))
        else:
            body.append(Line(indent, f"a{len(leaves)} = s[{index}]"))
        leaves.append(Value(f"a{len(leaves)}", dtype, leaf=True))
    chain = ChainBuilder(rng, indent, leaves)
    result = chain.chain(rng.randint(1, 5), float_only=in_place)
    body += chain.lines
    exact = False
    if in_place:
        cast = f".to({dtype_name(dtypes[0])})" if draw.chance(0.5) else ""
        body.append(Line(indent, f"x0[{index}] += {result.name}{cast}"))
        if draw.chance(0.3):
            body.append(Line(indent, f"x0[{index}] = x0[{index}] * 0.5 + a0", droppable=True))
        body.append(Line(0, "return x0"))
    else:
        if out_dtype is None:
            out_dtype = result.dtype
            exact = out_dtype == torch.int32
        shape = ", ".join(axes)
        body.insert(1, Line(0, f"out = torch.empty([{shape}], dtype={dtype_name(out_dtype)}, device=x0.device)"))
        body.append(Line(indent, f"out[{index}] = {result.name}.to({dtype_name(out_dtype)})"))
        body.append(Line(0, "return out"))
    if draw.chance(0.25):  # a bool mask argument (streamed by an inner loop), through masked_fill
        inputs.append(InputSpec("keep", (axes[-1],), torch.bool, "bool"))
        lead = "None, " * (rank - 1)
        at = next(i for i, line in enumerate(body) if line.text.startswith((f"out[{index}] =", f"x0[{index}] +=")))
        body.insert(at, Line(indent, f"{result.name} = {result.name}.masked_fill(~keep[{tiles[-1]}][{lead}:], 0)"))
    if draw.chance(0.3):  # drawn last: the case's other choices stay as a seed made them
        body = _as_tile_tuple(body, tiles[-1], axes[-1])
    return inputs, body, dims, exact, loop_type


def _as_tile_tuple(body: list[Line], tile: str, axis: str) -> list[Line]:
    """Helion's spelling `for t in hl.tile([n])`: `t` is a 1-tuple of tiles, indexing as its
    tile inside subscripts (kept as it is where the tile's attributes are read)."""
    header = f"for {tile} in hl.tile({axis}):"
    if any(f"{tile}." in line.text for line in body) or not any(line.text == header for line in body):
        return body
    return [Line(line.indent, f"for {tile} in hl.tile([{axis}]):", line.droppable) if line.text == header else line
            for line in body]


def pointwise(draw: Draw, name: str) -> Case:
    inputs, body, dims, exact, loop_type = _elementwise_body(draw, in_place=False)
    return Case("pointwise", name, tuple(inputs), tuple(body), dims, loop_type=loop_type, exact=exact)


def in_place(draw: Draw, name: str) -> Case:
    inputs, body, dims, exact, loop_type = _elementwise_body(draw, in_place=True)
    return Case("in_place", name, tuple(inputs), tuple(body), dims, loop_type=loop_type, exact=exact)


# ----------------------------------------------------------------- reductions --

_REDUCERS = {
    "sum": ("{v}.sum({d}{k})", "torch.sum({v}, dim={d}{k})"),
    "amax": ("torch.amax({v}, {d}{k})", "{v}.amax(dim={d}{k})", "torch.max({v}, dim={d}{k}).values",
             "torch.aminmax({v}, dim={d}{k}).max"),
    "amin": ("torch.amin({v}, {d}{k})", "{v}.min(dim={d}{k}).values", "torch.aminmax({v}, dim={d}{k})[0]"),
    "mean": ("{v}.mean({d}{k})", "torch.mean({v}, dim={d}{k})"),
    # norm composites (ir/ops/norms.py)
    "norm": ("torch.linalg.vector_norm({v}, dim={d}{k})", "{v}.norm(dim={d}{k})", "{v}.norm(1, {d}{k})",
             "torch.linalg.vector_norm({v}, float('inf'), dim={d}{k})", "torch.norm({v}, 3, dim={d}{k})"),
    "argmax": ("torch.argmax({v}, dim={d}{k})", "{v}.argmax({d}{k})"),
}


def _reduced_dtype(reducer: str, dtype: torch.dtype) -> torch.dtype:
    return torch.int32 if reducer == "argmax" else dtype


def reduction(draw: Draw, name: str) -> Case:
    rng = draw.rng
    if draw.chance(0.3):
        return two_pass(draw, name)
    rank = rng.choice((2, 2, 3))
    axes = _AXES[rank]
    dims = {a: draw.size(large=0.5 if a == "n" else 0.3) for a in axes}
    reduced = rng.randrange(rank)
    reducer = rng.choice(tuple(_REDUCERS))
    float_only = reducer in ("mean", "norm")  # torch's rule: floats only
    dtype = draw.dtype((torch.float32, torch.bfloat16)) if float_only else draw.dtype()
    if reducer in ("amax", "amin", "argmax") and draw.chance(0.25):  # Mosaic reduces 32-bit values only
        dtype = rng.choice(NARROW_EXTREMES[reducer])
    if reducer == "sum" and draw.chance(0.3):  # an integer sum: int64 in torch (plan/int64_values.py)
        dtype = torch.int32
    # NaN and +-inf among the values (a reduction of the loaded block itself, no chain)
    specials = dtype.is_floating_point and reducer != "argmax" and draw.chance(0.4)
    inputs = [InputSpec("x", axes, dtype, "specials" if specials else fill_of(dtype))]
    kept = [a for i, a in enumerate(axes) if i != reduced]
    keepdim = draw.chance(0.3)
    tiles = {a: f"t{a}" for a in kept}
    load_index = ", ".join(tiles.get(a, ":") for a in axes)
    body = [Line(0, f"{', '.join(axes)} = x.size()")]
    leaf = Value("v", dtype, leaf=True)
    chain = ChainBuilder(rng, 1, [leaf], prefix="w")
    value = leaf
    if reducer != "argmax" and dtype not in NARROW_EXTREMES[reducer] and not specials and draw.chance(0.6):
        value = chain.chain(rng.randint(1, 2), float_only=float_only)
    if value.dtype == torch.int32 and float_only:
        value = Value(value.name, torch.float32)
    # argmax into torch's own index dtype half the time: held as int32, returned widened; so an
    # integer sum (torch's int64: checked in interpret mode to fit int32, `plan/int64_values.py`)
    wide = reducer == "sum" and value.dtype == torch.int32
    result_dtype = (torch.int64 if reducer in ("argmax", "sum") and (reducer == "argmax" or wide) and draw.chance(0.5)
                    else _reduced_dtype(reducer, value.dtype))
    if wide and value is leaf and draw.chance(0.3):  # sums that leave int32: both modes raise at the line
        inputs = [InputSpec("x", axes, dtype, "large")]
    out_dims = [a if i != reduced else "1" for i, a in enumerate(axes) if keepdim or i != reduced]
    store_index = ", ".join(tiles.get(a, ":") for i, a in enumerate(axes) if keepdim or i != reduced)
    body.append(Line(0, f"out = torch.empty([{', '.join(out_dims)}], dtype={dtype_name(result_dtype)}, "
                        "device=x.device)"))
    spec = kept[0] if len(kept) == 1 else f"[{', '.join(kept)}]"
    body.append(Line(0, f"for {', '.join(tiles.values())} in hl.tile({spec}):"))
    body.append(Line(1, f"v = x[{load_index}]"))
    body += chain.lines
    d = reduced - rank if draw.chance(0.3) else reduced
    text = rng.choice(_REDUCERS[reducer]).format(v=value.name, d=d, k=", keepdim=True" if keepdim else "")
    if wide and draw.chance(0.3):  # int64 arithmetic on the sum, checked where a use needs its number
        text = f"({text}) * {rng.choice((3, 1000, -70000))} + 1"
    if wide and draw.chance(0.3):  # a use that needs torch's number (% 1000) or its low bits only
        text = rng.choice(("({t}) & 1023", "({t}) % 1024", "({t}) % 1000", "({t}) ^ (({t}) << 3)")).format(t=text)
    body.append(Line(1, f"out[{store_index}] = {text}"))
    body.append(Line(0, "return out"))
    return Case("reduction", name, tuple(inputs), tuple(body), dims, exact=not result_dtype.is_floating_point)


# -------------------------------------------------------------------- matmul --

def matmul(draw: Draw, name: str) -> Case:
    rng = draw.rng
    batched = draw.chance(0.3)
    integer = draw.chance(0.2)  # int8 or uint8 factors into an int32 acc (hl.dot's integer product)
    dtype = draw.dtype((torch.int8, torch.uint8) if integer else FLOATS)
    dims = {"m": draw.size(0.4), "k": draw.size(0.6), "n": draw.size(0.6)}
    out_dtype = torch.int32 if integer else draw.dtype((torch.float32, dtype))
    acc_dtype, fill = (torch.int32, fill_of(dtype)) if integer else (torch.float32, "randn")
    if batched:
        dims["b"] = rng.choice((1, 2, 3))
        inputs = [InputSpec("x", ("b", "m", "k"), dtype, fill), InputSpec("y", ("b", "k", "n"), dtype, fill)]
        body = _lines(0, "b, m, k = x.size()", "n = y.size(2)",
                      f"out = torch.empty([b, m, n], dtype={dtype_name(out_dtype)}, device=x.device)",
                      "for tb, tm, tn in hl.tile([b, m, n]):")
        body += _lines(1, f"acc = hl.zeros([tb, tm, tn], dtype={dtype_name(acc_dtype)})", "for tk in hl.tile(k):")
        a, b = "x[tb, tm, tk]", "y[tb, tk, tn]"
        update = rng.choice((f"torch.baddbmm(acc, {a}, {b})", f"acc + torch.bmm({a}, {b})",
                             f"hl.dot({a}, {b}, acc=acc)"))
        store = "out[tb, tm, tn]"
    else:
        inputs = [InputSpec("x", ("m", "k"), dtype, fill), InputSpec("y", ("k", "n"), dtype, fill)]
        body = _lines(0, "m, k = x.size()", "n = y.size(1)",
                      f"out = torch.empty([m, n], dtype={dtype_name(out_dtype)}, device=x.device)",
                      "for tm, tn in hl.tile([m, n]):")
        body += _lines(1, f"acc = hl.zeros([tm, tn], dtype={dtype_name(acc_dtype)})", "for tk in hl.tile(k):")
        a, b = "x[tm, tk]", "y[tk, tn]"
        update = rng.choice((f"torch.addmm(acc, {a}, {b})", f"hl.dot({a}, {b}, acc=acc)",
                             f"acc + hl.dot({a}, {b})", f"acc + torch.mm({a}, {b}).float()"))
        store = "out[tm, tn]"
    update = rng.choice((f"hl.dot({a}, {b}, acc=acc)", f"acc + hl.dot({a}, {b})")) if integer else update
    body.append(Line(2, f"acc = {update}"))
    epilogue = rng.choice(("acc", "torch.relu(acc)", "acc * 0.5 + 1.0", "torch.sigmoid(acc)") if not integer
                          else ("acc", "acc * 2 - 1", "torch.relu(acc)"))
    body.append(Line(1, f"{store} = ({epilogue}).to({dtype_name(out_dtype)})"))
    body.append(Line(0, "return out"))
    return Case("matmul", name, tuple(inputs), tuple(body), dims, loop_type=draw.foldable_loop_type(), exact=integer)


# ----------------------------------------------------------------- attention --

def attention(draw: Draw, name: str) -> Case:
    rng = draw.rng
    dtype = draw.dtype(FLOATS)
    dims = {"s": draw.size(0.5), "kv": draw.size(0.5), "d": rng.choice((8, 16, 64, 128))}
    causal = draw.chance(0.4)
    inputs = [InputSpec("q", ("s", "d"), dtype), InputSpec("k", ("kv", "d"), dtype), InputSpec("v", ("kv", "d"), dtype)]
    body = _lines(0, "s, d = q.size()", "kv = k.size(0)", "out = torch.empty_like(q)",
                  "scale = 1.0 / math.sqrt(d)", "for tq in hl.tile(s):")
    body += _lines(1, "qb = q[tq, :]", 'm_i = hl.full([tq], float("-inf"), dtype=torch.float32)',
                   "l_i = hl.zeros([tq], dtype=torch.float32)", "acc = hl.zeros([tq, d], dtype=torch.float32)")
    end = "min(kv, tq.end)" if causal else "kv"
    body.append(Line(1, f"for tk in hl.tile(0, {end}):" if causal else "for tk in hl.tile(kv):"))
    body.append(Line(2, "scores = hl.dot(qb, k[tk, :].T) * scale"))
    if causal and draw.chance(0.5):
        body.append(Line(2, 'scores = torch.where(tq.index[:, None] >= tk.index[None, :], scores, float("-inf"))',
                         droppable=True))
    body += _lines(2, "m_new = torch.maximum(m_i, torch.amax(scores, -1))", "p = torch.exp(scores - m_new[:, None])",
                   "alpha = torch.exp(m_i - m_new)", "l_i = l_i * alpha + torch.sum(p, -1)")
    body.append(Line(2, rng.choice(("acc = hl.dot(p.to(v.dtype), v[tk, :], acc=acc * alpha[:, None])",
                                    "acc = acc * alpha[:, None] + hl.dot(p.to(v.dtype), v[tk, :])"))))
    body.append(Line(2, "m_i = m_new"))
    body.append(Line(1, "out[tq, :] = (acc / l_i[:, None]).to(out.dtype)"))
    body.append(Line(0, "return out"))
    if causal:
        dims["kv"] = dims["s"]
    # a causal key loop ends at the q tile's diagonal: folded, its steps past it skip
    return Case("attention", name, tuple(inputs), tuple(body), dims, loop_type=draw.foldable_loop_type())


# -------------------------------------------------------------------- bounds --

def _segments(draw: Draw) -> tuple[int, ...]:
    rng = draw.rng
    count = rng.randint(1, 6)
    return tuple(rng.choice((0, 0, 1, 3, 5, 8, 13, 16, 20, 37, 64)) for _ in range(count))


def _block(draw: Draw, choices=(None, None, 8, 16, 32)) -> str:
    size = draw.rng.choice(choices)
    return "" if size is None else f", block_size={size}"


def bounds(draw: Draw, name: str) -> Case:
    rng = draw.rng
    form = rng.choice(("static_outer", "static_inner", "end_inside", "jagged_rows", "jagged_reduce", "dependent"))
    dtype = draw.dtype()
    d = rng.choice((1, 8, 100, 128, 256))
    loop_type = None
    segments: tuple[int, ...] = ()
    if form == "static_outer":
        dims = {"m": draw.size(0.6), "n": rng.choice((1, 128, 200))}
        begin = rng.randint(0, dims["m"])
        inputs = [InputSpec("x", ("m", "n"), dtype, fill_of(dtype))]
        body = _lines(0, "m, n = x.size()", "out = torch.zeros_like(x)", f"for t in hl.tile({begin}, m):")
        body.append(Line(1, "out[t, :] = x[t, :] * 2 + 1"))
    elif form == "end_inside":  # an inner loop ending inside its output: rows past it stay as they were
        dims = {"m": draw.size(0.6), "n": rng.choice((1, 128, 200))}
        end = rng.randint(1, dims["m"])
        inputs = [InputSpec("x", ("m", "n"), dtype, fill_of(dtype))]
        body = _lines(0, "m, n = x.size()", "out = torch.zeros_like(x)", "for tc in hl.tile(n):")
        body.append(Line(1, f"for t in hl.tile({end}):"))
        body.append(Line(2, "out[t, tc] = x[t, tc] * 2 + 1"))
        loop_type = draw.loop_type()
    elif form == "static_inner":
        dims = {"m": draw.size(0.3), "n": draw.size(0.8)}
        begin = rng.randint(0, dims["n"])
        inputs = [InputSpec("x", ("m", "n"), dtype, fill_of(dtype))]
        acc_dtype = "torch.int32" if dtype == torch.int32 else "torch.float32"
        body = _lines(0, "m, n = x.size()", f"out = torch.empty([m], dtype={acc_dtype}, device=x.device)",
                      "for tm in hl.tile(m):")
        body += _lines(1, f"acc = hl.zeros([tm], dtype={acc_dtype})", f"for tn in hl.tile({begin}, n):")
        body.append(Line(2, "acc = acc + x[tm, tn].sum(1)"))
        body.append(Line(1, "out[tm] = acc"))
        loop_type = draw.foldable_loop_type()
    else:
        segments = _segments(draw)
        dims = {"d": d}
        inputs = [InputSpec("x", ("T", "d"), dtype, fill_of(dtype)), InputSpec("offsets", (), torch.int32, "offsets")]
        loop_type = draw.loop_type()
        body = _lines(0, "segments = offsets.size(0) - 1", "d = x.size(1)")
        if form == "jagged_rows":
            jagged_rows(draw, body, _block)
        elif form == "jagged_reduce":
            acc_dtype = "torch.int32" if dtype == torch.int32 else "torch.float32"
            reducer, init, update = rng.choice((
                ("sum", "hl.zeros([d], dtype={a})", "acc + x[t, :].sum(0)"),
                ("amax", 'hl.full([d], -1000, dtype={a})', "torch.maximum(acc, torch.amax(x[t, :], 0))"),
            ))
            body.append(Line(0, f"out = torch.empty([segments, d], dtype={acc_dtype}, device=x.device)"))
            body.append(Line(0, "for g in hl.grid(segments):"))
            body += _lines(1, "acc = " + init.format(a=acc_dtype),
                           f"for t in hl.tile(offsets[g], offsets[g + 1]{_block(draw)}):")
            body.append(Line(2, f"acc = {update}"))
            body.append(Line(1, "out[g, :] = acc"))
        else:
            body.append(Line(0, f"out = torch.zeros([x.size(0), d], dtype=torch.float32, device=x.device)"))
            body.append(Line(0, "for g in hl.grid(segments):"))
            body += _lines(1, "start = offsets[g]", "end = offsets[g + 1]",
                           f"for tq in hl.tile(start, end{_block(draw)}):")
            # the key range ends at the query tile's end; a sliding window also starts w rows before it
            lower = rng.choice(("start", f"max(start, tq.begin - {rng.choice((0, 3, 8, 21))})"))
            body += _lines(2, "acc = hl.zeros([tq, d], dtype=torch.float32)",
                           f"for tk in hl.tile({lower}, min(end, tq.end){_block(draw)}):")
            body.append(Line(3, "acc = acc + x[tk, :].sum(0)[None, :]"))
            body.append(Line(2, "out[tq, :] = acc"))
    body.append(Line(0, "return out"))
    exact = dtype == torch.int32 and form != "dependent"
    return Case("bounds", name, tuple(inputs), tuple(body), dims, segments=segments, loop_type=loop_type,
                exact=exact, tags=(form,))


# ------------------------------------------------- issue #13: the three shapes --

_LANE_FINAL = {
    "sum": ("torch.sum(acc, dim=1)", "acc.sum(1)"), "amax": ("torch.amax(acc, dim=1)",),
    "amin": ("acc.min(dim=1).values", "torch.amin(acc, 1)"), "mean": ("acc.mean(dim=1)",),
    "argmax": ("torch.argmax(acc, dim=1)",),
}


def lane_accumulator(draw: Draw, name: str) -> Case:
    """A block-sized accumulator over an inner loop, reduced along its lanes after the loop."""
    rng = draw.rng
    dtype = draw.dtype(FLOATS)
    final = rng.choice(tuple(_LANE_FINAL))
    combine = rng.choice(("add", "maximum", "minimum"))
    dims = {"m": draw.size(0.4), "n": draw.size(0.8)}
    body = _lines(0, "m, n = x.size()")
    out_dtype = (rng.choice((torch.int32, torch.int64)) if final == "argmax" else torch.float32)
    body.append(Line(0, f"out = torch.empty([m], dtype={dtype_name(out_dtype)}, device=x.device)"))
    body += _lines(0, "block_n = hl.register_block_size(n)", "for tm in hl.tile(m):")
    init = {"add": "hl.zeros([tm, block_n], dtype=torch.float32)",
            "maximum": 'hl.full([tm, block_n], float("-inf"), dtype=torch.float32)',
            "minimum": 'hl.full([tm, block_n], float("inf"), dtype=torch.float32)'}[combine]
    body += _lines(1, f"acc = {init}", "for tn in hl.tile(n, block_size=block_n):")
    body.append(Line(2, "v = x[tm, tn]"))
    exact_ops = final == "argmax"
    if exact_ops:
        op = rng.choice(("v", "torch.abs(v)", "-v", "v * 2"))
    else:
        op = rng.choice(("v", "torch.abs(v)", "torch.sigmoid(v)", "v * v", "torch.tanh(v) + 1.0"))
    body.append(Line(2, f"f = {op}", droppable=True))
    body.append(Line(2, {"add": "acc = acc + f", "maximum": "acc = torch.maximum(acc, f)",
                         "minimum": "acc = torch.minimum(acc, f)"}[combine]))
    body.append(Line(1, f"out[tm] = {rng.choice(_LANE_FINAL[final])}"))
    body.append(Line(0, "return out"))
    return Case("lane_accumulator", name, (InputSpec("x", ("m", "n"), dtype),), tuple(body), dims,
                loop_type=draw.foldable_loop_type(), exact=final == "argmax", tags=("lane_accumulator", final))


def tile_rows(draw: Draw, name: str) -> Case:
    """A tile's id (or begin // block) as an output row: one row per program."""
    rng = draw.rng
    dtype = draw.dtype(FLOATS)
    reducer = rng.choice(("mean", "sum", "amax", "amin"))
    spelling = {"mean": "{v}.mean({d})", "sum": "{v}.sum({d})", "amax": "torch.amax({v}, dim={d})",
                "amin": "{v}.amin({d})"}[reducer]
    out_dtype = dtype if reducer in ("amax", "amin") else torch.float32
    value = rng.choice(("x[tm, tn]", "(x[tm, tn] * 2.0)", "torch.abs(x[tm, tn])"))
    if draw.chance(0.7):  # rows of tm
        block = rng.choice((8, 16, 32))
        dims = {"m": draw.size(0.5), "n": draw.size(0.6)}
        row = rng.choice(("tm.id", f"tm.begin // {block}"))
        body = _lines(0, "m, n = x.size()",
                      f"out = torch.empty([(m + {block - 1}) // {block}, n], dtype={dtype_name(out_dtype)}, "
                      "device=x.device)",
                      f"for tm, tn in hl.tile([m, n], block_size=[{block}, None]):")
        body.append(Line(1, f"out[{row}, tn] = {spelling.format(v=value, d=0)}"))
    else:  # rows of the lane tile tn
        block = rng.choice((128, 256))
        dims = {"m": draw.size(0.3), "n": draw.size(0.9)}
        body = _lines(0, "m, n = x.size()",
                      f"out = torch.empty([(n + {block - 1}) // {block}, m], dtype={dtype_name(out_dtype)}, "
                      "device=x.device)",
                      f"for tm, tn in hl.tile([m, n], block_size=[None, {block}]):")
        body.append(Line(1, f"out[tn.id, tm] = {spelling.format(v=value, d=1)}"))
    body.append(Line(0, "return out"))
    return Case("tile_rows", name, (InputSpec("x", ("m", "n"), dtype),), tuple(body), dims,
                tags=("tile_rows", reducer))


def scatter(draw: Draw, name: str) -> Case:
    """A store through an index vector (rows or columns chosen by data, duplicates
    included: the last writer wins) into a tensor updated in place, one under a mask of its
    lanes, `hl.atomic_add` on tiles, or `hl.atomic_add`/`max`/`min`/`and`/`or`/`xor` through
    an index vector (duplicates combine), also in an inner loop."""
    rng = draw.rng
    dtype = draw.dtype()
    value = rng.choice(("{x}", "({x} * 2)", "({x} + 1)"))
    form = rng.choice(("rows", "rows_tiled", "columns", "inner", "atomic", "masked_rows", "atomic_rows",
                       "atomic_inner"))
    fill = fill_of(dtype)
    dims = {"n": draw.size(0.4), "d": rng.choice((1, 16, 128, 200)), "r": draw.size(0.2)}
    index = InputSpec("dest", ("n",), torch.int32, "index:r")
    loop_type = None
    if form == "rows":
        inputs = (InputSpec("out", ("r", "d"), dtype, fill), InputSpec("x", ("n", "d"), dtype, fill), index)
        body = _lines(0, "n = x.size(0)", "for t in hl.tile(n):")
        body.append(Line(1, f"out[dest[t], :] = {value.format(x='x[t, :]')}"))
    elif form == "rows_tiled":
        inputs = (InputSpec("out", ("r", "d"), dtype, fill), InputSpec("x", ("n", "d"), dtype, fill), index)
        body = _lines(0, "n, d = x.size()", "for tn, td in hl.tile([n, d]):")
        body.append(Line(1, f"out[dest[tn], td] = {value.format(x='x[tn, td]')}"))
    elif form == "columns":
        dims["m"] = rng.choice((1, 8, 20))
        inputs = (InputSpec("out", ("m", "r"), dtype, fill), InputSpec("x", ("m", "n"), dtype, fill), index)
        body = _lines(0, "m, n = x.size()", "for tm, tn in hl.tile([m, n]):")
        body.append(Line(1, f"out[tm, dest[tn]] = {value.format(x='x[tm, tn]')}"))
    elif form == "inner":
        dims["b"] = rng.choice((1, 2, 3))
        inputs = (InputSpec("out", ("b", "r", "d"), dtype, fill), InputSpec("x", ("b", "n", "d"), dtype, fill),
                  InputSpec("dest", ("b", "n"), torch.int32, "index:r"))
        body = _lines(0, "b, n, d = x.size()", "for g in hl.grid(b):", )
        body += _lines(1, "for t in hl.tile(n):")
        body.append(Line(2, f"out[g, dest[g, t], :] = {value.format(x='x[g, t, :]')}"))
        loop_type = draw.loop_type()
    elif form == "masked_rows":  # lanes whose first value is positive write; the others name no row
        inputs = (InputSpec("out", ("r", "d"), dtype, fill), InputSpec("x", ("n", "d"), dtype, fill), index)
        body = _lines(0, "n = x.size(0)", "for t in hl.tile(n):")
        body.append(Line(1, "keep = x[t, 0] > 0"))
        body.append(Line(1, f"hl.store(out, [torch.where(keep, dest[t], -1), slice(None)], {value.format(x='x[t, :]')}, "
                            "extra_mask=keep[:, None])"))
    elif form in ("atomic_rows", "atomic_inner"):
        atomic = rng.choice(("atomic_add", "atomic_max")) if dtype != torch.bfloat16 else "atomic_max"
        if dtype == torch.int32 and draw.chance(0.7):  # the bitwise atomics combine duplicates too
            atomic = rng.choice(("atomic_and", "atomic_or", "atomic_xor", "atomic_min"))
        inputs = (InputSpec("out", ("r", "d"), dtype, fill), InputSpec("x", ("n", "d"), dtype, fill), index)
        if form == "atomic_rows" and draw.chance(0.5):  # each lane's old row, the lanes updating in order
            body = _lines(0, "n = x.size(0)", "old = torch.empty_like(x)", "for t in hl.tile(n):")
            body.append(Line(1, f"old[t, :] = hl.{atomic}(out, [dest[t], slice(None)], {value.format(x='x[t, :]')})"))
            body.append(Line(0, "return out, old"))
        elif form == "atomic_rows":
            body = _lines(0, "n = x.size(0)", "for t in hl.tile(n):")
            body.append(Line(1, f"hl.{atomic}(out, [dest[t], slice(None)], {value.format(x='x[t, :]')})"))
        else:
            body = _lines(0, "n, d = x.size()", "for td in hl.tile(d):")
            body += _lines(1, "for t in hl.tile(n):")
            body.append(Line(2, f"hl.{atomic}(out, [dest[t], td], {value.format(x='x[t, td]')})"))
            loop_type = draw.loop_type()
    else:
        inputs = (InputSpec("out", ("n", "d"), dtype, fill), InputSpec("x", ("n", "d"), dtype, fill))
        body = _lines(0, "n, d = x.size()", "for tn, td in hl.tile([n, d]):")
        body.append(Line(1, f"hl.atomic_add(out, [tn, td], {value.format(x='x[tn, td]')})"))
    if body[-1].text != "return out, old":
        body.append(Line(0, "return out"))
    if dtype == torch.float32 and draw.chance(0.3):  # float16 (picked in float32); drawn last, as the seed was
        inputs = tuple(replace(spec, dtype=torch.float16) if spec.dtype == torch.float32 else spec for spec in inputs)
    return Case("scatter", name, inputs, tuple(body), dims, loop_type=loop_type, exact=dtype == torch.int32,
                tags=("scatter", form))


KINDS: dict[str, Callable[[Draw, str], Case]] = {
    "pointwise": pointwise, "reduction": reduction, "matmul": matmul, "attention": attention,
    "bounds": bounds, "in_place": in_place, "lane_accumulator": lane_accumulator,
    "segment_mean": segment_mean, "tile_rows": tile_rows, "scatter": scatter, "narrowing": narrowing,
    "scope_constants": scope_constants,  # fuzz/constants.py: globals changed between two calls
    "guarded_loops": guarded_loops, "guarded_rows": guarded_rows,  # fuzz/guarded_kinds.py: device ifs
    # fuzz/gather_kinds.py: several index tensors in one subscript; computed-index gathers
    "paired_indices": paired_indices, "flat_gather": flat_gather,
    "statistics": statistics,  # fuzz/statistics_kinds.py: multi-dim reductions, var/std, logsumexp
    "scans": scans,  # fuzz/scan_kinds.py: cumsum/cumprod, hl.associative_scan, hl.reduce
    "shape_ops": shape_ops,  # fuzz/shape_kinds.py: torch.cat/stack, hl.split/join, tile gather, einsum
    "window_shapes": window_shapes,  # fuzz/window_kinds.py: static slices, shifted tiles, F.pad
    "tile_ranges": tile_ranges,  # fuzz/range_kinds.py: causal, lookahead and windowed inner ranges
    "chunk_ranges": chunk_ranges,  # fuzz/range_kinds.py: tiles inside chunks of an axis (Mamba2)
    "segment_rows": segment_rows,  # fuzz/worklist_kinds.py: flattened worklists, compact_worklist
    "shared_rows": shared_rows,  # fuzz/row_kinds.py: rows written at steps that need not be consecutive
    "argument_rows": argument_rows,  # fuzz/argument_kinds.py: runtime int arguments in index arithmetic
    "wide_integers": wide_integers,  # fuzz/wide_int_kinds.py: torch's int64 hashed, narrowed or needed
}


def generate(seed: int, index: int, kinds: tuple[str, ...] = tuple(KINDS),
             loop_types: tuple[str, ...] = FUZZ_LOOP_TYPES) -> Case:
    """Case `index` of a run: kinds in turn, everything else from a (seed, index) stream."""
    kind = kinds[index % len(kinds)]
    rng = random.Random(f"pallasite-fuzz:{seed}:{index}")
    case = KINDS[kind](Draw(rng, loop_types), f"fuzz_{kind}_s{seed}_c{index}")
    case = case.with_(data_seed=rng.randrange(1 << 20))
    # offsets and index tensors as torch makes them (int64) or as int32, drawn last so the
    # rest of a case is what the seed drew before; then, now and then, tensors passed in a list
    case = case.with_index_dtype(rng.choice((torch.int32, torch.int64)))
    tensors = [spec.name for spec in case.inputs if not spec.fill.startswith("int:")]
    if tensors and rng.random() < 0.1:
        chosen = set(rng.sample(tensors, rng.randint(1, len(tensors))))
        case = case.with_(grouped=tuple(name for name in tensors if name in chosen))
    return case
