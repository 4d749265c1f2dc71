"""Small torch functions that are a few registry ops, step for step as torch computes them.

`F.softsign` is torch's own Python `x / (x.abs() + 1)`; `F.hardshrink` and `F.threshold`
compare as torch's kernels do (NaN is kept: it fails every comparison; hardshrink rounds its
lambd to a 16-bit x's dtype, threshold compares in float32); `torch.fmax` /
`fmin` take the other operand where one is NaN; `Tensor.type_as` is a cast; `torch.nansum`
sums with NaN as 0 (floats only: an integer nansum is `.sum()`). `F.selu` and `F.celu` are
torch's elu kernel (`x * scale` above 0, `expm1(x * input_scale) * alpha * scale` below), in
float32 for 16-bit values; `torch.logit` is `log(x / (1 - x))` with each step in x's dtype (as
torch's kernel rounds a 16-bit x's); `torch.isclose` is torch's own program; deg2rad/rad2deg
multiply by torch's constant, heaviside selects, sinc is `sin(pi x) / (pi x)` with 1 at 0.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from ... import exc
from .binders import dtype_refusal, normalize_dims, number_refusal
from .definition import EVERY_DTYPE, FLOATS, NUMBERS, Call, Composite, Record

_LOW_PRECISION = (torch.bfloat16, torch.float16)


def bound_arguments(call: Call, names: tuple[str, ...], defaults: dict[str, Any],
                    numbers: tuple[str, ...] = ()) -> list[Any]:
    """The call's arguments by `names` (positional, then keyword), `defaults` for the missing;
    those named in `numbers` are parameters of the generated code (`call.constant_of`: a
    kernel argument there is a constant of the variant)."""
    args, kwargs = list(call.args), dict(call.kwargs)
    if "out" in kwargs and kwargs["out"] is None:  # torch's Python functions pass it on
        del kwargs["out"]
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
    return [call.constant_of(values[name], name) if name in numbers and name in values else
            values.get(name, defaults.get(name)) for name in names]


def _floats(call: Call, x: Any) -> torch.Tensor:
    meta = call.meta_of(x)
    if not isinstance(meta, torch.Tensor) or not meta.dtype.is_floating_point:
        raise exc.UnsupportedDtype(f"{call.display} takes a float tensor (torch's rule); cast it first.")
    return meta


def _softsign(call: Call, record: Record) -> Any:
    (x,) = bound_arguments(call, ("input",), {})
    if call.meta_of(x).dtype == torch.bool:  # torch's abs refuses bool; integers divide to float32
        raise exc.UnsupportedDtype(f"{call.display} of bool: torch refuses it (abs of bool); cast it first.")
    return record("div", x, record("add", record("abs", x), 1))


def _hardshrink(call: Call, record: Record) -> Any:
    x, lambd = bound_arguments(call, ("input", "lambd"), {"lambd": 0.5}, numbers=("lambd",))
    _floats(call, x)
    _refused_number(call, "hardshrink", lambd, call.meta_of(x).dtype)
    inside = record("bitwise_and", record("ge", x, -lambd), record("le", x, lambd))
    return record("where", inside, 0.0, x)


def _softshrink(call: Call, record: Record) -> Any:
    """torch's kernel: x > l ? x - l : x < -l ? x + l : x * 0 (NaN and -0.0 kept), 16-bit
    values in float32, rounded once; lambda within [0, the dtype's max] (torch checks it)."""
    x, lambd = bound_arguments(call, ("input", "lambd"), {"lambd": 0.5}, numbers=("lambd",))
    dtype = _floats(call, x).dtype
    err = _cpu_kernel_error(lambda zeros: torch.nn.functional.softshrink(zeros, lambd), dtype)
    if err is not None:
        raise exc.ShapeMismatch(f"{call.display}: {str(err).splitlines()[0]}")
    wide = x if dtype == torch.float32 else record("to", x, torch.float32)
    inner = record("where", record("lt", wide, -lambd), record("add", wide, lambd), record("mul", wide, 0))
    value = record("where", record("gt", wide, lambd), record("sub", wide, lambd), inner)
    return value if dtype == torch.float32 else record("to", value, dtype)


def _cpu_kernel_error(run, dtype: torch.dtype) -> RuntimeError | None:
    """torch's error running `run` on two zeros of `dtype` (its checks of the dtype and the
    numbers live in its CPU kernel, which meta tensors skip), or None. NotImplementedError too."""
    try:
        with torch._C.DisableTorchFunction():
            run(torch.zeros(2, dtype=dtype))
    except RuntimeError as err:
        return err
    return None


def _refused_number(call: Call, rule: str, number: Any, dtype: torch.dtype) -> None:
    """torch's refusal of a number `dtype` cannot hold (hardshrink's lambda 1e5 of float16)."""
    refusal = number_refusal(rule, number, dtype)
    if refusal is not None:
        raise dtype_refusal(call.display, [call.meta_of(call.args[0])], RuntimeError(refusal))


def _threshold(call: Call, record: Record) -> Any:
    x, threshold, value, _ = bound_arguments(call, ("input", "threshold", "value", "inplace"), {"inplace": False},
                                             numbers=("threshold",))
    meta = call.meta_of(x)
    numbers = [n if isinstance(n, (int, float)) else 0 for n in (threshold, value)]  # a runtime value: its call's
    err = _cpu_kernel_error(lambda zeros: torch.nn.functional.threshold(zeros, *numbers), meta.dtype)
    if err is not None:
        raise dtype_refusal(call.display, [meta], err)
    compared = x  # torch's kernel compares a 16-bit x with the threshold in float32 (hardshrink's rounds it)
    if isinstance(meta, torch.Tensor) and meta.dtype in (torch.bfloat16, torch.float16):
        compared = record("to", x, torch.float32)
    if not meta.dtype.is_floating_point:  # an integer x's kernel takes both numbers truncated to its dtype
        threshold, value = int(threshold), int(call.constant_of(value, "value"))
    return record("where", record("le", compared, threshold), value, x)


def _fextreme(op: str):
    def expand(call: Call, record: Record) -> Any:
        a, b = bound_arguments(call, ("input", "other"), {})
        both = record(op, a, b)
        metas = [call.meta_of(item) for item in (a, b)]
        if not any(isinstance(m, torch.Tensor) and m.dtype.is_floating_point for m in metas):
            return both
        return record("where", record("isnan", a), b, record("where", record("isnan", b), a, both))

    return expand


def _type_as(call: Call, record: Record) -> Any:
    x, other = bound_arguments(call, ("input", "other"), {})
    target = call.meta_of(other)
    if not isinstance(target, torch.Tensor):
        raise exc.UnsupportedOperation(f"{call.display} takes a tensor to cast like, got {other!r}.")
    return record("to", x, target.dtype)


def _nansum(call: Call, record: Record) -> Any:
    x, dim, keepdim, dtype = bound_arguments(call, ("input", "dim", "keepdim", "dtype"), {"dim": None, "keepdim": False,
                                                                                  "dtype": None},
                                           numbers=("dim", "keepdim"))
    _floats(call, x)
    if dtype is not None:
        x = record("to", x, dtype)
    dims = normalize_dims(dim, call.rank_of(x))
    dims = tuple(range(call.rank_of(x))) if dims is None else dims
    return record("sum", record("where", record("isnan", x), 0.0, x), dims, bool(keepdim))


def _widened(call: Call, record: Record, x: Any) -> tuple[Any, torch.dtype]:
    """x in float32 if it is a 16-bit float (torch's kernels compute those in float32 and
    round once), and its own dtype."""
    dtype = _floats(call, x).dtype
    return (record("to", x, torch.float32) if dtype in _LOW_PRECISION else x), dtype


def _rounded(record: Record, value: Any, dtype: torch.dtype) -> Any:
    return record("to", value, dtype) if dtype in _LOW_PRECISION else value


def _scaled_elu(call: Call, record: Record, x: Any, scale: float, alpha: float, input_scale: float) -> Any:
    """torch's elu kernel: x * scale where x > 0, else expm1(x * input_scale) * alpha * scale."""
    wide, dtype = _widened(call, record, x)
    negative = record("expm1", wide if input_scale == 1 else record("mul", wide, input_scale))
    out = record("where", record("gt", wide, 0), wide if scale == 1 else record("mul", wide, scale),
                 record("mul", negative, alpha * scale))
    return _rounded(record, out, dtype)


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def _selu(call: Call, record: Record) -> Any:
    x, _ = bound_arguments(call, ("input", "inplace"), {"inplace": False})
    return _scaled_elu(call, record, x, _SELU_SCALE, _SELU_ALPHA, 1.0)


def _celu(call: Call, record: Record) -> Any:
    x, alpha, _ = bound_arguments(call, ("input", "alpha", "inplace"), {"alpha": 1.0, "inplace": False},
                                  numbers=("alpha",))
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        raise exc.UnsupportedOperation(f"{call.display}: alpha must be a Python number, got {alpha!r}.")
    if alpha == 0:
        raise exc.UnsupportedOperation(f"{call.display}: alpha=0 divides by zero (torch refuses it too).")
    return _scaled_elu(call, record, x, 1.0, float(alpha), 1.0 / float(alpha))


def _logit(call: Call, record: Record) -> Any:
    """log(x / (1 - x)), each step in x's dtype (torch's kernel rounds a 16-bit x's every step)."""
    x, eps = bound_arguments(call, ("input", "eps"), {"eps": None}, numbers=("eps",))
    if not call.meta_of(x).dtype.is_floating_point:  # integers and bools: in float32, as torch
        x = record("to", x, torch.float32)
    if eps is not None:
        _refused_number(call, "logit", eps, call.meta_of(x).dtype)
    if eps is not None and eps >= 0:  # torch's kernel: eps in x's dtype, x < lo ? lo : x > 1 - lo ? 1 - lo : x
        low = float(torch.tensor(float(eps), dtype=torch.float32).to(call.meta_of(x).dtype))
        high = float(torch.tensor(1.0 - low, dtype=torch.float32).to(call.meta_of(x).dtype))
        x = record("where", record("lt", x, low), low, record("where", record("gt", x, high), high, x))
    return record("log", record("div", x, record("rsub", x, 1.0)))


def _isclose(call: Call, record: Record) -> Any:
    """torch's own program: a == b, or both NaN (equal_nan), or a finite |a - b| within
    atol + |rtol * b| (integers and bools measured in float32, as torch does)."""
    a, b, rtol, atol, equal_nan = bound_arguments(call, ("input", "other", "rtol", "atol", "equal_nan"), {
        "rtol": 1e-05, "atol": 1e-08, "equal_nan": False}, numbers=("rtol", "atol", "equal_nan"))
    call.run_meta(lambda s, o: torch.isclose(s, o, rtol, atol, equal_nan), (a, b), {})  # same dtypes, tolerances
    dtype = call.meta_of(a).dtype
    close = record("eq", a, b)
    if equal_nan and dtype.is_floating_point:
        close = record("bitwise_or", close, record("bitwise_and", record("isnan", a), record("isnan", b)))
    if rtol == 0 and atol == 0:
        return close
    if not dtype.is_floating_point:  # torch measures integers' and bools' error in float32 (no wrapping)
        a, b = record("to", a, torch.float32), record("to", b, torch.float32)
    allowed = record("add", record("abs", record("mul", b, float(rtol))), float(atol))
    actual = record("abs", record("sub", a, b))
    within = record("bitwise_and", record("isfinite", actual), record("le", actual, allowed))
    return record("bitwise_or", close, within)


def _angle(factor: float):
    def expand(call: Call, record: Record) -> Any:
        """torch.deg2rad / rad2deg: x times torch's constant (a 16-bit x's product in float32,
        rounded once, as torch multiplies by a number); integers give float32."""
        (x,) = bound_arguments(call, ("input",), {})
        call.run_meta(lambda t: torch.deg2rad(t) if factor < 1 else torch.rad2deg(t), (x,), {})
        meta = call.meta_of(x)
        if not meta.dtype.is_floating_point:
            x = record("to", x, torch.float32)
        return record("mul", x, factor)

    return expand


def _heaviside(call: Call, record: Record) -> Any:
    """torch.heaviside: `values` where x is 0, else x > 0 (NaN gives 0, as torch's kernel)."""
    x, values = bound_arguments(call, ("input", "values"), {})
    out = call.run_meta(torch.heaviside, (x, values), {})
    if getattr(call.meta_of(values), "dtype", out.dtype) != call.meta_of(x).dtype:  # torch's CPU kernel's check
        raise dtype_refusal(call.display, [call.meta_of(x), call.meta_of(values)], RuntimeError(
            "heaviside is not yet implemented for tensors with different dtypes"))
    return record("to", record("where", record("eq", x, 0), values, record("gt", x, 0)), out.dtype)


def _sinc(call: Call, record: Record) -> Any:
    """torch.sinc: sin(pi x) / (pi x), 1 at 0; 16-bit values in float32, rounded once."""
    (x,) = bound_arguments(call, ("input",), {})
    out = call.run_meta(torch.sinc, (x,), {})
    wide = x if call.meta_of(x).dtype == torch.float32 else record("to", x, torch.float32)
    product = record("mul", wide, math.pi)
    value = record("where", record("eq", wide, 0), 1.0, record("div", record("sin", product), product))
    return value if out.dtype == torch.float32 else record("to", value, out.dtype)


POINTWISE_COMPOSITES = (
    Composite("softsign", ("softsign",), _softsign, dtypes=NUMBERS,
              note="x / (abs(x) + 1), as torch writes it (integers give float32)"),
    Composite("hardshrink", ("hardshrink",), _hardshrink, dtypes=FLOATS, note="NaN kept"),
    Composite("softshrink", ("softshrink",), _softshrink, dtypes=FLOATS,
              note="x -/+ lambd beyond it, else x * 0 (NaN kept); 16-bit values in float32, rounded once"),
    Composite("threshold", ("threshold",), _threshold, dtypes=NUMBERS, note="x <= threshold gives value; NaN kept"),
    Composite("fmax", ("fmax",), _fextreme("maximum"), dtypes=NUMBERS, note="the other operand where one is NaN"),
    Composite("fmin", ("fmin",), _fextreme("minimum"), dtypes=NUMBERS, note="the other operand where one is NaN"),
    Composite("type_as", ("type_as",), _type_as, dtypes=EVERY_DTYPE, note="a cast to the other tensor's dtype"),
    Composite("nansum", ("nansum",), _nansum, dtypes=FLOATS, note="NaN counts as 0; floats only (ints: .sum())"),
    Composite("selu", ("selu",), _selu, dtypes=FLOATS, note="torch's elu kernel with SELU's scale and alpha"),
    Composite("celu", ("celu",), _celu, dtypes=FLOATS, note="alpha=; expm1(x / alpha) * alpha below 0"),
    Composite("logit", ("logit",), _logit, dtypes=EVERY_DTYPE,
              note="log(x / (1 - x)); eps= clamps x first; integers and bools give float32"),
    Composite("deg2rad", ("deg2rad",), _angle(math.pi / 180), dtypes=EVERY_DTYPE, note="x * (pi / 180)"),
    Composite("rad2deg", ("rad2deg",), _angle(180 / math.pi), dtypes=EVERY_DTYPE, note="x * (180 / pi)"),
    Composite("heaviside", ("heaviside",), _heaviside, dtypes=NUMBERS,
              note="values where x is 0, else x > 0 (NaN gives 0, as torch)"),
    Composite("sinc", ("sinc",), _sinc, dtypes=EVERY_DTYPE, note="sin(pi x) / (pi x), 1 at 0; in float32"),
    Composite("isclose", ("isclose",), _isclose, dtypes=EVERY_DTYPE,
              note="rtol=, atol=, equal_nan=, torch's program: equal, or finite |a - b| <= atol + |rtol * b|"),
)
