"""The arguments of one op recorded in device code, checked and made constants where the
generated code needs numbers: an op parameter from a kernel argument (`F.leaky_relu(x, s)`),
a number past int32 beside an integer value, an extreme over a zero-size dim.
`frontend/op_recorder.py` calls these as it records an op.
"""
from __future__ import annotations

import functools
from typing import Any

import torch

from .. import exc
from ..ir import ScalarSymbol, Value
from ..ir.exact_ints import wrapped_to
from .proxies import DeviceTensor, HostScalar, flatten_operands
from .tile_runs import constant_number


def constant_attr(value: Any, key: str, display: str) -> Any:
    """An op parameter (`F.leaky_relu(x, s)`'s slope, `torch.add(..., alpha=s)`) is a number of
    the generated code: a scalar argument there is made a constant of the variant, as
    `hl.specialize(s)` would (a device value cannot be one)."""
    if isinstance(value, (list, tuple)):
        return type(value)(constant_attr(item, key, display) for item in value)
    if isinstance(value, HostScalar):
        return int(value) if value.python_type is int else float(value)
    if isinstance(value, (DeviceTensor, Value)):
        number = _constant_number(value.value if isinstance(value, DeviceTensor) else value)
        if number is None:
            raise exc.UnsupportedOperation(
                f"{display}: its {key} must be a number known when compiling, and this one is a device value "
                "(read from a tensor, or computed from one); pass a number, or a kernel argument (`-s`, `2 * s` "
                "of arguments too: each value compiles its own variant).")
        return number
    return value


def _constant_number(value: Value) -> int | float | None:
    """A device scalar made of kernel arguments and numbers with -, +, *, / (`-s` in device
    code), its arguments made constants of the variant; None for any other value."""
    from .. import language as hl

    def argument(symbol: ScalarSymbol) -> int | float:
        python_type = int if symbol.dtype == torch.int32 else float
        return hl.specialize(HostScalar(hl.active_tracer().recorder, symbol, python_type))

    return constant_number(value, argument)


def check_extreme_of_nothing(op: str, args: tuple, kwargs: dict) -> None:
    """An amax/amin/argmax/argmin over a dim of size 0 has no answer: torch raises, so does the
    kernel (it would give the identity, -inf)."""
    if op not in ("amax", "amin", "argmax", "argmin") or not args or not isinstance(args[0], Value):
        return
    shape = args[0].shape
    dims = kwargs.get("dim")
    dims = range(len(shape)) if dims is None else (dims,) if isinstance(dims, int) else dims
    empty = [d % len(shape) for d in dims if shape and shape[d % len(shape)] == 0]
    if empty:
        raise exc.ShapeMismatch(f"{op}: the reduced dim {empty[0]} has size 0, and the {op} of no elements has "
                                "no value (torch raises: expected reduction dim to have non-zero size).")


# Ring ops: on integers their result modulo 2**32 is their operands' modulo 2**32, so a number
# past int32 is used wrapped (codegen/op_calls.py:OpCall.cast), torch's answer where torch wraps
# (an int32 tensor; an int64 value cast to int32 later, plan/int64_values.py checks the others
# with the number itself): Knuth's `h * 2654435761`, `h & 0xFFFFFFFF`
_RING_OPS = frozenset({"add", "sub", "rsub", "mul", "bitwise_and", "bitwise_or", "bitwise_xor"})


# Beside an integer tensor torch holds in its own dtype (not int64), these take a number past it
# wrapped to that dtype too (int32 `x < 2654435761` is `x < -1640531535`); true division takes it
# as a float. Beside a value torch computes in int64 they need the number itself.
_WRAPPING_OPS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "floor_divide", "remainder", "fmod", "div",
                           "bitwise_left_shift", "bitwise_right_shift"})


def wrapped_numbers(op: str, operands: list, attrs: dict) -> list:
    """A number past an integer tensor's dtype, beside a tensor torch holds in that dtype (not a
    value it computes in int64), in an op torch takes it wrapped in (`_WRAPPING_OPS`, ring ops):
    the dtype's value, as torch converts it (`exact_ints.wrapped_to`: uint8 `x < -1` is `x < 255`,
    int32 `x % 2654435761` is `x % -1640531535`, uint8 `(-3) ** x` is `253 ** x`), so planning and
    codegen see torch's number.
    True division takes the number as a float: kept."""
    if (op not in _WRAPPING_OPS and op not in _RING_OPS and op != "pow") or (
            op == "div" and attrs.get("rounding_mode") is None):
        return operands
    integers = [v for v in operands if isinstance(v, Value) and not v.dtype.is_floating_point and v.dtype != torch.bool]
    if not integers:
        return operands
    dtype = functools.reduce(torch.promote_types, [v.dtype for v in integers])
    bounds = torch.iinfo(dtype)
    outside = [type(item) is int and not bounds.min <= item <= bounds.max and (op != "pow" or position == 0)
               for position, item in enumerate(operands)]  # pow: a base `(-3) ** u8` (the exponent is taken whole)
    if not any(outside) or any(_held_in_int64(v) for v in integers):
        return operands
    return [wrapped_to(item, dtype) if out else item for item, out in zip(operands, outside)]


def _held_in_int64(value: Value) -> bool:
    """Whether torch holds `value` in int64: computed so (`Value.int64`), or read from (or computed
    from) an int64 argument the kernel narrowed to int32 (its loads' `caller_dtype`)."""
    seen, stack = set(), [value]
    while stack:
        item = stack.pop()
        if id(item) in seen or not isinstance(item, Value):
            continue
        seen.add(id(item))
        if item.int64:
            return True
        producer = item.producer
        if producer is None:
            continue
        tensor = getattr(producer, "tensor", None)
        if tensor is not None and getattr(tensor, "caller_dtype", None) == torch.int64:
            return True
        stack.extend(arg for arg in producer.args if isinstance(arg, Value))
    return False


def check_int32_numbers(op: str, operands: list, display: str, float_result: bool = False) -> None:
    """A number past int32 beside an integer device value (`labels[t] > 3_000_000_000`): device
    integers are int32; taken where torch takes it wrapped to the tensor's dtype (a ring op,
    `_RING_OPS`, or beside a tensor torch holds in that dtype, `_WRAPPING_OPS`) within int64,
    refused where torch needs the number itself (beside a value it computes in int64)."""
    flat = list(flatten_operands(operands))
    integers = [v for v in flat if isinstance(v, Value) and not v.dtype.is_floating_point and v.dtype != torch.bool]
    booleans = not integers and not float_result and any(isinstance(v, Value) and v.dtype == torch.bool for v in flat)
    if not integers and not booleans:
        return
    past = [number for number in flat if type(number) is int and not -2**31 <= number < 2**31]
    if not past:
        return
    # beside bools torch computes in int64 (`b <= 2**31 + 1` is True): the number itself is needed
    wraps = not booleans and (op in _RING_OPS or (op in _WRAPPING_OPS and not any(map(_held_in_int64, integers))))
    for number in past:
        if not (wraps and -2**63 <= number < 2**63):
            raise exc.UnsupportedDtype(
                f"{display}: the number {number} does not fit int32, which device integers are (TPU has no "
                "64-bit vectors); beside a value torch computes in int64 (a sum, `.long()`) only +, -, *, &, |, "
                f"^ take such a number wrapped to 32 bits, and {display} needs the number itself. Compare or "
                "compute in float32 (`x.float()`), or write a number within int32.")


def masks_as_constants(op: str, operands: tuple) -> tuple:
    """`h & mask`, `h % m` of a value torch holds in int64 (a hash) and an int argument: the
    argument is made a constant of the variant (as hl.specialize makes it), so planning sees a
    non-negative literal mask and takes the low 32 bits as torch's answer
    (`ir/exact_ints.py:drops_wrap`), as reference mode finds when it runs (trial Y)."""
    if op not in ("bitwise_and", "remainder") or not any(
            isinstance(item, DeviceTensor) and item.value.int64 for item in operands):
        return operands
    return tuple(int(item) if isinstance(item, HostScalar) and item.python_type is int else item
                 for item in operands)


__all__ = ["check_extreme_of_nothing", "check_int32_numbers", "constant_attr", "masks_as_constants",
           "wrapped_numbers"]
