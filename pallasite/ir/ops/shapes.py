"""torch.stack, torch.einsum, torch.outer, F.glu, torch.tril/triu, torch.flip and
Tensor.repeat as programs of registry ops.

`outer` is `a[:, None] * b[None, :]`; `glu` the product of `chunk`'s halves (in float32 for
16-bit values, as torch's kernel); `tril`/`triu` select by `column - row` from two aranges,
so of a device value the rows and columns are the value's own (a tile's, as torch.tril of
that slice); `flip` a `gather` by reversed positions (Mosaic has no lane reversal);
`repeat`/`tile` is `cat` of copies along each repeated axis; `roll` a `cat` of two narrowings,
`diff` narrowings subtracted; `mv` is `matmul`.

`stack` is `cat` of its tensors each unsqueezed at `dim`, so the mask planner and the
lowering know only `cat` (whose rule chooses a form Mosaic lowers: `cat`'s docstring in
codegen/lowering.py). `einsum` covers the contractions `matmul`/`bmm`/`mm` do: two
operands, one contracted letter, one free letter per operand, and at most one batch
letter in both operands and the output. The operands are permuted to (batch, free,
contracted) and (batch, contracted, free), multiplied by `matmul`, and the product
permuted to the output's order; any other equation is refused, naming it.
"""
from __future__ import annotations

from typing import Any

import torch

from ... import exc
from .definition import EVERY_DTYPE, FLOATS, Call, Composite, Record
from .pointwise_composites import bound_arguments


def _stack(call: Call, record: Record) -> Any:
    args, kwargs = list(call.args), dict(call.kwargs)
    unknown = set(kwargs) - {"tensors", "dim"}
    if unknown or len(args) > 2:
        raise exc.UnsupportedOperation(f"{call.display} takes (tensors, dim=0), got an unsupported argument.")
    tensors = args[0] if args else kwargs.get("tensors")
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise exc.UnsupportedOperation(f"{call.display} takes a non-empty list or tuple of tensors, got {tensors!r}.")
    call.run_meta(lambda *pieces: torch.stack(pieces, dim), tuple(tensors), {})  # torch's checks of the shapes
    rank = call.rank_of(tensors[0]) + 1
    dim = dim % rank
    return record("cat", [record("unsqueeze", t, dim) for t in tensors], dim)


def _outer(call: Call, record: Record) -> Any:
    a, b = bound_arguments(call, ("input", "vec2"), {})
    call.run_meta(torch.outer, (a, b), {})  # two vectors
    return record("mul", record("unsqueeze", a, 1), record("unsqueeze", b, 0))


def _mv(call: Call, record: Record) -> Any:
    a, v = bound_arguments(call, ("input", "vec"), {})
    call.run_meta(torch.mv, (a, v), {})  # a matrix and a vector
    return record("matmul", a, v)


def _roll(call: Call, record: Record) -> Any:
    """torch.roll along given dims: the last `shift` positions, then the rest (cat of two narrowings)."""
    x, shifts, dims = bound_arguments(call, ("input", "shifts", "dims"), {"dims": None}, numbers=("shifts", "dims"))
    call.run_meta(lambda t: torch.roll(t, shifts, dims), (x,), {})
    if dims is None:
        raise exc.UnsupportedOperation(f"{call.display} without dims= rolls the flattened value; give dims= "
                                       "(one per shift) to roll along axes.")
    shape = list(call.meta_of(x).shape)
    pairs = zip(shifts, dims) if isinstance(shifts, (list, tuple)) else [(shifts, dims)]
    for shift, dim in pairs:
        dim = dim % len(shape)
        size = shape[dim]
        shift = shift % size if size else 0
        if shift:
            x = record("cat", [record("narrow", x, dim, size - shift, shift), record("narrow", x, dim, 0, size - shift)],
                       dim)
    return x


def _diff(call: Call, record: Record) -> Any:
    """torch.diff: n times, each element minus the one before along dim (`!=` of bools), after
    prepend/append are concatenated."""
    x, n, dim, prepend, append = bound_arguments(call, ("input", "n", "dim", "prepend", "append"), {
        "n": 1, "dim": -1, "prepend": None, "append": None}, numbers=("n", "dim"))
    call.run_meta(lambda *ts: torch.diff(ts[0], n, dim, *ts[1:]), (x, prepend, append), {})
    dim = dim % call.rank_of(x)
    pieces = [item for item in (prepend, x, append) if item is not None]
    if len(pieces) > 1:
        x = record("cat", pieces, dim)
    boolean = call.meta_of(x).dtype == torch.bool
    for _ in range(n):
        size = call.meta_of(x).shape[dim]
        later, earlier = record("narrow", x, dim, 1, size - 1), record("narrow", x, dim, 0, size - 1)
        x = record("ne" if boolean else "sub", later, earlier)
    return x


def _glu(call: Call, record: Record) -> Any:
    """F.glu: the first half times the sigmoid of the second, in float32 for 16-bit values."""
    x, dim = bound_arguments(call, ("input", "dim"), {"dim": -1}, numbers=("dim",))
    call.run_meta(lambda t: torch.nn.functional.glu(t, dim), (x,), {})  # an even size
    dtype = call.meta_of(x).dtype
    if not dtype.is_floating_point:  # torch's CPU kernel's refusal (meta tensors skip it)
        raise exc.UnsupportedDtype(f"{call.display} of {str(dtype).removeprefix('torch.')}: torch refuses it "
                                   "(glu is not implemented for integers); cast it to a float first.")
    wide = record("to", x, torch.float32) if dtype in (torch.bfloat16, torch.float16) else x
    first, second = record("chunk", wide, 2, dim)
    out = record("mul", first, record("sigmoid", second))
    return out if wide is x else record("to", out, dtype)


def _triangle(lower: bool):
    def expand(call: Call, record: Record) -> Any:
        """The lower (upper) triangle of the last two axes: column - row <= (>=) diagonal;
        of a device value, rows and columns count within it (a tile's own)."""
        x, diagonal = bound_arguments(call, ("input", "diagonal"), {"diagonal": 0}, numbers=("diagonal",))
        call.run_meta(lambda t: (torch.tril if lower else torch.triu)(t, diagonal), (x,), {})
        rows, columns = call.meta_of(x).shape[-2:]
        row = record("reshape", record.arange(rows), [rows, 1])
        column = record("reshape", record.arange(columns), [1, columns])
        offset = record("sub", column, row)
        keep = record("le" if lower else "ge", offset, int(diagonal))
        return record("where", keep, x, record("zeros_like", x))

    return expand


def _repeat(call: Call, record: Record) -> Any:
    """Tensor.repeat / torch.tile: each axis repeated by cat of copies (new leading axes first)."""
    x, *counts = call.args
    if call.kwargs or (len(counts) == 1 and isinstance(counts[0], (list, tuple, torch.Size))):
        counts = list(call.kwargs.get("dims", call.kwargs.get("repeats", counts[0] if counts else ())))
    counts = [call.size_of(count) for count in counts]
    function = torch.tile if call.spelling == "tile" else torch.Tensor.repeat
    call.run_meta(lambda t: function(t, counts), (x,), {})
    rank = call.rank_of(x)
    counts = [1] * (rank - len(counts)) + counts  # torch.tile pads the counts with leading 1s
    for _ in range(len(counts) - rank):
        x = record("unsqueeze", x, 0)
    for axis, count in enumerate(counts):
        if count != 1:
            x = record("cat", [x] * count, axis)
    return x


def _repeat_interleave(call: Call, record: Record) -> Any:
    """torch.repeat_interleave with an int count: each element followed by its copies, as a
    new axis after `dim` broadcast to the count and merged into `dim` (without dim: of the
    flattened value, as torch)."""
    x, repeats, dim, _ = bound_arguments(call, ("input", "repeats", "dim", "output_size"),
                                         {"dim": None, "output_size": None}, numbers=("repeats", "dim", "output_size"))
    if not isinstance(repeats, int) or isinstance(repeats, bool):  # a value is refused by constant_of
        raise exc.UnsupportedOperation(f"{call.display}: repeats must be an int, got {repeats!r}.")
    meta = call.run_meta(lambda t: torch.repeat_interleave(t, repeats, dim), (x,), {})
    if dim is None:
        x, dim = record("reshape", x, [call.meta_of(x).numel()]), 0
    shape = list(call.meta_of(x).shape)
    dim %= len(shape)
    if call.fewest_valid(x, dim) is not None:
        raise exc.UnsupportedOperation(
            f"{call.display} along dim {dim}, which a partial tile pads: the copies would merge the tile's "
            "padding into the axis, which later ops cannot mask. Choose a block size that divides the dim, "
            "or repeat along a whole axis (or a new one: `v[:, None, :].repeat_interleave(r, 1)`).")
    copies = record("unsqueeze", x, dim + 1)
    copies = record("broadcast_to", copies, shape[:dim + 1] + [repeats] + shape[dim + 1:])
    return record("reshape", copies, list(meta.shape))


def _flip(call: Call, record: Record) -> Any:
    """torch.flip: a gather of each flipped axis by `size - 1 - arange(size)` (Mosaic has no
    lane reversal; the gather is exact bit for bit)."""
    x, dims = bound_arguments(call, ("input", "dims"), {}, numbers=("dims",))
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    call.run_meta(lambda t: torch.flip(t, dims), (x,), {})  # distinct dims in range
    shape = list(call.meta_of(x).shape)
    for dim in sorted({d % len(shape) for d in dims}):
        size = shape[dim]
        reverse = record("rsub", record.arange(size), size - 1)
        index = record("reshape", reverse, [size if axis == dim else 1 for axis in range(len(shape))])
        x = record("gather", x, dim, record("broadcast_to", index, shape))
    return x


# ------------------------------------------------------------------ einsum --


def einsum_plan(equation: str, ranks: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The permutations of (lhs, rhs, product) that make `equation` one `matmul`: lhs to
    (batch, free, contracted), rhs to (batch, contracted, free), and the product
    (batch, lhs free, rhs free) to the output's order. An equation of another form is an
    `exc.UnsupportedOperation` naming it."""
    text = equation.replace(" ", "")

    def refuse(why: str) -> exc.UnsupportedOperation:
        return exc.UnsupportedOperation(
            f"torch.einsum({equation!r}): {why}. pallasite maps einsum onto matmul/bmm: two operands, "
            "one contracted letter, one free letter per operand (or none: a vector) and at most one batch "
            "letter (e.g. 'ik,kj->ij', 'bik,bkj->bij', 'ij,kj->ik', 'mk,k->m'); write other contractions with "
            "torch.matmul, permutes and sums.")

    if "." in text:
        raise refuse("'...' is not supported")
    inputs, arrow, output = text.partition("->")
    operands = inputs.split(",")
    if len(operands) != 2 or len(ranks) != 2:
        raise refuse(f"{len(ranks)} operand(s)")
    lhs, rhs = operands
    if not all(letters.isalpha() for letters in (lhs, rhs)) or (output and not output.isalpha()):
        raise refuse("subscripts must be letters")
    for letters, rank in zip((lhs, rhs), ranks):
        if len(letters) != rank:
            raise exc.ShapeMismatch(f"torch.einsum({equation!r}): subscripts {letters!r} for a rank-{rank} operand.")
        if len(set(letters)) != len(letters):
            raise refuse(f"a repeated letter in {letters!r} (a diagonal)")
    if not arrow:  # torch's implicit output: the letters seen once, in alphabetical order
        output = "".join(sorted(c for c in set(lhs + rhs) if (lhs + rhs).count(c) == 1))
    if len(set(output)) != len(output) or set(output) - set(lhs + rhs):
        raise refuse(f"output {output!r} repeats a letter or names one no operand has")
    batch = [c for c in lhs if c in rhs and c in output]
    contracted = [c for c in lhs if c in rhs and c not in output]
    free_lhs = [c for c in lhs if c not in rhs]
    free_rhs = [c for c in rhs if c not in lhs]
    if len(contracted) != 1:
        raise refuse(f"{len(contracted)} contracted letters")
    if len(free_lhs) > 1 or len(free_rhs) > 1 or set(free_lhs + free_rhs) - set(output):
        raise refuse("each operand needs at most one free letter, kept in the output")
    if not free_lhs and not free_rhs:
        raise refuse("no free letter (a dot product" + (" per batch letter" if batch else "")
                     + "): write (a * b).sum(" + ("-1" if batch else "") + ")")
    if len(batch) > 1 or (batch and not (free_lhs and free_rhs)):
        raise refuse(f"{len(batch)} batch letters" if len(batch) > 1 else "a batch letter beside a vector")
    lhs_perm = tuple(lhs.index(c) for c in (*batch, *free_lhs, *contracted))
    rhs_perm = tuple(rhs.index(c) for c in (*batch, *contracted, *free_rhs))
    product = (*batch, *free_lhs, *free_rhs)
    return lhs_perm, rhs_perm, tuple(product.index(c) for c in output)


def _einsum(call: Call, record: Record) -> Any:
    if call.kwargs or not call.args or not isinstance(call.args[0], str):
        raise exc.UnsupportedOperation(f"{call.display} takes (equation, *operands).")
    equation, operands = call.args[0], list(call.args[1:])
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = list(operands[0])
    ranks = tuple(call.rank_of(t) for t in operands)
    call.run_meta(lambda *ts: torch.einsum(equation, *ts), tuple(operands), {})  # torch's own checks
    lhs_perm, rhs_perm, out_perm = einsum_plan(equation, ranks)
    lhs, rhs = operands

    def permuted(value: Any, perm: tuple[int, ...]) -> Any:
        return value if perm == tuple(range(len(perm))) else record("permute", value, perm)

    return permuted(record("matmul", permuted(lhs, lhs_perm), permuted(rhs, rhs_perm)), out_perm)


SHAPE_DEFINITIONS = (
    Composite("outer", ("outer", "ger"), _outer, dtypes=EVERY_DTYPE, note="a[:, None] * b[None, :]"),
    Composite("glu", ("glu",), _glu, dtypes=FLOATS, note="dim=; first half * sigmoid(second half)"),
    Composite("mv", ("mv",), _mv, dtypes=FLOATS, note="matrix @ vector (matmul)"),
    Composite("roll", ("roll",), _roll, dtypes=EVERY_DTYPE,
              note="dims= required; cat of two narrowings per axis; an axis a partial tile pads is refused"),
    Composite("diff", ("diff",), _diff, dtypes=EVERY_DTYPE,
              note="n=, dim=, prepend=, append=; later minus earlier (`!=` of bools)"),
    Composite("tril", ("tril",), _triangle(lower=True), dtypes=EVERY_DTYPE,
              note="diagonal=; of a device value, rows and columns count within it (a tile's own)"),
    Composite("triu", ("triu",), _triangle(lower=False), dtypes=EVERY_DTYPE,
              note="diagonal=; of a device value, rows and columns count within it (a tile's own)"),
    Composite("flip", ("flip",), _flip, dtypes=EVERY_DTYPE,
              note="a gather by reversed positions, bit for bit; an axis a partial tile pads is refused"),
    Composite("repeat", ("repeat", "tile"), _repeat, dtypes=EVERY_DTYPE,
              note="cat of copies along each repeated axis (Tensor.repeat, torch.tile)"),
    Composite("repeat_interleave", ("repeat_interleave",), _repeat_interleave, dtypes=EVERY_DTYPE,
              note="an int repeats (a tensor of counts is refused: a data-dependent size); dim=, or the "
                   "flattened value without it; each element then its copies; an axis a partial tile pads is "
                   "refused"),
    Composite("stack", ("stack",), _stack, dtypes=EVERY_DTYPE,
              note="cat of the tensors unsqueezed at dim; stack(..., -1) merged back by a reshape "
                   "(RoPE's pairs) is a lane interleave"),
    Composite("einsum", ("einsum",), _einsum, dtypes=FLOATS,
              note="two operands, the contractions matmul/bmm cover: one contracted letter, one free "
                   "letter per operand (none: a vector, 'mk,k->m', 'k,kn->n'), at most one batch letter; "
                   "other equations are refused"),
)
