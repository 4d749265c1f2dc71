"""The op definitions, one entry per IR op, and the torch allocations.

Grouped by kind. An entry lists the torch spellings that record it (the
op's own name first), its IR signature, and, where torch's function does not
fit, its shape rule. Lowering rules live in `codegen/lowering.py`, keyed by
the same names; `tests/test_op_registry.py` checks that the two agree.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import torch

from ... import exc
from . import binders
from .binders import by_signature
from .definition import (
    BITS, EVERY_DTYPE, FLOATS, INTEGERS, NUMBERS, BINARY, FILL_ARGUMENT, REDUCE, REQUIRED, UNARY, Accumulator, Binder, Contraction, Elementwise, Factory, OpDef,
    OpKind, Partials, PythonOperator, Reduction, ScalarArithmetic, Signature, Spelling, ViewRule,
)


def _spellings(names: tuple) -> tuple[Spelling, ...]:
    return tuple(n if isinstance(n, Spelling) else Spelling(n) for n in names)


def _op(name: str, kind: OpKind, *aliases: str | Spelling, bind: Binder = by_signature,
        spelled: bool = True, **fields: Any) -> OpDef:
    """An entry whose spellings are its own name (if `spelled`) and `aliases`."""
    names = ((name,) if spelled else ()) + aliases
    return OpDef(name, kind, bind, _spellings(names), **fields)


def _elementwise(name: str, facts: Elementwise, *aliases: str | Spelling, **fields: Any) -> OpDef:
    return _op(name, OpKind.ELEMENTWISE, *aliases, elementwise=facts, **fields)


# ---------------------------------------------------------- shape rules --


def _scalar_tensor(value: Any, device: torch.device) -> Any:
    if isinstance(value, bool):
        return torch.empty((), dtype=torch.bool, device=device)
    if isinstance(value, int):
        return torch.empty((), dtype=torch.int32, device=device)
    if isinstance(value, float):
        return torch.empty((), dtype=torch.float32, device=device)
    return value


def _refusing_bool(function: Callable) -> Callable:
    """torch's subtraction refuses a bool tensor operand in its CPU kernel, which meta tensors
    never reach: the shape rule raises torch's error itself."""

    def meta(input, other, alpha=1):  # noqa: A002 - torch's parameter names: its keywords reach the rule
        if any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in (input, other)):
            raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. If you are "
                               "trying to invert a mask, use the `~` or `logical_not()` operator instead.")
        return function(input, other) if alpha == 1 else function(input, other, alpha=alpha)

    return meta


def _addcdiv(input, tensor1, tensor2, value=1):  # noqa: A002 - torch's parameter names: its keywords reach the rule
    """torch.addcdiv's shape rule, with its CPU kernel's refusal of integer (and bool) factors,
    which meta tensors skip for bools."""
    if all(isinstance(t, torch.Tensor) and not t.dtype.is_floating_point for t in (tensor1, tensor2)):
        raise RuntimeError("Integer division with addcdiv is no longer supported: cast tensor1 or tensor2 to a "
                           "float dtype (torch refuses it).")
    return torch.addcdiv(input, tensor1, tensor2, value=value)


def _with_scalar_tensors(function: Callable) -> Callable:
    """torch.maximum/minimum/atan2 take tensors only: Python scalars become 0-d tensors
    (on the other operand's device: the rule also runs on CPU probes, `binders.on_probes`)."""

    def meta(input, other):  # noqa: A002 - torch's parameter names: its keywords reach the rule
        device = next((t.device for t in (input, other) if isinstance(t, torch.Tensor)), torch.device("meta"))
        return function(_scalar_tensor(input, device), _scalar_tensor(other, device))

    return meta


def _clamp(input, min=None, max=None):  # noqa: A002 - torch's parameter names
    return torch.clamp(input, min=min, max=max)


def _pow(input, exponent):  # noqa: A002 - torch's parameter names: its keywords reach the rule
    return torch.pow(input, exponent)


def _accumulate(function: Callable) -> Callable:
    """Accumulating low-precision products into a wider accumulator is the kernel idiom;
    torch's baddbmm refuses mixed dtypes, so the products take the accumulator's dtype."""

    def accumulate(acc, a, b, **kwargs):
        if isinstance(acc, torch.Tensor) and a.dtype != acc.dtype:
            a, b = a.to(acc.dtype), b.to(acc.dtype)
        return function(acc, a, b, **kwargs)

    return accumulate


_HALF_FLOATS = (torch.bfloat16, torch.float16)


def _out_dtype(function: Callable) -> Callable:
    """The matmul family's `out_dtype=`, by torch's rule: the factors' dtype, or float32 for
    16-bit float factors. Checked here because torch's baddbmm on meta tensors takes
    out_dtype for beta."""

    def meta(*args, out_dtype=None, **kwargs):
        out = function(*args, **kwargs)
        if out_dtype is None:
            return out
        factor = args[-2].dtype
        if out_dtype != factor and not (out_dtype == torch.float32 and factor in _HALF_FLOATS):
            raise exc.UnsupportedDtype(
                f"out_dtype={out_dtype} for {factor} factors: torch allows their own dtype, or "
                "torch.float32 for bfloat16/float16 factors; cast the result with .to(...) instead.")
        return out.to(out_dtype)

    return meta


# ------------------------------------------------------------ elementwise --

# Each elementwise entry states its facts (`Elementwise`), one of these:
VPU = Elementwise(transcendental=False, predicate=False, scalar=None, widened=False)  # arithmetic on the vector ALU
EUP = Elementwise(transcendental=True, predicate=False, scalar=None, widened=True)  # also through the transcendental unit
# a formula of several VPU steps, rounded once for 16-bit floats (lerp, addcmul, hardswish)
FORMULA = Elementwise(transcendental=False, predicate=False, scalar=None, widened=True)
# through the EUP, each step rounded to a 16-bit result's dtype as torch's kernel rounds it (xlogy)
STEPPED = Elementwise(transcendental=True, predicate=False, scalar=None, widened=False)
PREDICATE = Elementwise(transcendental=False, predicate=True, scalar=None, widened=False)  # a bool result, computed in its operands' dtype


def _integer(spelling: str, function: Callable) -> Elementwise:
    """VPU arithmetic that is also integer arithmetic on scalars (`ScalarArithmetic`)."""
    return Elementwise(transcendental=False, predicate=False, scalar=ScalarArithmetic(spelling, function), widened=False)


_INPLACE = {"inplace": False}

_FLOAT_RESULT = "integers and bool compute in float32 (torch's promotion)"
_NO_INPLACE = "inplace=True is refused: assign the result"

UNARY_OPS = (
    _elementwise("neg", VPU, "negative", operator=PythonOperator(operator.neg, "__neg__"), dtypes=NUMBERS),
    _elementwise("pos", VPU, operator=PythonOperator(operator.pos, "__pos__"), dtypes=NUMBERS),
    _elementwise("abs", VPU, "absolute", operator=PythonOperator(operator.abs, "__abs__"), dtypes=NUMBERS),
    *(_elementwise(name, EUP, dtypes=EVERY_DTYPE, note=_FLOAT_RESULT) for name in (
        "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos",
        "tan", "tanh", "sinh", "cosh", "erf", "erfc",
    )),
    _elementwise("reciprocal", EUP, dtypes=EVERY_DTYPE, note=f"1 / x; {_FLOAT_RESULT}"),
    _elementwise("erfinv", EUP, dtypes=EVERY_DTYPE, note=f"within 3 float32 ulps of torch's; {_FLOAT_RESULT}"),
    _elementwise("logsigmoid", EUP, dtypes=FLOATS),
    *(_elementwise(name, VPU, dtypes=NUMBERS, note="identity on integers") for name in ("floor", "ceil")),
    _elementwise("sign", VPU, dtypes=EVERY_DTYPE, note="sign(NaN) is 0, as in torch"),
    _elementwise("square", VPU, dtypes=EVERY_DTYPE),
    *(_elementwise(name, PREDICATE, dtypes=EVERY_DTYPE) for name in (
        "logical_not", "isnan", "isinf", "isfinite", "signbit")),
    _elementwise("asin", EUP, "arcsin", dtypes=EVERY_DTYPE, note=_FLOAT_RESULT),
    _elementwise("acos", EUP, "arccos", dtypes=EVERY_DTYPE, note=_FLOAT_RESULT),
    _elementwise("atan", EUP, "arctan", dtypes=EVERY_DTYPE, note=_FLOAT_RESULT),
    _elementwise("asinh", EUP, "arcsinh", dtypes=EVERY_DTYPE, note=_FLOAT_RESULT),
    _elementwise("acosh", EUP, "arccosh", dtypes=EVERY_DTYPE, note=_FLOAT_RESULT),
    _elementwise("atanh", EUP, "arctanh", dtypes=EVERY_DTYPE, note=_FLOAT_RESULT),
    _elementwise("trunc", VPU, "fix", dtypes=NUMBERS, note="rounds toward 0; identity on integers"),
    _elementwise("frac", VPU, dtypes=FLOATS, note="x - trunc(x): the sign of x"),
    _elementwise("sigmoid", EUP, "expit", dtypes=EVERY_DTYPE, note=_FLOAT_RESULT),
    _elementwise("bitwise_not", VPU, operator=PythonOperator(operator.invert, "__invert__"), dtypes=BITS,
                 note="`~mask` of a bool is logical not"),
    _elementwise("round", VPU, signature=Signature(attrs={"decimals": 0}), dtypes=FLOATS,
                 note="halves round to even, as in torch; decimals= supported"),
    _elementwise("gelu", EUP, signature=Signature(attrs={"approximate": "none"}), dtypes=FLOATS,
                 note="approximate='none' (the erf form, in float32) or 'tanh'"),
    *(_elementwise(name, facts, signature=Signature(attrs=_INPLACE), dtypes=dtypes, note=_NO_INPLACE)
      for name, facts, dtypes in (
          ("relu", VPU, NUMBERS), ("relu6", VPU, NUMBERS), ("silu", EUP, FLOATS), ("mish", EUP, FLOATS),
          ("hardsigmoid", FORMULA, FLOATS), ("hardswish", FORMULA, FLOATS),
    )),
    _elementwise("leaky_relu", VPU, signature=Signature(attrs={"negative_slope": 0.01, **_INPLACE}), dtypes=FLOATS,
                 note=f"negative_slope=; {_NO_INPLACE}"),
    _elementwise("elu", EUP, signature=Signature(attrs={"alpha": 1.0, **_INPLACE}), dtypes=FLOATS,
                 note=f"alpha= (in float32, rounded once); {_NO_INPLACE}"),
    _elementwise("hardtanh", VPU, signature=Signature(attrs={"min_val": -1.0, "max_val": 1.0, **_INPLACE}),
                 dtypes=FLOATS | {torch.int32, torch.int16, torch.int8}, note=f"min_val=, max_val=; {_NO_INPLACE}"),
    _elementwise("softplus", EUP, signature=Signature(attrs={"beta": 1.0, "threshold": 20.0}), dtypes=FLOATS,
                 note="beta=, threshold= as in torch (linear above the threshold)"),
    _elementwise("nan_to_num", VPU, signature=Signature(attrs={"nan": 0.0, "posinf": None, "neginf": None}),
                 dtypes=EVERY_DTYPE, note="nan=, posinf=, neginf= (default: the dtype's finite extremes)"),
)

_ALPHA = Signature(("input", "other"), {"alpha": 1})

BINARY_OPS = (
    _elementwise("add", _integer("+", operator.add), signature=_ALPHA,
                 operator=PythonOperator(operator.add, "__add__", "__radd__"), dtypes=EVERY_DTYPE,
                 note="alpha= supported; operands promote as in torch"),
    _elementwise("sub", _integer("-", operator.sub), "subtract", signature=_ALPHA, meta=_refusing_bool(torch.sub),
                 operator=PythonOperator(_refusing_bool(operator.sub), "__sub__", "__rsub__"), dtypes=NUMBERS,
                 note="alpha= supported"),
    _elementwise("rsub", VPU, signature=_ALPHA, meta=_refusing_bool(torch.rsub), dtypes=NUMBERS, note="other - input"),
    _elementwise("mul", _integer("*", operator.mul), "multiply", signature=BINARY,
                 operator=PythonOperator(operator.mul, "__mul__", "__rmul__"), dtypes=EVERY_DTYPE),
    _elementwise("div", EUP, "true_divide", "divide", signature=Signature(("input", "other"), {"rounding_mode": None}),
                 operator=PythonOperator(operator.truediv, "__truediv__", "__rtruediv__"), dtypes=EVERY_DTYPE,
                 note="integers divide to float32 (true division); rounding_mode='floor' or 'trunc' as in torch; "
                      "interpret mode's quotient is IEEE's, as torch's CPU divides (also by a number or a "
                      "broadcast divisor, which XLA's CPU compiler would multiply by its reciprocal)"),
    _elementwise("floor_divide", _integer("//", operator.floordiv), signature=BINARY,
                 operator=PythonOperator(operator.floordiv, "__floordiv__", "__rfloordiv__"), dtypes=NUMBERS,
                 note="rounds toward -inf, as torch and Python do (not C's truncation)"),
    _elementwise("remainder", _integer("%", operator.mod), signature=BINARY,
                 operator=PythonOperator(operator.mod, "__mod__", "__rmod__"), dtypes=NUMBERS,
                 note="the result has the divisor's sign (Python's %)"),
    _elementwise("pow", EUP, signature=Signature(("input", "exponent")), meta=_pow,
                 operator=PythonOperator(operator.pow, "__pow__", "__rpow__"), dtypes=NUMBERS,
                 note="tensor or Python-number exponent; `2 ** x` too"),
    _elementwise("maximum", _integer("max", max), signature=BINARY, meta=_with_scalar_tensors(torch.maximum),
                 dtypes=EVERY_DTYPE, note="NaN propagates, as in torch; builtin max(a, b) of scalars too"),
    _elementwise("minimum", _integer("min", min), signature=BINARY, meta=_with_scalar_tensors(torch.minimum),
                 dtypes=EVERY_DTYPE, note="NaN propagates, as in torch; builtin min(a, b) of scalars too"),
    _elementwise("atan2", EUP, "arctan2", signature=BINARY, meta=_with_scalar_tensors(torch.atan2),
                 dtypes=EVERY_DTYPE, note=_FLOAT_RESULT),
    _elementwise("fmod", VPU, signature=BINARY, dtypes=NUMBERS, note="the result has the dividend's sign (C's fmod)"),
    *(_elementwise(name, PREDICATE, signature=BINARY, dtypes=EVERY_DTYPE, note="nonzero is true")
      for name in ("logical_and", "logical_or", "logical_xor")),
    _elementwise("copysign", VPU, signature=BINARY, dtypes=EVERY_DTYPE, note=_FLOAT_RESULT),
    _elementwise("hypot", EUP, signature=BINARY, dtypes=FLOATS),
    _elementwise("logaddexp", EUP, signature=BINARY, dtypes=FLOATS,
                 note="max + log1p(exp(-|a - b|)): no overflow; equal infinities give themselves"),
    _elementwise("xlogy", STEPPED, signature=BINARY, meta=_with_scalar_tensors(torch.xlogy),
                 dtypes=EVERY_DTYPE, note=f"0 where x is 0 (NaN where y is NaN); {_FLOAT_RESULT}; 16-bit: the "
                                          "log rounded, then the product, as torch"),
    _elementwise("bitwise_and", VPU, signature=BINARY,
                 operator=PythonOperator(operator.and_, "__and__", "__rand__"), dtypes=BITS),
    _elementwise("bitwise_or", VPU, signature=BINARY,
                 operator=PythonOperator(operator.or_, "__or__", "__ror__"), dtypes=BITS),
    _elementwise("bitwise_xor", VPU, signature=BINARY,
                 operator=PythonOperator(operator.xor, "__xor__", "__rxor__"), dtypes=BITS),
    _elementwise("bitwise_left_shift", VPU, signature=BINARY,
                 operator=PythonOperator(operator.lshift, "__lshift__", "__rlshift__"), dtypes=INTEGERS),
    _elementwise("bitwise_right_shift", VPU, signature=BINARY,
                 operator=PythonOperator(operator.rshift, "__rshift__", "__rrshift__"), dtypes=INTEGERS,
                 note="arithmetic shift of signed integers, as in torch"),
)

COMPARISON_OPS = tuple(
    _elementwise(name, PREDICATE, *aliases, signature=BINARY, operator=PythonOperator(function, f"__{name}__"),
                 dtypes=EVERY_DTYPE, note="compared in the operands' promoted dtype; NaN compares unequal")
    for name, function, aliases in (
        ("lt", operator.lt, ("less",)), ("le", operator.le, ("less_equal",)),
        ("gt", operator.gt, ("greater",)), ("ge", operator.ge, ("greater_equal",)),
        ("eq", operator.eq, ()), ("ne", operator.ne, ("not_equal",)),
    )
)

_CAST_METHODS = {
    "float": torch.float32, "bfloat16": torch.bfloat16, "half": torch.float16,
    "int": torch.int32, "bool": torch.bool, "double": torch.float64, "long": torch.int64,
}

OTHER_ELEMENTWISE_OPS = (
    _elementwise("where", VPU, signature=Signature(("condition", "input", "other")), meta=torch.where,
                 dtypes=EVERY_DTYPE, note="a bool condition; the two values (tensors or numbers) promote as in torch"),
    _elementwise("clamp", VPU, "clip", Spelling("clamp_min", binders.one_sided_clamp("min")),
                 Spelling("clamp_max", binders.one_sided_clamp("max")),
                 signature=Signature(("input", "min", "max"), optional=frozenset({"min", "max"})), meta=_clamp,
                 dtypes=NUMBERS, note="min=/max= numbers or tensors; clamp_min/clamp_max are one-sided"),
    _elementwise("lerp", FORMULA, signature=Signature(("input", "end", "weight")), dtypes=FLOATS,
                 note="torch's two-sided formula: exact at weight 0 and 1"),
    _elementwise("addcmul", FORMULA, signature=Signature(("input", "tensor1", "tensor2"), {"value": 1}), dtypes=NUMBERS,
                 note="value= supported"),
    _elementwise("addcdiv", EUP, signature=Signature(("input", "tensor1", "tensor2"), {"value": 1}), meta=_addcdiv,
                 dtypes=FLOATS,
                 note="value= supported"),
    _elementwise("to", VPU, "type", *(Spelling(method, binders.cast_to(dtype)) for method, dtype in _CAST_METHODS.items()),
                 bind=binders.cast, signature=Signature(attrs={"dtype": REQUIRED}), dtypes=EVERY_DTYPE,
                 note="also .float(), .half(), .int(), ...; float to integer rounds toward 0 and saturates out of "
                      "range (torch calls that undefined; its CPU wraps); float64 is refused"),
)

# ------------------------------------------------------------- reductions --


def _reduction(name: str, facts: Reduction, *aliases: Spelling, tuple_dims: bool = False,
               signature: Signature = REDUCE, **fields: Any) -> OpDef:
    return _op(name, OpKind.REDUCTION, *aliases, bind=binders.reduction(tuple_dims), signature=signature,
               reduction=facts, **fields)


_INF = float("inf")
_SOURCE, _RESULT, _WIDENED = Accumulator.SOURCE, Accumulator.RESULT, Accumulator.WIDENED

# The reductions a chunk loop can carry (`partials`) first: reduction_loops names them in this order.
REDUCTION_OPS = (
    _reduction("sum", Reduction(identity=0, averages=False, flat_index=False, accumulator=_RESULT,
                                partials=Partials.ADD, transcendental=False), tuple_dims=True,
               dtypes=EVERY_DTYPE, note="dim= an int or a list, keepdim=, dtype=; an integer sum is torch's int64 "
                    "number in int32, checked to fit in interpret mode (`dtype=torch.int32`: wraps, as torch)"),
    _reduction("mean", Reduction(identity=0, averages=True, flat_index=False, accumulator=_RESULT,
                                 partials=Partials.ADD, transcendental=False), tuple_dims=True,
               dtypes=FLOATS, note="dim= an int or a list, keepdim=, dtype=; divides by the count of valid elements (a partial tile's "
                    "padding is not counted)"),
    _reduction("amax", Reduction(identity=-_INF, averages=False, flat_index=False, accumulator=_SOURCE,
                                 partials=Partials.MAXIMUM, transcendental=False),
               Spelling("max", binders.max_min("amax", "argmax", "maximum", torch.return_types.max)),
               tuple_dims=True, dtypes=EVERY_DTYPE,
               note="dim= an int or a list; torch.max(x, dim) gives (values, indices); torch.max(a, b) is maximum"),
    _reduction("amin", Reduction(identity=_INF, averages=False, flat_index=False, accumulator=_SOURCE,
                                 partials=Partials.MINIMUM, transcendental=False),
               Spelling("min", binders.max_min("amin", "argmin", "minimum", torch.return_types.min)),
               tuple_dims=True, dtypes=EVERY_DTYPE,
               note="dim= an int or a list; torch.min(x, dim) gives (values, indices); torch.min(a, b) is minimum"),
    _reduction("prod", Reduction(identity=1, averages=False, flat_index=False, accumulator=_RESULT,
                                 partials=Partials.MULTIPLY, transcendental=False),
               dtypes=EVERY_DTYPE, note="dim= one int, keepdim=, dtype="),
    _reduction("argmax", Reduction(identity=-_INF, averages=False, flat_index=True, accumulator=_SOURCE,
                                   partials=Partials.ARGMAX, transcendental=False),
               dtypes=NUMBERS, note="ties: the lowest index, as in torch; without dim, the flat index of the "
                                    "valid elements; int32 result"),
    _reduction("argmin", Reduction(identity=_INF, averages=False, flat_index=True, accumulator=_SOURCE,
                                   partials=Partials.ARGMIN, transcendental=False),
               dtypes=NUMBERS, note="ties: the lowest index, as in torch; without dim, the flat index of the "
                                    "valid elements; int32 result"),
    _reduction("logsumexp", Reduction(identity=-_INF, averages=False, flat_index=False, accumulator=_WIDENED,
                                      partials=None, transcendental=True),
               tuple_dims=True, signature=Signature(attrs={"dim": REQUIRED, "keepdim": False}),
               dtypes=EVERY_DTYPE, note=f"dim= required (an int or a list); max-shifted; {_FLOAT_RESULT}"),
    _reduction("all", Reduction(identity=True, averages=False, flat_index=False, accumulator=_SOURCE,
                                partials=Partials.ALL, transcendental=False), dtypes=EVERY_DTYPE, note="nonzero is true"),
    _reduction("any", Reduction(identity=False, averages=False, flat_index=False, accumulator=_SOURCE,
                                partials=Partials.ANY, transcendental=False), dtypes=EVERY_DTYPE, note="nonzero is true"),
)

# ---------------------------------------------------------------- indexed --

# torch.gather(input, dim, index): out[..., j, ...] = input[..., index[..., j, ...], ...] along
# `dim`. The frontend also records it for subscripts with several index tensors
# (`x[t.index, labels[t]]`: the rows of the first, then one position per lane of the others).
INDEXED_OPS = (
    _op("gather", OpKind.INDEXED, bind=binders.gather_dim,
        signature=Signature(("input", "index"), {"dim": REQUIRED}), dtypes=EVERY_DTYPE,
        note="torch.gather(x, dim, index) of a device value, index int32; the gathered axis must hold no "
             "partial tile's padding; index values are range-checked in interpret mode; exact bit for bit"),
)

# ------------------------------------------------------------------ views --


def _view(name: str, rule: ViewRule, *spellings: Spelling, signature: Signature = UNARY, note: str = "") -> OpDef:
    return OpDef(name, OpKind.VIEW, binders.unbound, spellings, signature, view=rule, dtypes=EVERY_DTYPE, note=note)


_RESHAPE = binders.view(binders.result_shape)
_SWAP = binders.view(binders.swap_dims)

VIEW_OPS = (
    _view("reshape", ViewRule.RESHAPE,
          *(Spelling(name, binders.sized_view) for name in ("reshape", "view")),
          *(Spelling(name, _RESHAPE) for name in ("flatten", "squeeze", "unsqueeze", "view_as", "reshape_as")),
          Spelling("unflatten", binders.unflattened_view),
          signature=Signature(attrs={"shape": REQUIRED}),
          note="sizes may be tiles (their block size); an axis a partial tile pads moves whole, it is not "
               "merged or split; view(dtype) is refused"),
    _view("expand", ViewRule.BROADCAST, Spelling("expand", binders.sized_view),
          Spelling("broadcast_to", binders.sized_view),
          Spelling("broadcast_tensors", binders.broadcast_all), Spelling("expand_as", _RESHAPE),
          signature=Signature(attrs={"shape": REQUIRED}), note="sizes may be tiles (their block size)"),
    _view("permute", ViewRule.PERMUTE,
          Spelling("permute", binders.view(binders.permute_dims)),
          Spelling("transpose", _SWAP), Spelling("swapaxes", _SWAP), Spelling("swapdims", _SWAP),
          Spelling("t", binders.view(binders.matrix_transpose)),
          *(Spelling(name, binders.view(binders.moved_dims)) for name in ("movedim", "moveaxis")),
          signature=Signature(attrs={"perm": REQUIRED})),
    # Python's subscript of a device value (`v[:, None]`); tensors' subscripts are loads.
    # narrow, split, chunk and unbind are the subscripts of their parts (the frontend records a
    # redirect to "getitem" as a subscript, so device code reads them as narrowing reads)
    _view("getitem", ViewRule.SUBSCRIPT, Spelling("getitem", binders.view(binders.subscript_key)),
          Spelling("narrow", binders.narrowed),
          *(Spelling(name, binders.pieces) for name in ("split", "chunk", "unbind")),
          signature=Signature(attrs={"key": REQUIRED}),
          note="`v[:, None]`, ':' and narrowing reads of a device value (`blk[i]`, `blk[1:3]`, "
               "`blk[tile.index]`; see the index forms); narrow/split/chunk/unbind are such reads"),
    # `copy`: torch's result is a new tensor, so host code must not alias it to its operand.
    # A scan's step (ir/ops/scans.py): lane i of the result is lane i - shift of the input along
    # `axis`, wrapping around (torch.roll of one axis); no torch spelling records it.
    OpDef("shift_lanes", OpKind.VIEW, by_signature, (), Signature(attrs={"shift": REQUIRED, "axis": REQUIRED}),
          meta=lambda input, shift, axis: input, view=ViewRule.SHIFT),
    # torch.cat(tensors, dim): its operands are the tensors (any number), `dim` non-negative.
    # torch.stack is its composite (each tensor unsqueezed at dim, then cat; ir/ops/shapes.py)
    OpDef("cat", OpKind.VIEW, binders.concatenated, _spellings(("cat", "concat", "concatenate")),
          Signature(("tensors",), {"dim": 0}), view=ViewRule.CONCATENATE, dtypes=EVERY_DTYPE,
          note="promotes as torch; pieces in whole Mosaic tiles (or along a leading axis) are "
               "jnp.concatenate, others are placed by bit-exact selects; the dim may not hold a "
               "partial tile's padding"),
    # F.pad(v, pad, value=c), constant mode: widths per axis (outermost first) and the fill
    OpDef("pad", OpKind.VIEW, binders.constant_pad, (Spelling("pad"),),
          Signature(attrs={"widths": REQUIRED, "value": 0}), view=ViewRule.PAD, dtypes=EVERY_DTYPE,
          note="constant mode, static non-negative widths (jnp.pad); refused along an axis that holds a "
               "partial tile's padding"),
    _view("identity", ViewRule.BROADCAST,
          *(Spelling(name, binders.view(binders.no_attrs)) for name in ("contiguous", "detach")),
          Spelling("clone", binders.view(binders.copy)), note="moves no data"),
)

# ----------------------------------------------------------- contractions --


def _contraction(name: str, signature: Signature, contraction: Contraction, **fields: Any) -> OpDef:
    return _op(name, OpKind.CONTRACTION, signature=signature, contraction=contraction, **fields)


_MATMUL = Contraction(lhs=0, rhs=1)
_ADD_PRODUCT = Contraction(lhs=1, rhs=2, addend=0)

# `out_dtype` first: torch's `.dtype` overloads take it as the next positional argument.
_SCALED = {"out_dtype": None, "beta": 1, "alpha": 1}

_PRODUCT = "on the MXU, accumulated in float32; 16-bit results rounded once"
_OUT_DTYPE = "out_dtype= as in torch (the factors' dtype, or float32 for 16-bit factors)"

CONTRACTION_OPS = (
    _contraction("mm", Signature(("input", "mat2"), {"out_dtype": None}), _MATMUL, meta=_out_dtype(torch.mm),
                 dtypes=FLOATS, note=f"{_PRODUCT}; {_OUT_DTYPE}"),
    _contraction("bmm", Signature(("input", "mat2"), {"out_dtype": None}), _MATMUL, meta=_out_dtype(torch.bmm),
                 dtypes=FLOATS, note=f"{_PRODUCT}; {_OUT_DTYPE}"),
    _contraction("matmul", BINARY, _MATMUL,
                 operator=PythonOperator(operator.matmul, "__matmul__", "__rmatmul__"), dtypes=FLOATS,
                 note=f"{_PRODUCT}; 2-D, batched 3-D, and matrix @ vector"),
    _contraction("addmm", Signature(("input", "mat1", "mat2"), _SCALED), _ADD_PRODUCT,
                 meta=_out_dtype(_accumulate(torch.addmm)), dtypes=FLOATS,
                 note=f"{_PRODUCT}; beta=, alpha=; 16-bit factors with a float32 input accumulate into it"),
    _contraction("baddbmm", Signature(("input", "batch1", "batch2"), _SCALED), _ADD_PRODUCT,
                 meta=_out_dtype(_accumulate(torch.baddbmm)), dtypes=FLOATS,
                 note=f"{_PRODUCT}; beta=, alpha=; 16-bit factors with a float32 input accumulate into it"),
    # hl.dot(a, b, acc, out_dtype). Its acc's padding is not inherited by the result (the
    # planner has never done so; acc is product-shaped), hence no `addend`.
    _contraction("dot", Signature(("a", "b", "acc"), {"out_dtype": None}), _MATMUL,
                 spelled=False, bind=binders.unbound),
)

# --------------------------------------------------- creation, structural --

CREATION_OPS = (
    # hl.full / hl.zeros, and device `torch.*_like` factories. `tiles` says which tile sizes
    # each axis, so a reduction over a partial tile sees only its valid part.
    # `like`: the value a `torch.*_like(v)` copies the shape of (its padding is the result's).
    _op("full", OpKind.CREATION, spelled=False, bind=binders.unbound,
        signature=Signature(("fill_value", "like"), {"shape": REQUIRED, "dtype": REQUIRED, "tiles": ()},
                            optional=frozenset({"like"})),
        tiles=lambda args, attrs: attrs.get("tiles", ())),
    # hl.arange
    _op("iota", OpKind.CREATION, spelled=False, bind=binders.unbound,
        signature=Signature((), {"start": 0, "step": 1, "dtype": REQUIRED})),
)

# hl.rand / torch.rand_like: uniform numbers hashed from an int32 counter (each element's
# coordinates, built from tile indices by the frontend) and a seed; `stream` tells apart
# calls that share a seed. Lane by lane in the counter, so padded where it is.
RANDOM_OPS = (
    _elementwise("random_uniform", VPU, spelled=False, bind=binders.unbound,
                 signature=Signature(("counter", "seed"), {"stream": 0})),
)


def _tile_attribute(name: str, attribute: str, **fields: Any) -> OpDef:
    return _op(name, OpKind.STRUCTURAL, spelled=False, bind=binders.unbound,
               signature=Signature(("tile",)), tile_attribute=attribute, **fields)


STRUCTURAL_OPS = (
    _tile_attribute("tile_begin", "begin", note="the tile's first index (also hl.tile_begin(tile))"),
    _tile_attribute("tile_end", "end", note="one past its last valid index: clamped to the range's end on the "
                                            "last tile (also hl.tile_end(tile))"),
    _tile_attribute("tile_index", "index", tiles=lambda args, attrs: (args[0],),
                    note="its indices as an int32 vector, begin + arange(block_size) (also hl.tile_index(tile))"),
    _tile_attribute("tile_id", "id", note="its position among the loop's tiles, begin // block_size "
                                          "(also hl.tile_id(tile))"),
    _tile_attribute("tile_count", "count", note="the number of tiles of its loop"),
    # A narrowing read of a device value (`blk[tile.index]`, `blk[1:3]`): kwargs["index"] holds
    # its `NarrowItem`s, the operands the block and the scalars they use; how it reads (a
    # VMEM ref `pl.ds`, or a static slice of a value) is plan/subviews.py's decision.
    _op("subview", OpKind.STRUCTURAL, spelled=False, bind=binders.unbound,
        signature=Signature(("block",))),
    # A runtime scalar argument, read once per device loop.
    _op("scalar_arg", OpKind.STRUCTURAL, spelled=False, bind=binders.unbound,
        signature=Signature(("symbol",))),
    # Remote DMA (ir/remote.py): written by codegen/remote.py; they produce no value.
    _op("remote_copy", OpKind.STRUCTURAL, spelled=False, bind=binders.unbound,
        signature=Signature(("device_id",))),
    _op("remote_copy_start", OpKind.STRUCTURAL, spelled=False, bind=binders.unbound, signature=Signature(())),
    _op("remote_copy_wait", OpKind.STRUCTURAL, spelled=False, bind=binders.unbound,
        signature=Signature((), {"kind": "both"})),
    _op("remote_barrier", OpKind.STRUCTURAL, spelled=False, bind=binders.unbound, signature=Signature(())),
    # hl.device_print(prefix, *values): `pl.debug_print` of its values; produces no value.
    _op("device_print", OpKind.STRUCTURAL, spelled=False, bind=binders.unbound,
        signature=Signature((), {"prefix": ""})),
)

DEFINITIONS = (
    *UNARY_OPS, *BINARY_OPS, *COMPARISON_OPS, *OTHER_ELEMENTWISE_OPS, *REDUCTION_OPS, *INDEXED_OPS, *VIEW_OPS,
    *CONTRACTION_OPS, *CREATION_OPS, *RANDOM_OPS, *STRUCTURAL_OPS,
)

FACTORY_DEFINITIONS = (
    Factory("empty", None, "size"), Factory("zeros", 0, "size"), Factory("ones", 1, "size"),
    Factory("full", FILL_ARGUMENT, "size"), Factory("empty_strided", None, "size"),
    Factory("empty_like", None, "like"), Factory("zeros_like", 0, "like"),
    Factory("ones_like", 1, "like"), Factory("full_like", FILL_ARGUMENT, "like"),
    Factory("new_empty", None, "new"), Factory("new_zeros", 0, "new"), Factory("new_ones", 1, "new"),
    Factory("new_full", FILL_ARGUMENT, "new"),
)
