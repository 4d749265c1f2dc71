"""Lowering rules of gathers along a dim (`torch.gather`), contractions (matmul, addmm,
hl.dot: `lax.dot_general` at the chip's dot precision) and creation ops (full, iota, the
counter-based uniform draw); registered in the same `RULES` as codegen/lowering.py's."""
from __future__ import annotations

import math

import torch

from .op_calls import OpCall, jnp_dtype, literal, rule
from .runtime_imports import RANDOM_UNIFORM


# ---------------------------------------------------------------- indexed --


@rule("gather")
def _gather_dim(call: OpCall) -> str:
    """torch.gather without a vector gather: each output position compares its index with
    an iota over the input's axis `dim` and sums the one matching element with zeros. The
    sum runs on the elements' 32-bit patterns (floats bitcast, 16-bit floats widened
    first), so every value comes back bit for bit: -0.0, inf and NaN included. An index
    of one position along `dim` (a lane select) needs no extra axis."""
    source, index = call.args
    dim = call.attrs["dim"]
    rows = source.shape[dim]
    cut = [":" if size == source.shape[axis] or axis == dim else f":{size}"
           for axis, size in enumerate(index.shape)]
    table = source.text if all(part == ":" for part in cut) else f"{source.text}[{', '.join(cut)}]"
    if index.shape[dim] == 1:
        shape = tuple(rows if axis == dim else size for axis, size in enumerate(index.shape))
        hot = f"lax.broadcasted_iota(jnp.int32, {literal(shape)}, {dim}) == {index.text}"
        axis, keep = dim, ", keepdims=True"
    else:
        shape = (*index.shape[:dim + 1], rows, *index.shape[dim + 1:])
        hot = f"lax.broadcasted_iota(jnp.int32, {literal(shape)}, {dim + 1}) == jnp.expand_dims({index.text}, {dim + 1})"
        table, axis, keep = f"jnp.expand_dims({table}, {dim})", dim + 1, ""
    dtype = call.out_dtype
    if dtype == torch.bool:
        return f"jnp.any(({hot}) & {table}, axis={axis}{keep})"
    if dtype.is_floating_point:
        wide = table if dtype == torch.float32 else f"{table}.astype(jnp.float32)"
        bits = f"lax.bitcast_convert_type({wide}, jnp.int32)"
    else:
        bits = table if dtype == torch.int32 else f"{table}.astype(jnp.int32)"
    picked = f"jnp.sum(jnp.where({hot}, {bits}, 0), axis={axis}{keep})"
    if dtype.is_floating_point:
        picked = f"lax.bitcast_convert_type({picked}, jnp.float32)"
    return picked if dtype in (torch.float32, torch.int32) else f"{picked}.astype({jnp_dtype(dtype)})"


# ----------------------------------------------------------------- matmul --


def _dot_text(call: OpCall, a: int, b: int) -> str:
    """lax.dot_general of operands a and b with f32 (or i32) accumulation."""
    ta, tb = call.args[a], call.args[b]
    ra, rb = len(ta.shape), len(tb.shape)
    dtype = torch.promote_types(ta.dtype, tb.dtype)
    if dtype == torch.uint8:  # Mosaic has no unsigned dot: int16 holds every uint8 (as int8 x uint8 does)
        dtype = torch.int16
    acc = "jnp.float32" if dtype.is_floating_point else "jnp.int32"
    if ta.shape and ta.shape[-1] == 0:  # nothing to contract (K = 0): zeros, with no 0-sized vector
        return f"jnp.zeros({literal(tuple(call.out_shape))}, {acc})"
    x, y = call.cast(a, dtype), call.cast(b, dtype)
    # the kernel's dot_precision (the plan's `dot_precision`); DEFAULT is Mosaic's own, so it is not written
    precision = call.attrs.get("precision", "DEFAULT")
    if precision != "DEFAULT" and dtype.is_floating_point:
        acc = f"{acc}, precision=lax.Precision.{precision}"
    if ra == 2 and rb == 2:
        dims = "(((1,), (0,)), ((), ()))"
    elif ra == 3 and rb == 3:
        dims = "(((2,), (1,)), ((0,), (0,)))"
    elif ra == 3 and rb == 2:
        dims = "(((2,), (0,)), ((), ()))"
    elif ra == rb > 3 and ta.shape[:-2] == tb.shape[:-2]:
        # Mosaic's matmul takes one batch dim: the leading batch dims merge into one, and back
        batch = math.prod(ta.shape[:-2])
        (m, k), n = ta.shape[-2:], tb.shape[-1]
        merged = (f"lax.dot_general({x}.reshape({literal((batch, m, k))}), {y}.reshape({literal((batch, k, n))}), "
                  f"(((2,), (1,)), ((0,), (0,))), preferred_element_type={acc})")
        return f"{merged}.reshape({literal((*ta.shape[:-2], m, n))})"
    else:
        return f"jnp.matmul({x}, {y}, preferred_element_type={acc})"
    return f"lax.dot_general({x}, {y}, {dims}, preferred_element_type={acc})"


def _finish(call: OpCall, text: str) -> str:
    if call.out_dtype in (torch.float32, torch.int32):
        return text
    return f"{text}.astype({jnp_dtype(call.out_dtype)})"


@rule("mm", "bmm", "matmul")
def _matmul(call: OpCall) -> str:
    return _finish(call, _dot_text(call, 0, 1))


@rule("addmm", "baddbmm")
def _addmm(call: OpCall) -> str:
    beta, alpha = call.attrs["beta"], call.attrs["alpha"]
    product = _dot_text(call, 1, 2)
    if alpha != 1:
        product = f"({literal(alpha)} * {product})"
    bias = call.cast(0, torch.float32) if call.out_dtype.is_floating_point else call.args[0].text
    if beta == 0:
        return _finish(call, product)
    if beta != 1:
        bias = f"({literal(beta)} * {bias})"
    return _finish(call, f"({bias} + {product})")


@rule("dot")
def _hl_dot(call: OpCall) -> str:
    product = _dot_text(call, 0, 1)
    if call.args[2].raw is not None:
        acc = call.cast(2, torch.float32) if call.out_dtype.is_floating_point else call.args[2].text
        product = f"({acc} + {product})"
    return _finish(call, product)


# --------------------------------------------------------------- creation --


@rule("full")
def _full(call: OpCall) -> str:
    shape = literal(tuple(call.attrs["shape"]))
    raw = call.args[0].raw
    if raw == 0 and not isinstance(raw, bool) and math.copysign(1.0, raw) > 0:  # -0.0 keeps its sign
        return f"jnp.zeros({shape}, {jnp_dtype(call.out_dtype)})"
    return f"jnp.full({shape}, {call.args[0].text}, {jnp_dtype(call.out_dtype)})"


@rule("random_uniform", imports=RANDOM_UNIFORM)
def _random_uniform(call: OpCall) -> str:
    """`random_uniform` from `pallasite.runtime.prng`, which the module imports when used."""
    counter, seed = call.args[0].text, call.args[1].text
    options = "".join([
        f", stream={call.attrs['stream']}" if call.attrs["stream"] else "",
        f", dtype={jnp_dtype(call.out_dtype)}" if call.out_dtype != torch.float32 else "",
    ])
    return f"random_uniform({counter}, {seed}{options})"


@rule("iota")
def _iota(call: OpCall) -> str:
    (n,) = call.out_shape
    start, step = call.attrs["start"], call.attrs["step"]
    text = f"lax.broadcasted_iota(jnp.int32, ({n},), 0)"
    if step != 1:
        text = f"{step} * {text}"
    if start != 0:
        text = f"({start} + {text})"
    if call.out_dtype != torch.int32:
        text = f"({text}).astype({jnp_dtype(call.out_dtype)})"
    return text
