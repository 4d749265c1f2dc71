"""Bind a torch op's positional/keyword arguments to one canonical form.

Every op reaches the IR as `(operands, attrs)`: operands are the tensor-ish
inputs in a fixed order (Values, scalars), attrs the named settings. Codegen
reads only this form, so `x.sum(1, True)` and `torch.sum(x, dim=1,
keepdim=True)` lower identically.
"""
from __future__ import annotations

from typing import Any

from .. import exc
from ..ir import ops

_REQUIRED = object()

# name -> (operand parameters, attribute parameters with defaults)
_SIGNATURES: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "add": (("input", "other"), {"alpha": 1}),
    "sub": (("input", "other"), {"alpha": 1}),
    "rsub": (("input", "other"), {"alpha": 1}),
    "div": (("input", "other"), {"rounding_mode": None}),
    "pow": (("input", "exponent"), {}),
    "where": (("condition", "input", "other"), {}),
    "clamp": (("input", "min", "max"), {}),
    "lerp": (("input", "end", "weight"), {}),
    "addcmul": (("input", "tensor1", "tensor2"), {"value": 1}),
    "addcdiv": (("input", "tensor1", "tensor2"), {"value": 1}),
    "gelu": (("input",), {"approximate": "none"}),
    "leaky_relu": (("input",), {"negative_slope": 0.01, "inplace": False}),
    "elu": (("input",), {"alpha": 1.0, "inplace": False}),
    "hardtanh": (("input",), {"min_val": -1.0, "max_val": 1.0, "inplace": False}),
    "softplus": (("input",), {"beta": 1.0, "threshold": 20.0}),
    "nan_to_num": (("input",), {"nan": 0.0, "posinf": None, "neginf": None}),
    "round": (("input",), {"decimals": 0}),
    "relu": (("input",), {"inplace": False}),
    "relu6": (("input",), {"inplace": False}),
    "silu": (("input",), {"inplace": False}),
    "mish": (("input",), {"inplace": False}),
    "hardsigmoid": (("input",), {"inplace": False}),
    "hardswish": (("input",), {"inplace": False}),
    "mm": (("input", "mat2"), {}),
    "bmm": (("input", "mat2"), {}),
    "matmul": (("input", "other"), {}),
    "addmm": (("input", "mat1", "mat2"), {"beta": 1, "alpha": 1}),
    "baddbmm": (("input", "batch1", "batch2"), {"beta": 1, "alpha": 1}),
    "logsumexp": (("input",), {"dim": _REQUIRED, "keepdim": False}),
}
_REDUCTION_SIGNATURE = (("input",), {"dim": None, "keepdim": False, "dtype": None})
_UNARY_SIGNATURE = (("input",), {})
_BINARY_SIGNATURE = (("input", "other"), {})


def _signature(name: str) -> tuple[tuple[str, ...], dict[str, Any]]:
    if name in _SIGNATURES:
        return _SIGNATURES[name]
    if name in ops.REDUCTIONS:
        return _REDUCTION_SIGNATURE
    if name in ops.BINARY_POINTWISE or name in ops.COMPARISONS:
        return _BINARY_SIGNATURE
    return _UNARY_SIGNATURE


def bind(name: str, args: tuple, kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Bind `args`/`kwargs` of op `name` to (operands, attrs)."""
    operand_names, attr_defaults = _signature(name)
    params = list(operand_names) + list(attr_defaults)
    if len(args) > len(params):
        raise exc.UnsupportedOperation(f"Too many arguments to {name}: {len(args)}.")
    bound: dict[str, Any] = dict(zip(params, args))
    for key, value in kwargs.items():
        if key == "out":
            raise exc.UnsupportedOperation(f"{name}(out=...) is not supported in kernels.")
        if key not in params:
            raise exc.UnsupportedOperation(f"{name}() got an unsupported argument {key!r}.")
        if key in bound:
            raise exc.UnsupportedOperation(f"{name}() got {key!r} twice.")
        bound[key] = value
    operands = []
    for param in operand_names:
        if param not in bound:
            if name == "clamp":  # clamp(x, min=None, max=None)
                operands.append(None)
                continue
            raise exc.UnsupportedOperation(f"{name}() is missing argument {param!r}.")
        operands.append(bound[param])
    attrs = {}
    for param, default in attr_defaults.items():
        value = bound.get(param, default)
        if value is _REQUIRED:
            raise exc.UnsupportedOperation(f"{name}() is missing argument {param!r}.")
        attrs[param] = value
    if attrs.get("inplace"):
        raise exc.UnsupportedOperation(f"{name}(inplace=True) is not supported; assign the result.")
    attrs.pop("inplace", None)
    return operands, attrs


def normalize_dims(dim: Any, rank: int) -> tuple[int, ...] | None:
    """`dim` of a reduction as a sorted tuple of non-negative axes (None: all)."""
    if dim is None:
        return None
    dims = dim if isinstance(dim, (list, tuple)) else (dim,)
    out = []
    for d in dims:
        if not isinstance(d, int):
            raise exc.UnsupportedOperation(f"Reduction dim must be a Python int, got {d!r}.")
        if not -max(rank, 1) <= d < max(rank, 1):
            raise exc.ShapeMismatch(f"Reduction dim {d} is out of range for a rank-{rank} value.")
        out.append(d % max(rank, 1))
    return tuple(sorted(set(out)))
