"""Small torch functions that are a few registry ops, step for step as torch computes them.

`F.softsign` is torch's own Python `x / (x.abs() + 1)`; `F.hardshrink` and `F.threshold`
compare as torch's kernels do (NaN is kept: it fails every comparison; hardshrink rounds its
lambd to a 16-bit x's dtype, threshold compares in float32); `torch.fmax` /
`fmin` take the other operand where one is NaN; `Tensor.type_as` is a cast; `torch.nansum`
sums with NaN as 0 (floats only: an integer nansum is `.sum()`).
"""
from __future__ import annotations

from typing import Any

import torch

from ... import exc
from .binders import normalize_dims
from .definition import EVERY_DTYPE, FLOATS, NUMBERS, Call, Composite, Record


def _bound(call: Call, names: tuple[str, ...], defaults: dict[str, Any]) -> list[Any]:
    """The call's arguments by `names` (positional, then keyword), `defaults` for the missing."""
    args, kwargs = list(call.args), dict(call.kwargs)
    if len(args) > len(names) or set(kwargs) - set(names):
        extra = sorted(set(kwargs) - set(names))
        raise exc.UnsupportedOperation(f"{call.display}() got an unsupported argument "
                                       f"{extra[0]!r}." if extra else f"Too many arguments to {call.display}.")
    values = dict(zip(names, args))
    for name, value in kwargs.items():
        if name in values:
            raise exc.UnsupportedOperation(f"{call.display}() got {name!r} twice.")
        values[name] = value
    missing = [name for name in names if name not in values and name not in defaults]
    if missing:
        raise exc.UnsupportedOperation(f"{call.display}() needs {missing[0]!r}.")
    return [values.get(name, defaults.get(name)) for name in names]


def _floats(call: Call, x: Any) -> torch.Tensor:
    meta = call.meta_of(x)
    if not isinstance(meta, torch.Tensor) or not meta.dtype.is_floating_point:
        raise exc.UnsupportedDtype(f"{call.display} takes a float tensor (torch's rule); cast it first.")
    return meta


def _softsign(call: Call, record: Record) -> Any:
    (x,) = _bound(call, ("input",), {})
    _floats(call, x)
    return record("div", x, record("add", record("abs", x), 1))


def _hardshrink(call: Call, record: Record) -> Any:
    x, lambd = _bound(call, ("input", "lambd"), {"lambd": 0.5})
    _floats(call, x)
    inside = record("bitwise_and", record("ge", x, -lambd), record("le", x, lambd))
    return record("where", inside, 0.0, x)


def _threshold(call: Call, record: Record) -> Any:
    x, threshold, value, _ = _bound(call, ("input", "threshold", "value", "inplace"), {"inplace": False})
    meta = call.meta_of(x)
    compared = x  # torch's kernel compares a 16-bit x with the threshold in float32 (hardshrink's rounds it)
    if isinstance(meta, torch.Tensor) and meta.dtype in (torch.bfloat16, torch.float16):
        compared = record("to", x, torch.float32)
    return record("where", record("le", compared, threshold), value, x)


def _fextreme(op: str):
    def expand(call: Call, record: Record) -> Any:
        a, b = _bound(call, ("input", "other"), {})
        both = record(op, a, b)
        metas = [call.meta_of(item) for item in (a, b)]
        if not any(isinstance(m, torch.Tensor) and m.dtype.is_floating_point for m in metas):
            return both
        return record("where", record("isnan", a), b, record("where", record("isnan", b), a, both))

    return expand


def _type_as(call: Call, record: Record) -> Any:
    x, other = _bound(call, ("input", "other"), {})
    target = call.meta_of(other)
    if not isinstance(target, torch.Tensor):
        raise exc.UnsupportedOperation(f"{call.display} takes a tensor to cast like, got {other!r}.")
    return record("to", x, target.dtype)


def _nansum(call: Call, record: Record) -> Any:
    x, dim, keepdim, dtype = _bound(call, ("input", "dim", "keepdim", "dtype"), {"dim": None, "keepdim": False,
                                                                                  "dtype": None})
    _floats(call, x)
    if dtype is not None:
        x = record("to", x, dtype)
    dims = normalize_dims(dim, call.rank_of(x))
    dims = tuple(range(call.rank_of(x))) if dims is None else dims
    return record("sum", record("where", record("isnan", x), 0.0, x), dims, bool(keepdim))


POINTWISE_COMPOSITES = (
    Composite("softsign", ("softsign",), _softsign, dtypes=FLOATS, note="x / (abs(x) + 1), as torch writes it"),
    Composite("hardshrink", ("hardshrink",), _hardshrink, dtypes=FLOATS, note="NaN kept"),
    Composite("threshold", ("threshold",), _threshold, dtypes=NUMBERS, note="x <= threshold gives value; NaN kept"),
    Composite("fmax", ("fmax",), _fextreme("maximum"), dtypes=NUMBERS, note="the other operand where one is NaN"),
    Composite("fmin", ("fmin",), _fextreme("minimum"), dtypes=NUMBERS, note="the other operand where one is NaN"),
    Composite("type_as", ("type_as",), _type_as, dtypes=EVERY_DTYPE, note="a cast to the other tensor's dtype"),
    Composite("nansum", ("nansum",), _nansum, dtypes=FLOATS, note="NaN counts as 0; floats only (ints: .sum())"),
)
