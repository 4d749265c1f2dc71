"""The lowering rules' machinery: an op as a rule sees it (`OpCall`, its operands as
`Arg`s), the rule registry (`RULES`, filled by `rule`), the runtime functions rules call
(`IMPORTS`), and the text of dtypes and Python constants in generated code. The rules
themselves live in codegen/lowering.py (pointwise, reductions, views) and
codegen/matmul_rules.py (gathers along a dim, contractions, creation); import `lower`
from codegen/lowering.py, which loads both, so every rule is registered.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable

import torch

from .. import exc
from ..ir.exact_ints import wrapped_to
from ..ir.ops import computes_in_float32
from .runtime_imports import RUNTIME_IMPORTS, RuntimeImport

JNP_DTYPES = {
    torch.float32: "jnp.float32", torch.bfloat16: "jnp.bfloat16", torch.float16: "jnp.float16",
    torch.int32: "jnp.int32", torch.int16: "jnp.int16", torch.int8: "jnp.int8",
    torch.uint8: "jnp.uint8", torch.bool: "jnp.bool_",
    torch.float8_e4m3fn: "jnp.float8_e4m3fn", torch.float8_e5m2: "jnp.float8_e5m2",
}


def jnp_dtype(dtype: torch.dtype) -> str:
    try:
        return JNP_DTYPES[dtype]
    except KeyError:
        raise exc.UnsupportedDtype(f"dtype {dtype} is not supported on TPU.") from None


def literal(value: Any) -> str:
    """Python source of a constant operand."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "jnp.nan"
        if math.isinf(value):
            return "jnp.inf" if value > 0 else "-jnp.inf"
        return repr(value)
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, torch.dtype):
        return jnp_dtype(value)
    if isinstance(value, (tuple, list)):
        inner = ", ".join(literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    raise exc.UnsupportedOperation(f"Cannot use {value!r} as a constant in generated code.")


@dataclass(frozen=True)
class Arg:
    """One operand as a rule sees it: its rendered text, and for a value (kernel
    Value, host tensor or scalar) its shape and dtype; both are None for a
    Python constant, whose value `raw` holds."""

    text: str
    shape: tuple[int, ...] | None
    dtype: torch.dtype | None
    raw: Any

    @property
    def is_constant(self) -> bool:
        return self.dtype is None

    def with_text(self, text: str) -> Arg:
        return replace(self, text=text)


@dataclass
class OpCall:
    """One op as a lowering rule sees it."""

    op: str
    args: list[Arg]
    attrs: dict[str, Any]
    out_shape: tuple[int, ...]
    out_dtype: torch.dtype

    def cast(self, i: int, dtype: torch.dtype) -> str:
        """Operand i converted to `dtype` (a no-op for constants and matching dtypes)."""
        arg = self.args[i]
        if arg.is_constant and type(arg.raw) is int and dtype.is_floating_point and not -2**31 <= arg.raw < 2**31:
            return literal(float(arg.raw))  # a float op's number: JAX would parse a big Python int as int32
        if arg.is_constant and type(arg.raw) is int and not (dtype.is_floating_point or dtype == torch.bool):
            wrapped = wrapped_to(arg.raw, dtype)  # a ring op's number past the dtype, wrapped as torch wraps it
            return arg.text if wrapped == arg.raw or dtype == torch.uint8 else literal(wrapped)
        if arg.is_constant or arg.dtype == dtype:
            return arg.text
        if dtype == torch.bool:
            return f"({arg.text} != 0)"
        if arg.dtype == torch.bool and dtype.is_floating_point:
            # a select, not a convert: XLA rewrites x * convert(p) into select(p, x, 0), which
            # drops NaN and inf where torch's x * 0.0 keeps them
            ones = f"jnp.where({arg.text}, 1.0, 0.0)"
            return ones if dtype == torch.float32 else f"{ones}.astype({jnp_dtype(dtype)})"
        if dtype == torch.float8_e4m3fn and arg.dtype.is_floating_point:
            # torch saturates to float8_e4m3fn's largest finite value (+-448, inf too); XLA gives NaN
            return f"jnp.clip({arg.text}, -448.0, 448.0).astype({jnp_dtype(dtype)})"
        if {arg.dtype, dtype} == {torch.float16, torch.bfloat16}:  # Mosaic casts between them through float32
            return f"{arg.text}.astype(jnp.float32).astype({jnp_dtype(dtype)})"  # (exact, then one rounding)
        if not arg.shape:  # a scalar may be a Python int (an unrolled loop's tile begin)
            return f"{jnp_dtype(dtype)}({arg.text})"
        return f"{arg.text}.astype({jnp_dtype(dtype)})"

    def compute_dtype(self) -> torch.dtype:
        """The dtype torch compares/combines the operands in (their promoted dtype)."""
        args = [
            arg.raw if arg.is_constant else torch.empty(arg.shape, dtype=arg.dtype, device="meta")
            for arg in self.args
            if not arg.is_constant or isinstance(arg.raw, (int, float, bool))
        ]
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not tensors:
            return self.out_dtype
        if len(args) == 1:
            dtype = tensors[0].dtype
        else:
            dtype = torch.result_type(args[0], args[1])
        return torch.int32 if dtype == torch.int64 else dtype

    def all_cast(self, dtype: torch.dtype) -> list[str]:
        return [self.cast(i, dtype) for i in range(len(self.args))]

    def sixteen_bit_scalar(self, i: int, dtype: torch.dtype) -> str:
        """Operand i, a number (or a float or int argument) beside a 16-bit float tensor, as torch
        takes it there: rounded to the tensor's dtype (`x ** 0.257` of bfloat16 is
        x ** 0.2578125), then widened to `dtype` for a computation in float32."""
        arg = self.args[i]
        tensors = [a.dtype for a in self.args if not a.is_constant and a.shape and a.dtype.is_floating_point]
        sixteen = tensors[0] if tensors and tensors[0] in (torch.bfloat16, torch.float16) else None
        if sixteen is None or not (arg.is_constant or (arg.shape == () and arg.dtype in (torch.float32, torch.int32))):
            return self.cast(i, dtype)
        if arg.is_constant:
            if not isinstance(arg.raw, (int, float)) or isinstance(arg.raw, bool):
                return self.cast(i, dtype)
            return literal(float(torch.tensor(float(arg.raw), dtype=sixteen)))
        rounded = f"{arg.text}.astype({jnp_dtype(sixteen)})"
        return rounded if dtype == sixteen else f"{rounded}.astype({jnp_dtype(dtype)})"


Rule = Callable[[OpCall], str]
RULES: dict[str, Rule] = {}
# op -> the runtime function its rule calls, and which of its nodes call it (None: all)
IMPORTS: dict[str, tuple[RuntimeImport, Callable[[Any], bool] | None]] = {}


def rule(*names: str, imports: RuntimeImport | None = None, when: Callable[[Any], bool] | None = None):
    """Register `fn` as the lowering of each named op (one rule per op); `imports` is the
    runtime function its text calls for the op's nodes `when` says (an IR node -> bool)."""
    def register(fn: Rule) -> Rule:
        for name in names:
            if name in RULES:
                raise ValueError(f"op {name!r} has two lowering rules")
            RULES[name] = fn
            if imports is not None:
                IMPORTS[name] = (imports, when)
        return fn
    return register


def runtime_imports(nodes) -> tuple[RuntimeImport, ...]:
    """The runtime functions the lowerings of IR `nodes` call, in `RUNTIME_IMPORTS` order."""
    used = set()
    for node in nodes:
        needed, when = IMPORTS.get(node.op, (None, None))
        if needed is not None and (when is None or when(node)):
            used.add(needed)
    return tuple(helper for helper in RUNTIME_IMPORTS if helper in used)


def lower(call: OpCall) -> str:
    try:
        fn = RULES[call.op]
    except KeyError:
        raise exc.UnsupportedOperation(f"No TPU lowering for op {call.op!r}.") from None
    scalars = tuple(a.dtype if a.shape == () else None for a in call.args)  # per operand position
    if computes_in_float32(call.op, call.attrs, call.out_dtype, scalars):  # rounded once to the 16-bit result
        attrs = call.attrs
        if call.op in ("add", "sub", "rsub") and type(attrs.get("alpha")) in (int, float):
            # torch takes a 16-bit add's alpha in the tensor's dtype (elu's alpha it does not)
            attrs = {**attrs, "alpha": float(torch.tensor(attrs["alpha"], dtype=call.out_dtype))}
        # an integer operand is first converted to the 16-bit result's dtype, as torch converts
        # every input to the common dtype (-285 beside bfloat16 is -284)
        args = [replace(arg, text=f"{arg.text}.astype({jnp_dtype(call.out_dtype)})", dtype=call.out_dtype)
                if arg.dtype is not None and arg.shape and not arg.dtype.is_floating_point and arg.dtype != torch.bool
                else arg for arg in call.args]
        widened = replace(call, args=args, out_dtype=torch.float32, attrs=attrs)
        return f"({fn(widened)}).astype({jnp_dtype(call.out_dtype)})"
    return fn(call)
