"""Composites: torch functions the frontend records as a few registry ops.

softmax and log_softmax are the numerically stable programs every kernel
writes by hand (subtract the row's max, exponentiate, normalize); masked_fill
is a torch.where in its input's dtype. Recorded
step by step, a reduced axis that a partial tile pads is masked by the mask
planner like any reduction, and each step has its lowering already.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import torch

from ... import exc
from .binders import dtype_refusal, normalize_dims, number_refusal
from .definition import EVERY_DTYPE, FLOATS, Call, Composite, Record
from .pointwise_composites import POINTWISE_COMPOSITES
from .scans import SCAN_DEFINITIONS
from .shapes import SHAPE_DEFINITIONS
from .norms import NORM_DEFINITIONS
from .orderings import ORDERING_DEFINITIONS
from .statistics import STATISTIC_DEFINITIONS

_LOW_PRECISION = (torch.bfloat16, torch.float16)


def _softmax_arguments(call: Call) -> tuple[Any, int, torch.dtype | None]:
    """(input, dim, dtype) of torch.softmax(x, dim, dtype), F.softmax(x, dim, _stacklevel,
    dtype), Tensor.softmax(dim, dtype) and their log_softmax twins."""
    args, kwargs = list(call.args), dict(call.kwargs)
    unknown = set(kwargs) - {"input", "dim", "dtype", "_stacklevel"}
    if unknown:
        raise exc.UnsupportedOperation(f"{call.display}() got an unsupported argument {sorted(unknown)[0]!r}.")
    x = args[0] if args else kwargs.get("input")
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    dtype = kwargs.get("dtype")
    for extra in args[2:]:  # F.softmax's third positional is _stacklevel, torch.softmax's dtype
        if isinstance(extra, torch.dtype):
            dtype = extra
    if dim is None:
        raise exc.UnsupportedOperation(
            f"{call.display} needs dim=: the axis to normalize over, e.g. {call.spelling}(x, dim=-1) "
            "(torch's implicit dim is deprecated).")
    (dim,) = normalize_dims(dim, call.rank_of(x))
    return x, dim, dtype


def _softmax(log: bool) -> Callable[[Call, Record], Any]:
    def expand(call: Call, record: Record) -> Any:
        x, dim, dtype = _softmax_arguments(call)
        source = call.meta_of(x)
        if not isinstance(source, torch.Tensor):
            raise exc.UnsupportedOperation(f"{call.display} needs a tensor, got {x!r}.")
        if dtype is not None and dtype != source.dtype:
            x = record("to", x, dtype)
        result_dtype = dtype or source.dtype
        if not result_dtype.is_floating_point:
            raise exc.UnsupportedDtype(
                f"{call.display} of a {result_dtype} value: cast it to a float dtype first "
                "(or pass dtype=torch.float32).")
        if result_dtype in _LOW_PRECISION:  # torch computes 16-bit softmax in float32
            x = record("to", x, torch.float32)
        peak = record("amax", x, dim, True)
        shifted = record("sub", x, peak)
        exps = record("exp", shifted)
        total = record("sum", exps, dim, True)
        out = record("sub", shifted, record("log", total)) if log else record("div", exps, total)
        if result_dtype in _LOW_PRECISION:
            out = record("to", out, result_dtype)
        return out

    return expand


def _softmin(call: Call, record: Record) -> Any:
    """F.softmin(x, dim): softmax of -x, as torch writes it."""
    x, dim, dtype = _softmax_arguments(call)
    negated = record("neg", x)
    return _softmax(log=False)(replace(call, args=(negated, dim), kwargs={} if dtype is None else {"dtype": dtype}),
                               record)


def _masked_fill(call: Call, record: Record) -> Any:
    """x.masked_fill(mask, value): torch.where(mask, value, x) in x's dtype (a float value
    filled into an int tensor truncates, as masked_fill's own cast does)."""
    args, kwargs = list(call.args), dict(call.kwargs)
    names = ("input", "mask", "value")
    given = dict(zip(names, args))
    unknown = set(kwargs) - set(names)
    if unknown or len(args) > 3:
        raise exc.UnsupportedOperation(f"{call.display} takes (input, mask, value), got an unsupported argument.")
    given.update(kwargs)
    x, mask, value = (given.get(name) for name in names)
    source = call.meta_of(x)
    refusal = number_refusal("masked_fill", value, source.dtype) if isinstance(value, (int, float)) and isinstance(
        source, torch.Tensor) else None  # its conversion (meta runs skip it)
    if refusal is not None:
        raise dtype_refusal(call.display, [x], RuntimeError(refusal))
    meta = call.run_meta(lambda t, m, v: t.masked_fill(m, v), (x, mask, value), {})  # torch's own checks
    filled = record("where", mask, value, x)
    meta_filled = call.meta_of(filled)
    if isinstance(meta_filled, torch.Tensor) and meta_filled.dtype != meta.dtype:
        filled = record("to", filled, meta.dtype)
    return filled


COMPOSITE_DEFINITIONS = (
    Composite("masked_fill", ("masked_fill",), _masked_fill, dtypes=EVERY_DTYPE,
              note="torch.where(mask, value, x) in x's dtype; the mask broadcasts to x"),
    Composite("softmax", ("softmax",), _softmax(log=False), dtypes=FLOATS,
              note="dim= required; max-shifted; 16-bit inputs compute in float32, rounded once; "
                   "dtype= as in torch"),
    Composite("softmin", ("softmin",), _softmin, dtypes=FLOATS, note="softmax of -x; dim= required"),
    Composite("log_softmax", ("log_softmax",), _softmax(log=True), dtypes=FLOATS,
              note="dim= required; max-shifted; 16-bit inputs compute in float32, rounded once; "
                   "dtype= as in torch"),
    *STATISTIC_DEFINITIONS,
    *NORM_DEFINITIONS,
    *POINTWISE_COMPOSITES,
    *SCAN_DEFINITIONS,
    *SHAPE_DEFINITIONS,
    *ORDERING_DEFINITIONS,
)
