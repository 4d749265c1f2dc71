"""The catalog of torch ops pallasite lowers, by canonical name.

The frontend maps torch callables to these names and records them on IR
nodes; codegen keeps one lowering rule per name (`codegen/lowering.py`).
"""
from __future__ import annotations

UNARY_POINTWISE = frozenset({
    "neg", "pos", "abs", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p",
    "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "sinh", "cosh", "asin", "acos",
    "atan", "asinh", "acosh", "atanh", "sigmoid", "relu", "gelu", "silu", "erf",
    "erfc", "floor", "ceil", "round", "trunc", "sign", "reciprocal", "square",
    "logical_not", "bitwise_not", "isnan", "isinf", "isfinite", "softplus",
    "nan_to_num", "relu6", "hardtanh", "leaky_relu", "elu", "mish", "hardsigmoid",
    "hardswish", "logsigmoid", "signbit",
})
BINARY_POINTWISE = frozenset({
    "add", "sub", "rsub", "mul", "div", "floor_divide", "remainder", "fmod", "pow",
    "maximum", "minimum", "atan2", "logical_and", "logical_or", "logical_xor",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
    "bitwise_right_shift", "copysign", "hypot",
})
COMPARISONS = frozenset({"lt", "le", "gt", "ge", "eq", "ne"})
OTHER_POINTWISE = frozenset({"where", "clamp", "lerp", "to", "addcmul", "addcdiv"})
REDUCTIONS = frozenset({
    "sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod",
    "logsumexp", "all", "any",
})
VIEWS = frozenset({
    "reshape", "unsqueeze", "squeeze", "transpose", "permute", "expand",
    "flatten", "getitem", "identity", "t",
})
MATMUL = frozenset({"mm", "bmm", "matmul", "addmm", "baddbmm", "dot"})
CREATION = frozenset({"full", "iota"})
# Device-only structural ops: reading scalars and tile attributes.
STRUCTURAL = frozenset({
    "program_id", "scalar_arg", "tile_index", "tile_end", "tile_count", "cdiv",
})

ALL_OPS = (
    UNARY_POINTWISE | BINARY_POINTWISE | COMPARISONS | OTHER_POINTWISE | REDUCTIONS
    | VIEWS | MATMUL | CREATION | STRUCTURAL
)

# Reductions whose masked padding must be replaced by the op's identity.
REDUCTION_IDENTITY = {
    "sum": 0, "mean": 0, "prod": 1, "logsumexp": float("-inf"),
    "amax": float("-inf"), "max": float("-inf"), "argmax": float("-inf"),
    "amin": float("inf"), "min": float("inf"), "argmin": float("inf"),
    "all": True, "any": False,
}
