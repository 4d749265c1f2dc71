"""Ranges computed on the device (`chunk_ranges`, tiles inside chunks of an axis, and the
`bounds` kind's segment rows, `jagged_rows`, are below). The `tile_ranges` kind: an inner loop
whose range is computed from the outer tile — causal
(`hl.tile(0, min(n, tm.end))`), a lookahead (`min(n, tm.end + e)`), a sliding window
(`hl.tile(max(0, tm.begin - w), ...)`, w a block multiple or not), the columns after the tile
(`hl.tile(min(n, tm.end), n)`, empty for some programs) — that writes the tiles it
visits (or stores it into a fixed-size slice, refused where a tile is short) or carries a
row sum across them (or of products of two tiles of the range, which agree only where
their extents do), under each loop type, folded into the grid too
(`outer_pipeline`: as many steps as the widest range, the steps past a program's range skip).
A 2-D inner loop over (n, k) takes the range on either of its dims.
Outputs start as zeros, so the positions no range covers are compared too."""
from __future__ import annotations

from typing import Any, Callable

import torch

from .cases import Case, InputSpec, Line
from .expressions import dtype_name


def tile_ranges(draw: Any, name: str) -> Case:
    rng = draw.rng
    dtype = rng.choice((torch.float32, torch.float32, torch.bfloat16, torch.int32))
    dims = {"m": rng.choice((8, 16, 37, 64, 128, 200)), "n": rng.choice((64, 128, 129, 200, 256, 300))}
    begin = rng.choice(("0", "0", f"max(0, tm.begin - {rng.choice((0, 8, 64, 100, 128))})", "min(n, tm.end)"))
    end = rng.choice(("min(n, tm.end)", f"min(n, tm.end + {rng.choice((1, 64, 128))})", "n"))
    if begin == "min(n, tm.end)":  # the columns after the row tile: empty for the last ones when n <= m
        end = "n"
    elif begin == "0" and end == "n":
        end = "min(n, tm.end)"
    carried = rng.random() < 0.5
    two_dims = rng.random() < 0.3  # a 2-D inner loop over (n, k), the range on either dim
    if two_dims:  # small enough that a tensor kept whole (an unaligned window) fits VMEM
        dims["k"], dims["m"] = rng.choice((8, 100, 128)), min(dims["m"], 37)
    index = "tm, tn, tk" if two_dims else "tm, tn"
    acc_dtype = torch.int32 if dtype == torch.int32 else torch.float32
    body = [Line(0, "m, n, k = x.size()" if two_dims else "m, n = x.size()"), Line(0, "out = torch.zeros_like(x)")]
    if carried:
        body[1] = Line(0, f"out = torch.zeros([m], dtype={dtype_name(acc_dtype)}, device=x.device)")
    body.append(Line(0, "for tm in hl.tile(m):"))
    if carried:
        body.append(Line(1, f"acc = hl.zeros([tm], dtype={dtype_name(acc_dtype)})"))
    if not two_dims:
        body.append(Line(1, f"for tn in hl.tile({begin}, {end}):"))
    elif rng.random() < 0.5:
        body.append(Line(1, f"for tn, tk in hl.tile([{begin}, 0], [{end}, k]):"))
    else:
        body.append(Line(1, f"for tk, tn in hl.tile([0, {begin}], [k, {end}]):"))
    if carried:
        body.append(Line(2, f"acc = acc + x[{index}].sum({'[1, 2]' if two_dims else '1'})"))
        body.append(Line(1, "out[tm] = acc"))
    else:
        shifted = "" if two_dims else "out[tm, tn] = x[tm, tn] + tn.index[None, :]"
        # the tile into a fixed-size target: torch (and the kernel) refuse it where a tile is short
        fixed = "" if two_dims else "out[tm, 0:tn.block_size] = x[tm, tn] * 2"
        body.append(Line(2, rng.choice((f"out[{index}] = x[{index}] * 2 + 1",
                                        shifted or f"out[{index}] = -x[{index}]",
                                        fixed or f"out[{index}] = x[{index}] - 1"))))
    body.append(Line(0, "return out"))
    shape = ("m", "n", "k") if two_dims else ("m", "n")
    inputs = (InputSpec("x", shape, dtype, "randint" if dtype == torch.int32 else "randn"),)
    starts = {"0": "from_zero", "min(n, tm.end)": "after"}.get(begin, "windowed")
    form = f"{starts}_{'carried' if carried else 'stored'}{'_2d' if two_dims else ''}"
    loop_type = draw.foldable_loop_type()
    if carried and not two_dims and rng.random() < 0.3:  # drawn last: two tiles of one range meet
        position = next(i for i, line in enumerate(body) if line.text.startswith("for tn in"))
        body[position:position + 2] = [
            Line(1, f"for ta in hl.tile({begin}, {end}):"), Line(2, f"for tb in hl.tile({begin}, {end}):"),
            Line(3, "acc = acc + (x[tm, ta] * x[tm, tb]).sum(1)")]
        form, loop_type = f"{starts}_pair", draw.loop_type()
    return Case("tile_ranges", name, inputs, tuple(body), dims, loop_type=loop_type,
                exact=dtype == torch.int32, tags=("tile_ranges", form, dtype_name(dtype)))


def chunk_ranges(draw: Any, name: str) -> Case:
    """`x[tc * chunk + tm.index]`: tiles inside chunks of an axis (Helion's Mamba2, read through
    a chunk view, frontend/chunk_views.py) — an inner tile per chunk of an outer grid, a grid
    tile beside the chunk's, a causal inner range `hl.tile((tm.id + 1) * block)` summed, or a
    range running 8 rows into the next chunk (no view: a gather), the last one past the tensor's
    end (both modes refuse the index: reference mode once read 0 there)."""
    rng = draw.rng
    dtype = rng.choice((torch.float32, torch.bfloat16, torch.int32))
    form = rng.choice(("inner", "grid", "causal", "past", "inner", "grid", "causal", "past", "past_end"))
    nchunks, chunk = rng.choice((1, 2, 3, 4)), rng.choice((8, 16, 24, 40, 64))
    if form.startswith("past"):
        nchunks = max(nchunks, 2)
    block = rng.choice((8, 16)) if chunk % 16 == 0 else 8
    dims = {"L": nchunks * chunk, "n": rng.choice((1, 128, 200))}
    acc_dtype = dtype_name(torch.int32 if dtype == torch.int32 else torch.float32)
    body = [Line(0, "L, n = x.size()"), Line(0, f"chunk = L // {nchunks}"), Line(0, "out = torch.zeros_like(x)")]
    rows = "tc * chunk + tm.index" if form != "grid" else "tc.begin * chunk + tm.index"
    if form == "inner":
        body += [Line(0, f"for tc in hl.grid({nchunks}):"), Line(1, "for tm in hl.tile(chunk):"),
                 Line(2, f"out[{rows}, :] = x[{rows}, :] * 2 + tc")]
    elif form == "grid":
        body += [Line(0, f"for tm, tc in hl.tile([chunk, {nchunks}], block_size=[{block}, 1]):"),
                 Line(1, f"out[{rows}, :] = x[{rows}, :] - tc.begin")]
    elif form == "causal":  # row i: the sum of its chunk's rows up to the end of i's tile
        body += [Line(0, f"for tm, tc in hl.tile([chunk, {nchunks}], block_size=[{block}, 1]):"),
                 Line(1, f"acc = hl.zeros([tm, n], dtype={acc_dtype})"),
                 Line(1, f"for tk in hl.tile((tm.id + 1) * {block}, block_size=8):"),
                 Line(2, "acc = acc + x[tc.begin * chunk + tk.index, :].sum(0)[None, :]"),
                 Line(1, f"out[tc.begin * chunk + tm.index, :] = acc.to(x.dtype)")]
    else:  # 8 rows past the chunk: each program reads into the next one (the last one, in
        # past_end, past the tensor: an index out of range, refused in both modes)
        programs = nchunks if form == "past_end" else nchunks - 1
        body += [Line(0, f"for tc in hl.grid({programs}):"), Line(1, "for tm in hl.tile(chunk + 8):"),
                 Line(2, f"out[{rows}, :] = x[{rows}, :] + 1")]
    body.append(Line(0, "return out"))
    inputs = (InputSpec("x", ("L", "n"), dtype, "randint" if dtype == torch.int32 else "randn"),)
    loop_type = draw.loop_type() if form in ("inner", "causal", "past", "past_end") else None
    return Case("chunk_ranges", name, inputs, tuple(body), dims, loop_type=loop_type,
                exact=dtype == torch.int32, tags=("chunk_ranges", form, dtype_name(dtype)))


def jagged_rows(draw: Any, body: list, block_of: Callable[[Any], str]) -> None:
    """The `bounds` kind's rows of each segment written from x (grammar.py): a range read from data,
    Helion's moved rows, a 2-D loop; `block_of(draw)` draws a `, block_size=...` text."""
    rng = draw.rng
    body.append(Line(0, "out = torch.ones_like(x)"))
    body.append(Line(0, "for g in hl.grid(segments):"))
    shape = rng.random()
    if shape < 0.35:
        body.append(Line(1, f"for t in hl.tile(offsets[g], offsets[g + 1]{block_of(draw)}):"))
        body.append(Line(2, rng.choice(("out[t, :] = x[t, :] * 2 + g", "out[t, :] = x[t, :] + t.begin",
                                        "out[t, :] = x[t, :] - t.id"))))
    elif shape < 0.65:  # Helion's grouped GEMM: rows at `start + t.index` (frontend/moved_tiles.py)
        body += [Line(1, "start = offsets[g]"), Line(1, "rows = offsets[g + 1] - start"), Line(1, "if rows != 0:")]
        body.append(Line(2, f"for t, tc in hl.tile([rows, d]{rng.choice(('', ', block_size=[8, 128]'))}):"))
        # `+=`: read and written at the moved windows (a fori_loop streams it in and out)
        body.append(Line(3, f"out[start + t.index, tc] {rng.choice(('=', '+='))} " + rng.choice((
            "x[start + t.index, tc] * 2 + g", "x[start + t.index, tc] - t.id",
            # the tile's own positions, begin and end beside the moved rows (what they were)
            "x[start + t.index, tc] + t.index[:, None]", "x[start + t.index, tc] * (t.end - t.begin)",
            "torch.where((t.index < rows - 3)[:, None], x[start + t.index, tc], -x[start + t.index, tc])",
            "x[start + t.index, tc] + x[t, tc]"))))  # an unmoved access too: it stays a gather
    else:  # a 2-D loop whose rows come from data (a grouped GEMM's shape)
        block = rng.choice(("", ", block_size=[8, 128]", ", block_size=[16, 256]"))
        body.append(Line(1, f"for t, tc in hl.tile([offsets[g], 0], [offsets[g + 1], d]{block}):"))
        body.append(Line(2, rng.choice(("out[t, tc] = x[t, tc] * 2 + g", "out[t, tc] = x[t, tc] - t.begin",
                                        "out[t, tc] += x[t, tc] * 2"))))
