"""Composites for norms and small reductions: F.rms_norm, torch.linalg.vector_norm, torch.norm,
F.normalize, torch.count_nonzero and torch.aminmax.

Each is recorded as the program torch's CPU kernels compute, so the mask planner
masks a partial tile's padding in its reductions like any other:

- `rms_norm`: x in float32, `x * rsqrt(mean(x * x) + eps) * weight` (weight in float32),
  rounded once to x's dtype; eps defaults to float32's epsilon, for 16-bit inputs too.
- `vector_norm` of order p: `sqrt(sum(x * x))` (2), `sum(|x|)` (1), `amax(|x|)` (inf),
  `amin(|x|)` (-inf), the count of non-zeros (0), `sum(|x| ** p) ** (1 / p)` otherwise;
  16-bit inputs compute in float32, rounded once. `torch.norm`'s p='fro' is order 2.
- `normalize`: `x / clamp_min(norm(x, p, dim), eps)`, as torch writes it.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from ... import exc
from .binders import normalize_dims
from .definition import EVERY_DTYPE, FLOATS, Call, Composite, Record
from .pointwise_composites import bound_arguments

_LOW_PRECISION = (torch.bfloat16, torch.float16)


def _float_meta(call: Call, x: Any) -> torch.Tensor:
    meta = call.meta_of(x)
    if not isinstance(meta, torch.Tensor) or not meta.dtype.is_floating_point:
        raise exc.UnsupportedDtype(f"{call.display} takes a float tensor (torch's rule); cast it first.")
    return meta


def _all_dims(dim: Any, rank: int) -> tuple[int, ...]:
    dims = normalize_dims(dim, rank)
    return tuple(range(rank)) if dims is None else dims


def _rms_norm(call: Call, record: Record) -> Any:
    x, shape, weight, eps = bound_arguments(call, ("input", "normalized_shape", "weight", "eps"),
                                            {"weight": None, "eps": None}, numbers=("normalized_shape", "eps"))
    call.run_meta(lambda *ts: torch.rms_norm(ts[0], shape, *ts[1:], eps=eps), (x,) + (
        () if weight is None else (weight,)), {})  # torch's checks of the shapes
    source = _float_meta(call, x)
    shape = tuple(shape) if isinstance(shape, (list, tuple, torch.Size)) else (shape,)
    dims = tuple(range(source.dim() - len(shape), source.dim()))
    eps = torch.finfo(torch.float32).eps if eps is None else float(eps)
    wide = record("to", x, torch.float32) if source.dtype != torch.float32 else x
    mean_square = record("mean", record("mul", wide, wide), dims, True)
    out = record("mul", wide, record("rsqrt", record("add", mean_square, eps)))
    if weight is not None:
        weight_meta = call.meta_of(weight)
        out = record("mul", out, weight if weight_meta.dtype == torch.float32 else record("to", weight, torch.float32))
    return record("to", out, source.dtype) if source.dtype != torch.float32 else out


def norm_of(record: Record, x: Any, order: float, dims: tuple[int, ...], keepdim: bool, dtype: torch.dtype) -> Any:
    """The order-`order` vector norm of `x` over `dims`, in float32 for a 16-bit `dtype`
    and rounded once to it."""
    if dtype in _LOW_PRECISION:
        x = record("to", x, torch.float32)
    if order == 0:
        out = record("sum", record("to", record("ne", x, 0), torch.float32 if dtype in _LOW_PRECISION else dtype),
                     dims, keepdim)
    elif order == 2:
        out = record("sqrt", record("sum", record("mul", x, x), dims, keepdim))
    elif order == 1:
        out = record("sum", record("abs", x), dims, keepdim)
    elif math.isinf(order):
        out = record("amax" if order > 0 else "amin", record("abs", x), dims, keepdim)
    else:
        powered = record("sum", record("pow", record("abs", x), float(order)), dims, keepdim)
        out = record("pow", powered, 1.0 / float(order))
    return record("to", out, dtype) if dtype in _LOW_PRECISION else out


def _order(call: Call, order: Any) -> float:
    if isinstance(order, bool) or not isinstance(order, (int, float)):
        raise exc.UnsupportedOperation(
            f"{call.display}: the order must be a Python number (2, 1, inf, ...), got {order!r}.")
    return float(order)


def _vector_norm(call: Call, record: Record) -> Any:
    x, order, dim, keepdim, dtype = bound_arguments(call, ("input", "ord", "dim", "keepdim", "dtype"), {
        "ord": 2, "dim": None, "keepdim": False, "dtype": None}, numbers=("ord", "dim", "keepdim"))
    call.run_meta(lambda t: torch.linalg.vector_norm(t, order, dim, keepdim, dtype=dtype), (x,), {})
    source = _float_meta(call, x)
    if dtype is not None and dtype != source.dtype:
        x = record("to", x, dtype)
    return norm_of(record, x, _order(call, order), _all_dims(dim, source.dim()), bool(keepdim),
                   dtype or source.dtype)


def _norm(call: Call, record: Record) -> Any:
    """torch.norm / Tensor.norm: p='fro' (the default) or a number, as vector_norm."""
    x, p, dim, keepdim, dtype = bound_arguments(call, ("input", "p", "dim", "keepdim", "dtype"), {
        "p": "fro", "dim": None, "keepdim": False, "dtype": None}, numbers=("p", "dim", "keepdim"))
    if isinstance(p, str) and p != "fro":
        raise exc.UnsupportedOperation(f"{call.display}(p={p!r}): only vector norms (p='fro' or a number) "
                                       "are supported; the nuclear norm needs singular values.")
    call.run_meta(lambda t: torch.norm(t, p, dim, keepdim, dtype=dtype), (x,), {})
    source = _float_meta(call, x)
    if dtype is not None and dtype != source.dtype:
        x = record("to", x, dtype)
    order = 2.0 if p == "fro" else _order(call, p)
    return norm_of(record, x, order, _all_dims(dim, source.dim()), bool(keepdim), dtype or source.dtype)


def _normalize(call: Call, record: Record) -> Any:
    x, p, dim, eps = bound_arguments(call, ("input", "p", "dim", "eps"), {"p": 2.0, "dim": 1, "eps": 1e-12},
                                     numbers=("p", "dim", "eps"))
    call.run_meta(lambda t: torch.nn.functional.normalize(t, p, dim, eps), (x,), {})
    source = _float_meta(call, x)
    norm = norm_of(record, x, _order(call, p), _all_dims(dim, source.dim()), True, source.dtype)
    return record("div", x, record("clamp_min", norm, float(eps)))


def _count_nonzero(call: Call, record: Record) -> Any:
    x, dim = bound_arguments(call, ("input", "dim"), {"dim": None}, numbers=("dim",))
    call.run_meta(lambda t: torch.count_nonzero(t, dim), (x,), {})
    return record("sum", record("ne", x, 0), _all_dims(dim, call.rank_of(x)), False)


def _aminmax(call: Call, record: Record) -> Any:
    x, dim, keepdim = bound_arguments(call, ("input", "dim", "keepdim"), {"dim": None, "keepdim": False},
                                      numbers=("dim", "keepdim"))
    call.run_meta(lambda t: torch.aminmax(t, dim=dim, keepdim=keepdim), (x,), {})
    dims = _all_dims(dim, call.rank_of(x))
    return torch.return_types.aminmax((record("amin", x, dims, bool(keepdim)),
                                       record("amax", x, dims, bool(keepdim))))


_SIXTEEN = "16-bit inputs compute in float32, rounded once"

NORM_DEFINITIONS = (
    Composite("rms_norm", ("rms_norm",), _rms_norm, dtypes=FLOATS,
              note="x * rsqrt(mean(x * x) + eps) * weight over the trailing normalized dims, in float32 "
                   "(weight too), rounded once; eps defaults to float32's epsilon, as torch; a weight tensor "
                   "argument is read whole in device code as `w[:]`"),
    Composite("vector_norm", ("vector_norm",), _vector_norm, dtypes=FLOATS,
              note=f"torch.linalg.vector_norm: ord 2, 1, inf, -inf, 0 or any number; dim=, keepdim=, dtype=; "
                   f"{_SIXTEEN}"),
    Composite("norm", ("norm",), _norm, dtypes=FLOATS,
              note=f"vector norms: p='fro' (order 2) or a number; 'nuc' is refused; {_SIXTEEN}"),
    Composite("normalize", ("normalize",), _normalize, dtypes=FLOATS,
              note="F.normalize: x / clamp_min(norm(x, p, dim, keepdim=True), eps), as torch writes it"),
    Composite("count_nonzero", ("count_nonzero",), _count_nonzero, dtypes=EVERY_DTYPE,
              note="the sum of x != 0 (int64 in torch: checked to fit int32)"),
    Composite("aminmax", ("aminmax",), _aminmax, dtypes=EVERY_DTYPE,
              note="(min, max) as torch.return_types.aminmax; dim=, keepdim="),
)
