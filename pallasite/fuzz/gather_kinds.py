"""The `paired_indices` and `flat_gather` kinds: the index forms of issue 20.

`paired_indices`: several index tensors in one subscript, which torch pairs up element by
element after broadcasting them (the diagonal `x[t.index, t.index]`, the target logit
`logits[t.index, labels[t]]`, two loaded index vectors or index tiles, index tensors
separated by a slice, broadcast `.index` vectors, and the same in an inner loop under
each loop type).

`flat_gather`: gathers through index vectors computed on the device from tables past the
VMEM budget: a flat view read at `t.index * v + labels[t]`, Helion's jagged mean (a 3-D
computed flat index inside a data-dependent inner loop, masked explicitly or by
`hl.jagged_tile`'s implicit mask), computed rows of a 2-D table,
a row chosen per program by a scalar (`table[ids[i], :]`: read from the row's group of rows),
whole rows (or a tile's columns) of a flat view (`flat[rows[:, None] * d + hl.arange(d)]`:
a gather of rows of the 2-D view),
and a tile's window of each gathered row (`table[indices[tb], te]`, a row copy per index
of te's block), on the grid or in an inner loop.
Most cases move the budget with `vmem_limit_bytes` (a quarter of it is the threshold for a
resident table with its one-hot), some use a table really past a chip's threshold.
"""
from __future__ import annotations

from typing import Any

import torch

from .cases import Case, InputSpec, Line
from .expressions import fill_of

_DTYPES = (torch.float32, torch.float32, torch.bfloat16, torch.int32)
# a flat gather's table: every dtype a gather reads (the 16- and 8-bit ones widen)
_TABLE_DTYPES = (torch.float32, torch.bfloat16, torch.int32, torch.float16, torch.int8, torch.int16)
_VALUES = ("{x}", "({x} * 2)", "({x} + 1)")


def _size(rng, small: bool = False) -> int:
    return rng.choice((1, 5, 8, 13, 16, 37, 64) if small else (8, 37, 100, 128, 129, 200, 256))


def paired_indices(draw: Any, name: str) -> Case:
    rng = draw.rng
    dtype = rng.choice(_DTYPES)
    fill = fill_of(dtype)
    value = rng.choice(_VALUES)
    form = rng.choice(("diagonal", "target", "rows_cols", "row_then_tile", "separated", "broadcast",
                       "index_tiles", "inner"))
    loop_type = None
    if form == "diagonal":
        dims = {"n": _size(rng)}
        inputs = (InputSpec("x", ("n", "n"), dtype, fill),)
        head, out, read = ["n = x.size(0)"], "[n]", "x[t.index, t.index]"
        if rng.random() < 0.3:  # beside the diagonal: the shifted positions outside read 0
            read = f"x[t.index, t.index + {rng.choice((-3, -1, 1, 2))}]"
    elif form == "target":
        dims = {"n": _size(rng), "v": rng.choice((1, 7, 128, 300, 1000))}
        inputs = (InputSpec("x", ("n", "v"), dtype, fill), InputSpec("labels", ("n",), torch.int32, "index:v"))
        head, out, read = ["n = x.size(0)"], "[n]", "x[t.index, labels[t]]"
        if rng.random() < 0.2:  # the next (or previous) row's target
            read = f"x[t.index + {rng.choice((-1, 1))}, labels[t]]"
        if rng.random() < 0.4:  # the labels' values as data, cast where read (int64 labels: exact)
            read = "(x[t.index, labels[t]] + labels[t].to(torch.int32) % 4)"
    elif form == "rows_cols":
        dims = {"n": _size(rng), "r": _size(rng, True), "c": rng.choice((1, 8, 128, 200))}
        inputs = (InputSpec("x", ("r", "c"), dtype, fill), InputSpec("rows", ("n",), torch.int32, "index:r"),
                  InputSpec("cols", ("n",), torch.int32, "index:c"))
        head, out, read = ["n = rows.size(0)"], "[n]", "x[rows[t], cols[t]]"
    elif form == "row_then_tile":
        dims = {"n": _size(rng), "r": _size(rng, True)}
        inputs = (InputSpec("x", ("r", "n"), dtype, fill), InputSpec("rows", ("n",), torch.int32, "index:r"))
        head, out, read = ["n = rows.size(0)"], "[n]", "x[rows[t], t.index]"
    elif form == "separated":
        dims = {"n": _size(rng), "m": rng.choice((1, 3, 8)), "c": rng.choice((1, 16, 128))}
        inputs = (InputSpec("x", ("n", "m", "c"), dtype, fill), InputSpec("cols", ("n",), torch.int32, "index:c"))
        head, out, read = ["n, m = x.size(0), x.size(1)"], "[n, m]", "x[t.index, :, cols[t]]"
    if form in ("diagonal", "target", "rows_cols", "row_then_tile", "separated"):
        store = "out[t, :]" if form == "separated" else "out[t]"
        body = [Line(0, line) for line in head]
        body += [Line(0, f"out = torch.empty({out}, dtype=x.dtype, device=x.device)"), Line(0, "for t in hl.tile(n):"),
                 Line(1, f"{store} = {value.format(x=read)}")]
    elif form in ("broadcast", "index_tiles"):
        dims = {"m": _size(rng, True), "n": _size(rng), "r": _size(rng, True), "c": rng.choice((1, 8, 128))}
        if form == "broadcast":
            inputs = (InputSpec("x", ("m", "n"), dtype, fill),)
            read = "x[tm.index[:, None], tn.index[None, :]]"
            head = "m, n = x.size()"
        else:
            inputs = (InputSpec("x", ("r", "c"), dtype, fill), InputSpec("rows", ("m", "n"), torch.int32, "index:r"),
                      InputSpec("cols", ("m", "n"), torch.int32, "index:c"))
            read = "x[rows[tm, tn], cols[tm, tn]]"
            head = "m, n = rows.size()"
        body = [Line(0, head), Line(0, "out = torch.empty([m, n], dtype=x.dtype, device=x.device)"),
                Line(0, "for tm, tn in hl.tile([m, n]):"), Line(1, f"out[tm, tn] = {value.format(x=read)}")]
    else:  # inner
        dims = {"b": rng.choice((1, 2, 3)), "n": _size(rng), "v": rng.choice((8, 128, 256))}
        inputs = (InputSpec("x", ("b", "n", "v"), dtype, fill), InputSpec("labels", ("b", "n"), torch.int32, "index:v"))
        body = [Line(0, "b, n = labels.size()"), Line(0, "out = torch.empty([b, n], dtype=x.dtype, device=x.device)"),
                Line(0, "for g in hl.grid(b):"), Line(1, "for t in hl.tile(n):"),
                Line(2, f"out[g, t] = {value.format(x='x[g, t.index, labels[g, t]]')}")]
        loop_type = draw.loop_type()
    body.append(Line(0, "return out"))
    return Case("paired_indices", name, inputs, tuple(body), dims, loop_type=loop_type, exact=True,
                tags=("paired_indices", form))


def flat_gather(draw: Any, name: str) -> Case:
    rng = draw.rng
    form = rng.choice(("target", "target", "jagged_mean", "computed_rows", "shifted", "row_windows"))
    if form == "computed_rows" and rng.random() < 0.5:  # drawn here: earlier draws stay as they were
        form = "chosen_rows"
    if form == "shifted" and rng.random() < 0.5:
        form = "flat_rows"
    real = form == "target" and rng.random() < 0.25  # a table past a chip's threshold, no knob
    knobs = () if real else (("vmem_limit_bytes", rng.choice((1, 2, 4)) * 2**20),)
    loop_type, segments = None, ()
    if form == "target":
        dtype = rng.choice(_TABLE_DTYPES)
        # real: a 16 MiB (f32) table, past a quarter of a v7x's VMEM, with no knob
        dims = {"n": 64 if real else _size(rng), "v": 65536 if real else rng.choice((1000, 4096, 5000))}
        inputs = (InputSpec("logits", ("n", "v"), dtype, fill_of(dtype)),
                  InputSpec("labels", ("n",), torch.int32, "index:v"))
        body = [Line(0, "n, v = logits.size()"), Line(0, "flat = logits.view(-1)"),
                Line(0, "out = torch.empty([n], dtype=logits.dtype, device=logits.device)"),
                Line(0, "for t in hl.tile(n):"), Line(1, "out[t] = hl.load(flat, [t.index * v + labels[t]])")]
        exact = True
    elif form == "jagged_mean":
        dims = {"m": rng.choice((1, 8, 16))}
        segments = tuple(rng.choice((0, 1, 3, 8, 13, 20)) for _ in range(rng.randint(1, 9)))
        inputs = (InputSpec("x", ("T", "m"), torch.float32), InputSpec("offsets", (), torch.int32, "offsets"))
        body = [Line(0, "rows = offsets.size(0) - 1"), Line(0, "m = x.size(1)"),
                Line(0, "x_flat = x.view(-1)"),
                Line(0, "out = torch.zeros([rows, m], dtype=x.dtype, device=x.device)"),
                Line(0, "for tile_b in hl.tile(rows, block_size=8):"),
                Line(1, "starts = offsets[tile_b]"), Line(1, "nnz = offsets[tile_b.index + 1] - starts"),
                Line(1, "for tile_m in hl.tile(m):"),
                Line(2, "sums = hl.zeros([tile_b, tile_m], dtype=x.dtype)"),
                Line(2, "for tile_k in hl.tile(0, nnz.amax(), block_size=8):"),
                Line(3, "live = (tile_k.index[None, :] < nnz[:, None])[:, :, None]"),
                Line(3, "flat = (starts[:, None] + tile_k.index[None, :])[:, :, None] * m + tile_m.index[None, None, :]"),
                Line(3, "sums = sums + hl.load(x_flat, [flat], extra_mask=live).sum(1)" if rng.random() < 0.5 else
                     "sums = sums + torch.where(live, hl.load(x_flat, [torch.where(live, flat, 0)]), 0.0).sum(1)"),
                Line(2, "out[tile_b, tile_m] = torch.where(nnz[:, None] > 0, sums / nnz[:, None].to(x.dtype), 0.0)")]
        loop_type, exact = draw.loop_type(), False
        if rng.random() < 0.4:  # drawn last: hl.jagged_tile's implicit mask instead of the explicit one
            body = [Line(2, "for tile_k in hl.jagged_tile(nnz, block_size=8):") if "hl.tile(0, nnz.amax()" in line.text
                    else Line(3, "sums = sums + hl.load(x_flat, [flat]).sum(1)") if line.text.startswith("sums = sums")
                    else line for line in body if not line.text.startswith("live = ")]
            form = "jagged_tile"
        if rng.random() < 0.3:  # drawn last: the rows the offsets cover, read on the host with .item()
            body = [Line(0, "x_flat = x[:offsets[-1].item()].reshape(-1)") if line.text == "x_flat = x.view(-1)"
                    else line for line in body]
    elif form == "shifted":  # causal_conv1d's taps: a masked-off lane's index is negative
        dtype = rng.choice(_TABLE_DTYPES[:3])
        dims = {"r": rng.choice((1, 8, 13)), "s": rng.choice((128, 200, 256))}
        shift = rng.choice((1, 3, 7))
        inputs = (InputSpec("x", ("r", "s"), dtype, fill_of(dtype)),)
        body = [Line(0, "r, s = x.size()"), Line(0, "out = torch.empty_like(x)"),
                Line(0, "for tr, ts in hl.tile([r, s]):"), Line(1, f"idx = ts.index - {shift}"),
                Line(1, "out[tr, ts] = hl.load(x, [tr, idx], extra_mask=(idx >= 0)[None, :])")]
        if rng.random() < 0.5:  # tiles that start past a block multiple (`hl.tile(1, s)`), shifted back
            begin = rng.choice((1, 3, 5, 100))
            body = [Line(0, "r, s = x.size()"), Line(0, "out = torch.zeros_like(x)"),
                    Line(0, f"for ts in hl.tile({begin}, s):"),
                    Line(1, f"out[:, ts] = x[:, ts.index - {shift}] + x[:, ts]")]
        knobs, exact = (), True
    else:  # rows of a 2-D table: a tile's window of each gathered row, flat, chosen or computed rows
        dims, inputs, body, knobs, loop_type = _row_forms(draw, form, knobs)
        exact = True
    body.append(Line(0, "return out"))
    # drawn last: sizes as formulas (a flat view's length, a row width), one variant for the bucket
    static = form in ("shifted", "chosen_rows", "computed_rows") or rng.random() < 0.7
    return Case("flat_gather", name, inputs, tuple(body), dims, segments=segments, loop_type=loop_type,
                knobs=knobs, exact=exact, tags=("flat_gather", form, _table_tag(real, knobs)), static_shapes=static)


def _row_forms(draw: Any, form: str, knobs: tuple) -> tuple:
    """The `row_windows`, `chosen_rows` and `computed_rows` forms of `flat_gather`: dims,
    inputs, body, knobs (`knobs`: the budget drawn for every form) and loop type."""
    rng, loop_type = draw.rng, None
    if form == "row_windows":  # each index's row read at a tile of the other dim
        dtype = rng.choice(_TABLE_DTYPES)
        dims = {"n": _size(rng), "r": rng.choice((300, 1024, 2048)), "d": rng.choice((128, 256, 384))}
        inputs = (InputSpec("table", ("r", "d"), dtype, fill_of(dtype)),
                  InputSpec("indices", ("n",), torch.int32, "index:r"))
        body = [Line(0, "n, d = indices.size(0), table.size(1)"),
                Line(0, "out = torch.empty([n, d], dtype=table.dtype, device=table.device)")]
        read = rng.choice(_VALUES).format(x="table[idx, te]")
        if rng.random() < 0.5:  # the window's tile on the grid
            body += [Line(0, "for tb, te in hl.tile([n, d], block_size=[None, 128]):"),
                     Line(1, "idx = indices[tb]"), Line(1, f"out[tb, te] = {read}")]
        else:
            body += [Line(0, "for tb in hl.tile(n):"), Line(1, "idx = indices[tb]"),
                     Line(1, "for te in hl.tile(d, block_size=128):"), Line(2, f"out[tb, te] = {read}")]
            loop_type = draw.loop_type()
        if rng.random() < 0.5:  # the row copies whatever the table's size (else the budget decides)
            knobs = (("pallas_indirect_access_mode", "dma"),)
        if rng.random() < 0.3:  # drawn last: rows computed on the host (from int64 indices: int32 steps)
            shift = rng.choice((1, 5, -2))
            body.insert(2, Line(0, f"shifted = torch.where(indices + {shift} < table.size(0), "
                                  f"(indices + {shift}) % table.size(0), 0)"))
            body = [line if line.text != "idx = indices[tb]" else Line(line.indent, "idx = shifted[tb]")
                    for line in body]
    elif form == "flat_rows":  # a flat view read at rows[:, None] * d + columns: a gather of whole rows
        dims, inputs, body, flat_knobs, loop_type = _flat_rows(draw)
        knobs = knobs if flat_knobs is None else flat_knobs
    elif form == "chosen_rows":  # one row per program, chosen by a scalar (read from data or computed)
        dtype = rng.choice(_TABLE_DTYPES)
        dims = {"n": _size(rng, small=True), "r": rng.choice((5, 8, 21, 300, 1024)),
                "d": rng.choice((128, 256, 384))}
        inputs = (InputSpec("table", ("r", "d"), dtype, fill_of(dtype)),
                  InputSpec("ids", ("n",), torch.int32, "index:r"))
        row = rng.choice(("ids[i]", "ids[i]", f"(i * {rng.choice((1, 3, 7))} + 2) % r"))
        read = rng.choice(_VALUES)
        # every row, or a stepped grid's (`hl.grid(b, n, step)`: the rows it skips stay 0)
        grid = rng.choice(("hl.grid(n)", "hl.grid(n)", f"hl.grid(0, n, {rng.choice((2, 3))})", "hl.grid(1, n, 2)"))
        body = [Line(0, "r, d = table.size()"), Line(0, "n = ids.size(0)"),
                Line(0, f"out = torch.{'empty' if grid == 'hl.grid(n)' else 'zeros'}([n, d], dtype=table.dtype, "
                        "device=table.device)"),
                Line(0, f"for i in {grid}:"), Line(1, f"row = {row}")]
        if rng.random() < 0.5:
            body.append(Line(1, f"out[i, :] = {read.format(x='table[row, :]')}"))
        else:  # the row's columns by an inner tile
            body += [Line(1, "for te in hl.tile(d):"), Line(2, f"out[i, te] = {read.format(x='table[row, te]')}")]
            loop_type = draw.loop_type()
        knobs = ()  # the group of rows is a block whatever the budget
    else:  # computed_rows: rows of a 2-D table at a computed index
        dtype = rng.choice(_TABLE_DTYPES)
        dims = {"n": _size(rng), "r": rng.choice((300, 1024, 2048)), "d": rng.choice((1, 16, 128))}
        step = rng.choice((1, 3, 7))
        inputs = (InputSpec("table", ("r", "d"), dtype, fill_of(dtype)),)
        body = [Line(0, "r, d = table.size()"), Line(0, f"n = {dims['n']}"),
                Line(0, "out = torch.empty([n, d], dtype=table.dtype, device=table.device)"),
                Line(0, "for t in hl.tile(n):"), Line(1, f"out[t, :] = table[(t.index * {step} + 1) % r, :]")]
    return dims, inputs, body, knobs, loop_type


def _flat_rows(draw: Any) -> tuple:
    """The `flat_rows` form of `flat_gather`: dims, inputs, body, knobs (None: the budget drawn
    for every form) and loop type."""
    rng, loop_type, knobs = draw.rng, None, None
    dtype = rng.choice(_TABLE_DTYPES)
    dims = {"n": _size(rng, small=True), "r": rng.choice((5, 40, 300)), "d": rng.choice((8, 128, 256))}
    inputs = (InputSpec("table", ("r", "d"), dtype, fill_of(dtype)),
              InputSpec("idx", ("n",), torch.int32, "index:r"))
    body = [Line(0, "r, d = table.size()"), Line(0, "n = idx.size(0)"), Line(0, "flat = table.view(-1)"),
            Line(0, "out = torch.zeros([n, d], dtype=table.dtype, device=table.device)"),
            Line(0, "for t in hl.tile(n):"), Line(1, "rows = idx[t]")]
    mask = rng.choice(("", "", ", extra_mask=(rows % 3 != 1)[:, None]"))
    read = rng.choice(_VALUES)
    if rng.random() < 0.5:  # every column: hl.arange(d)
        load = f"hl.load(flat, [rows[:, None] * d + hl.arange(d)[None, :]]{mask})"
        body.append(Line(1, f"out[t, :] = {read.format(x=load)}"))
        if rng.random() < 0.4 and dtype not in (torch.int8, torch.int16):  # a scatter of rows through
            # out's flat view (scatters write float32/bfloat16/float16/int32 tensors)
            body[-1] = Line(1, "hl.store(out_flat, [t.index[:, None] * d + hl.arange(d)[None, :]], "
                               f"{read.format(x=load)})")
            body.insert(4, Line(0, "out_flat = out.view(-1)"))
    else:  # a tile of the columns, in an inner loop
        load = f"hl.load(flat, [rows[:, None] * d + tc.index[None, :]]{mask})"
        body += [Line(1, "for tc in hl.tile(d):"), Line(2, f"out[t, tc] = {read.format(x=load)}")]
        loop_type = draw.loop_type()
    if rng.random() < 0.3:  # drawn last: in place, each program reading rows earlier programs wrote
        load = f"hl.load(flat, [idx[t][:, None] * d + hl.arange(d)[None, :]]{mask.replace('rows', 'idx[t]')})"
        inputs = (inputs[0], InputSpec("idx", ("r",), torch.int32, "index:r"))
        body = [Line(0, "r, d = table.size()"), Line(0, "flat = table.view(-1)"),
                Line(0, "for t in hl.tile(r):"), Line(1, f"table[t, :] = {read.format(x=load)}"),
                Line(0, "out = table")]
        loop_type, knobs = None, ()  # a written table is whole in VMEM: no small budget
    elif rng.random() < 0.25:  # drawn last: one tile's rows for every index, broadcast (a tile of the view)
        body = [Line(0, "r, d = table.size()"), Line(0, "n = idx.size(0)"), Line(0, "flat = table.view(-1)"),
                Line(0, "out = torch.zeros([n, r, d], dtype=table.dtype, device=table.device)"),
                Line(0, "for t, tr, tc in hl.tile([n, r, d]):"), Line(1, "rows = idx[t]"),
                Line(1, "out[t, tr, tc] = " + read.format(
                    x="hl.load(flat, [rows[:, None, None] * 0 + tr.index[None, :, None] * d + tc.index[None, None, :]])"))]
        loop_type = None
    return dims, inputs, body, knobs, loop_type


def _table_tag(real: bool, knobs: tuple) -> str:
    """How a flat_gather case's table meets the row copies: past a chip's threshold, past
    the config's budget (`vmem_limit_bytes`), forced ("dma" mode), or small (resident)."""
    if real:
        return "real_table"
    keys = dict(knobs)
    return "budget_knob" if "vmem_limit_bytes" in keys else "dma_mode" if keys else "small_table"
