"""Composites for torch's variance family: var, std, var_mean, std_mean, and F.layer_norm.

Each is the two-pass program a careful kernel writes: the mean, then the sum of
squared deviations from it, divided by max(N - correction, 0) as torch does (so
0/0 is NaN and a positive sum over 0 is inf). Two passes rather than
E[x^2] - E[x]^2, whose cancellation loses every digit of a small variance of
large values.

N counts the valid elements only: it is the sum of ones laid out like the input
(`where(isnan(x), 1, 1)`), which the mask planner masks like any reduction's
operand, so a partial tile's padding counts 0. 16-bit inputs compute in float32
and round each result once, as torch does.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from ... import exc
from .binders import normalize_dims
from .definition import FLOATS, Call, Composite, Record

_LOW_PRECISION = (torch.bfloat16, torch.float16)
_KEYWORDS = {"input", "dim", "correction", "unbiased", "keepdim"}


def statistic_arguments(call: Call) -> tuple[Any, tuple[int, ...], float, bool]:
    """(input, dims, correction, keepdim) of var(x, dim=None, *, correction=1, keepdim=False),
    of the older var(x, unbiased) and var(x, dim, unbiased, keepdim), and of their Tensor
    methods and std/var_mean/std_mean twins. `dims` is every axis when dim is None."""
    args, kwargs = list(call.args), dict(call.kwargs)
    unknown = set(kwargs) - _KEYWORDS
    if unknown:
        raise exc.UnsupportedOperation(f"{call.display}() got an unsupported argument {sorted(unknown)[0]!r}.")
    x = args.pop(0) if args else kwargs.pop("input", None)
    names = ["unbiased"] if args and isinstance(args[0], bool) else ["dim", "unbiased", "keepdim"]
    if len(args) > len(names):
        raise exc.UnsupportedOperation(f"Too many arguments to {call.display}.")
    for name, value in zip(names, args):
        if name in kwargs:
            raise exc.UnsupportedOperation(f"{call.display}() got {name!r} twice.")
        kwargs[name] = value
    dim, unbiased, keepdim = kwargs.get("dim"), kwargs.get("unbiased"), kwargs.get("keepdim", False)
    correction = call.constant_of(kwargs["correction"], "correction") if "correction" in kwargs else None
    if correction is not None and unbiased is not None:
        raise exc.UnsupportedOperation(f"{call.display}: pass correction= or unbiased=, not both.")
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    if isinstance(correction, bool) or not isinstance(correction, (int, float)):
        raise exc.UnsupportedOperation(f"{call.display}: correction must be a Python number, got {correction!r}.")
    rank = call.rank_of(x)
    dims = normalize_dims(dim, rank)
    return x, (tuple(range(rank)) if dims is None else dims), correction, bool(keepdim)


def _statistic(root: bool, with_mean: bool) -> Callable[[Call, Record], Any]:
    def expand(call: Call, record: Record) -> Any:
        x, dims, correction, keepdim = statistic_arguments(call)
        source = call.meta_of(x)
        if not isinstance(source, torch.Tensor):
            raise exc.UnsupportedOperation(f"{call.display} needs a tensor, got {x!r}.")
        if not source.dtype.is_floating_point:
            raise exc.UnsupportedDtype(
                f"{call.display} of a {source.dtype} value: torch computes variances of floats only; "
                "cast it first (e.g. x.float()).")
        if source.dtype in _LOW_PRECISION:
            x = record("to", x, torch.float32)
        mean = record("mean", x, dims, True)
        deviation = record("sub", x, mean)
        squares = record("sum", record("mul", deviation, deviation), dims, keepdim)
        count = record("sum", record("where", record("isnan", x), 1.0, 1.0), dims, keepdim)
        divisor = record("clamp_min", record("sub", count, float(correction)), 0.0)
        out = record("div", squares, divisor)
        if root:
            out = record("sqrt", out)
        results = [out]
        if with_mean:
            results.append(mean if keepdim else record("squeeze", mean, dims))
        if source.dtype in _LOW_PRECISION:
            results = [record("to", value, source.dtype) for value in results]
        return tuple(results) if with_mean else results[0]

    return expand


def _layer_norm(call: Call, record: Record) -> Any:
    """F.layer_norm(x, normalized_shape, weight, bias, eps): over the trailing normalized dims,
    (x - mean) * rsqrt(biased var + eps) * weight + bias, in float32 for 16-bit inputs and
    rounded once (torch's CPU kernel)."""
    names = ("input", "normalized_shape", "weight", "bias", "eps")
    if len(call.args) > len(names) or set(call.kwargs) - set(names):
        raise exc.UnsupportedOperation(f"{call.display} takes (input, normalized_shape, weight, bias, eps).")
    given = {**dict(zip(names, call.args)), **call.kwargs}
    x, shape, weight, bias = (given.get(name) for name in names[:4])
    eps = given.get("eps", 1e-5)
    source = call.meta_of(x)
    shape = tuple(shape) if isinstance(shape, (list, tuple, torch.Size)) else (shape,)
    if not isinstance(source, torch.Tensor) or tuple(source.shape[source.dim() - len(shape):]) != tuple(
            int(size) for size in shape) or len(shape) > source.dim():
        raise exc.ShapeMismatch(f"{call.display}: normalized_shape {list(shape)} is not the trailing shape of "
                                f"the input {list(getattr(source, 'shape', []))}.")
    dims = tuple(range(source.dim() - len(shape), source.dim()))
    if source.dtype in _LOW_PRECISION:
        x = record("to", x, torch.float32)
    deviation = record("sub", x, record("mean", x, dims, True))
    variance = record("mean", record("mul", deviation, deviation), dims, True)
    out = record("mul", deviation, record("rsqrt", record("add", variance, float(eps))))
    if weight is not None:
        out = record("mul", out, weight)
    if bias is not None:
        out = record("add", out, bias)
    return record("to", out, source.dtype) if source.dtype in _LOW_PRECISION else out


_NOTE = ("correction= (or unbiased=), dim= an int or a list, keepdim=; two passes (mean, then squared "
         "deviations): no cancellation; 16-bit inputs compute in float32")

STATISTIC_DEFINITIONS = (
    Composite("var", ("var",), _statistic(root=False, with_mean=False), dtypes=FLOATS, note=_NOTE),
    Composite("std", ("std",), _statistic(root=True, with_mean=False), dtypes=FLOATS, note=_NOTE),
    Composite("var_mean", ("var_mean",), _statistic(root=False, with_mean=True), dtypes=FLOATS,
              note=f"(var, mean); {_NOTE}"),
    Composite("std_mean", ("std_mean",), _statistic(root=True, with_mean=True), dtypes=FLOATS,
              note=f"(std, mean); {_NOTE}"),
    Composite("layer_norm", ("layer_norm",), _layer_norm, dtypes=FLOATS,
              note="F.layer_norm over the trailing normalized dims (two passes: mean, then squared deviations); "
                   "weight, bias, eps (tensor arguments read whole in device code as `w[:]`, `b[:]`); 16-bit "
                   "inputs compute in float32, rounded once"),
)
