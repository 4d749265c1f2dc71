"""The `window_shapes` kind: static slices of a tensor axis (read and written, bounds as
Python writes them: negative, None, past the end), shifted tiles (`x[tm, tn + c]`,
`x[tm, tn.index - c]`, `x[tm - 1, tn + c]`, c past a block too, reading 0 outside the tensor; stores too; the
window `x[tm, tn.begin + h : tn.begin + h + tn.block_size]` of a second half),
`F.pad` of a whole-axis load, and Helion's concatenation (masked loads whose tile runs past
the first tensor's end, `hl.load(x, [tm, tn], extra_mask=...)`), values of a tile's block
size beside a tile (`hl.full([tm, tn.block_size], ...)`, `x[tm, tn][:, 0:tn.block_size]`,
`out[tm, 0:tn.block_size] = x[tm, tn]`: torch refuses the last where the tile is partial, and
so must the kernel), in the device loop or in an inner loop under each loop type.
Outputs start as zeros, so the positions a window does not write are compared too."""
from __future__ import annotations

from typing import Any

import torch

from .cases import Case, InputSpec, Line
from .expressions import dtype_name


def _window(rng, n: int) -> tuple[str, int]:
    """A slice of an axis of size n as the user writes it, and its length."""
    start = rng.randrange(0, n)
    stop = rng.randrange(start + 1, n + 1)
    forms = [(f"{start}:{stop}", stop - start), (f"{start}:", n - start), (f":{stop}", stop)]
    if start > 0:
        forms.append((f"-{n - start}:", n - start))
    if stop < n:
        forms.append((f"{start}:-{n - stop}", stop - start))
    past = stop + rng.choice((0, 50))
    forms.append((f"{start}:{past}", min(past, n) - start))  # a stop past the end clamps
    return rng.choice(forms)


def _block_sized(rng, dtype, body: list, head: list, depth: int) -> str:
    """A partial tile's extent against its block's size: a block-sized value is cut to the
    tile (as in reference mode); a tile stored into, or added to, a block-wide slice of a
    tensor is refused where the tile is short (torch raises there)."""
    body.append(Line(0, f"out = torch.zeros([m, n], dtype={dtype_name(dtype)}, device=x.device)"))
    body += head
    tag, line = rng.choice((
        ("beside", f"out[tm, tn] = x[tm, tn] + hl.full([tm, tn.block_size], 2, dtype={dtype_name(dtype)})"),
        ("sliced", "out[tm, tn] = x[tm, tn][:, 0:tn.block_size] * 2"),
        ("into_fixed", "out[tm, 0:tn.block_size] = x[tm, tn] * 2"),
        ("slice_beside", "out[tm, tn] = x[tm, tn] + x[tm, 0:tn.block_size]")))
    body.append(Line(depth, line))
    return f"block_sized:{tag}"


def _half_window(rng, dims: dict, dtype, inner: bool, depth: int) -> tuple[list, tuple, str]:
    """Helion's fused SwiGLU: the second half of x's columns read as a shifted tile's window,
    its start named once or written out twice (each spelling its own traced value)."""
    h = dims["n"]
    dims["w"] = 2 * h
    body = [Line(0, "m, w = x.size()"), Line(0, "h = w // 2"),
            Line(0, f"out = torch.zeros([m, h], dtype={dtype_name(dtype)}, device=x.device)")]
    body += ([Line(0, "for tm in hl.tile(m):"), Line(1, "for tn in hl.tile(h):")] if inner else
             [Line(0, "for tm, tn in hl.tile([m, h]):")])
    body += [Line(depth, "start = tn.begin + h"),
             Line(depth, "out[tm, tn] = x[tm, tn] * 2 + x[tm, start:start + tn.block_size]")]
    tag = "half_window"
    if rng.random() < 0.5:
        body[-2:] = [Line(depth, "out[tm, tn] = x[tm, tn] * 2 + x[tm, tn.begin + h:tn.begin + h + tn.block_size]")]
        tag = "half_window_inline"
    return body, (InputSpec("x", ("m", "w"), dtype),), tag


def window_shapes(draw: Any, name: str) -> Case:
    rng = draw.rng
    dtype = rng.choice((torch.float32, torch.float32, torch.bfloat16, torch.int32))
    form = rng.choice(("slice", "shift", "pad", "concat", "block_sized"))
    dims = {"m": rng.choice((3, 8, 13, 16, 37)), "n": rng.choice((5, 64, 128, 129, 200, 300))}
    inner = rng.random() < 0.4
    loop_type = draw.foldable_loop_type() if inner else None  # each inner form is a map: it may fold
    body = [Line(0, "m, n = x.size()")]
    # an outer loop ending inside the tensor: a partial tile's rows past the loop stay unwritten
    rows = "m" if rng.random() < 0.7 else "0, m - 2"
    head = ([Line(0, f"for tm in hl.tile({rows}):"), Line(1, "for tn in hl.tile(n):")] if inner else
            [Line(0, "for tm, tn in hl.tile([m, n]):")])
    depth = 2 if inner else 1
    inputs = (InputSpec("x", ("m", "n"), dtype),)
    if form == "concat":  # out = torch.cat([x, y], 1): x read past its end under a mask
        dims["k"] = rng.choice((3, 60, 128, 200))
        inputs += (InputSpec("y", ("m", "k"), dtype),)
        body.append(Line(0, f"out = torch.zeros([m, n + y.size(1)], dtype={dtype_name(dtype)}, device=x.device)"))
        body += ([Line(0, "for tm in hl.tile(m):"), Line(1, "for tn in hl.tile(n + y.size(1)):")] if inner else
                 [Line(0, "for tm, tn in hl.tile([m, n + y.size(1)]):")])
        body.append(Line(depth, "left = hl.load(x, [tm, tn], extra_mask=(tn.index < n)[None, :])"))
        body.append(Line(depth, "right = hl.load(y, [tm, tn.index - n], extra_mask=(tn.index >= n)[None, :])"))
        body.append(Line(depth, "out[tm, tn] = left + right * 2"))
        tag = "concat"
    elif form == "block_sized":
        tag = _block_sized(rng, dtype, body, head, depth)
    elif form == "slice":
        n = dims["n"]
        read, length = _window(rng, n)
        start = rng.randrange(0, n - length + 1)
        written = f"{start}:{start + length}"
        body.append(Line(0, f"out = torch.zeros([m, n], dtype={dtype_name(dtype)}, device=x.device)"))
        body.append(Line(0, "for tm in hl.tile(m):"))
        body.append(Line(1, f"out[tm, {written}] = x[tm, {read}] * 2"))
        loop_type = None
        tag = "slice"
    elif form == "shift":
        shift = rng.choice((1, 2, 3, 5, 127, 128, 130, 257))
        sign = rng.choice(("+", "-"))
        amount = str(shift)
        if rng.random() < 0.3:  # an int argument as the shift: a constant of the variant, as in reference mode
            inputs += (InputSpec("c", (), torch.int32, f"int:{shift}"),)
            amount = "c"
            if shift < dims["n"] and rng.random() < 0.5:  # the columns' loop over n - c: a constant too
                head = [Line(line.indent, line.text.replace("hl.tile(n)", "hl.tile(n - c)")
                             .replace("hl.tile([m, n])", "hl.tile([m, n - c])")) for line in head]
        index = rng.choice((f"tn {sign} {amount}", f"tn.index {sign} {amount}"))
        # a moved row tile too (`tm - 1` is an axis, as tm is: a moved block, never paired
        # with the column's index vector)
        row = rng.choice(("tm", "tm", f"tm - {rng.choice((1, 3, 8))}", f"tm + {rng.choice((1, 5, 8))}"))
        body.append(Line(0, f"out = torch.zeros([m, n], dtype={dtype_name(dtype)}, device=x.device)"))
        body += head
        if rng.random() < 0.3:  # a store at the shifted tile: positions outside are dropped
            body.append(Line(depth, f"out[{row}, {index}] = x[tm, tn] * 2"))
        else:  # a read may also take one row at a scalar beside the moved columns
            row = row if rng.random() < 0.8 else "m - 1"
            body.append(Line(depth, f"out[tm, tn] = x[{row}, {index}] + x[tm, tn]"))
        tag = f"shift:{sign}" + (":rows" if row != "tm" else "") + (":argument" if amount == "c" else "")
        if rng.random() < 0.3:  # drawn last: Helion's fused SwiGLU reads a half as a shifted tile's window
            body, inputs, tag = _half_window(rng, dims, dtype, inner, depth)
    else:
        before, after = rng.choice((0, 1, 3)), rng.choice((0, 2, 128))
        fill = rng.choice(("", ", value=1.0", ", value=-2.0"))
        body.append(Line(0, f"out = torch.zeros([m, n + {before + after}], dtype={dtype_name(dtype)}, "
                            "device=x.device)"))
        if inner:
            body += [Line(0, "for tm in hl.tile(m):"), Line(1, "for tk in hl.tile(1):")]
            body.append(Line(2, f"out[tm, :] = torch.nn.functional.pad(x[tm, :], ({before}, {after}){fill})"))
        else:
            body.append(Line(0, "for tm in hl.tile(m):"))
            body.append(Line(1, f"out[tm, :] = torch.nn.functional.pad(x[tm, :], ({before}, {after}){fill})"))
            loop_type = None
        tag = "pad"
    body.append(Line(0, "return out"))
    return Case("window_shapes", name, inputs, tuple(body), dims,
                loop_type=loop_type, exact=dtype == torch.int32, tags=("window_shapes", tag, dtype_name(dtype)))
