"""The op registry: one `OpDef` per IR op, looked up by canonical name or by spelling.

Every stage reads the entry instead of keeping its own list of op names:
the frontend binds a torch call through `SPELLINGS` (and allocates through
`FACTORIES`), the mask planner dispatches on `OpDef.kind`, the kernel emitter
tells structural ops from lowered ones, and codegen's `RULES` are keyed by
`OPS`' names (checked by `tests/test_op_registry.py`). `COMPOSITES` are torch
functions recorded as several ops (softmax), by spelling.
"""
from __future__ import annotations

import torch

from .binders import (
    augmented_dtype, check_dot_accumulator, check_number_fits, dtype_refusal, number_refusal, matmul_rule, normalize_dims,
    refuses_dtype,
)
from .catalog import DEFINITIONS, FACTORY_DEFINITIONS
from .composites import COMPOSITE_DEFINITIONS
from .definition import (
    BITS, BOOL, EVERY_DTYPE, FLOATS, INTEGERS, NUMBERS, FILL_ARGUMENT, REQUIRED, Accumulator, Binder, new_tensor_size_and_fill, Bound, Call, Composite, Contraction,
    Earlier, Elementwise, Factory, OpDef, OpKind, Partials, PythonOperator, Record, Reduction, Redirect, ScalarArithmetic,
    Signature, Spelling, ViewRule,
)


def _index() -> tuple[dict[str, OpDef], dict[str, tuple[OpDef, Binder]], dict[str, OpDef]]:
    ops: dict[str, OpDef] = {}
    spellings: dict[str, tuple[OpDef, Binder]] = {}
    tile_attributes: dict[str, OpDef] = {}
    for op in DEFINITIONS:
        if op.name in ops:
            raise ValueError(f"op {op.name!r} is defined twice")
        ops[op.name] = op
        for spelling in op.spellings:
            if spelling.name in spellings:
                raise ValueError(f"spelling {spelling.name!r} names two ops")
            spellings[spelling.name] = (op, spelling.bind or op.bind)
        if op.tile_attribute is not None:
            tile_attributes[op.tile_attribute] = op
    return ops, spellings, tile_attributes


OPS, SPELLINGS, TILE_ATTRIBUTES = _index()
FACTORIES: dict[str, Factory] = {factory.name: factory for factory in FACTORY_DEFINITIONS}
COMPOSITES: dict[str, Composite] = {
    spelling: composite for composite in COMPOSITE_DEFINITIONS for spelling in composite.spellings
}
if set(COMPOSITES) & (set(SPELLINGS) | set(FACTORIES)):
    raise ValueError("a composite's spelling also names an op or a factory")


def scalar_arithmetic(op: str) -> ScalarArithmetic | None:
    """What node op `op` computes on int scalars (`Elementwise.scalar`); None for an op
    that is no such arithmetic, or no registry op (a load)."""
    definition = OPS.get(op)
    return definition.scalar if definition is not None else None


# Operators whose 32-bit scalar operand torch rounds to the tensor's 16-bit dtype first (by
# position; None: any): its CPU kernels for +, -, %, fmod and a scalar base of ** take the
# scalar in the tensor's dtype, those for *, / and // in float32 (checked against torch 2.x)
_ROUNDED_SCALAR = {"add": None, "sub": None, "rsub": None, "remainder": None, "fmod": None, "pow": (0,)}


def computes_in_float32(op: str, attrs, out_dtype, scalar_dtypes=()) -> bool:
    """Whether an elementwise op's 16-bit float result is computed in float32 and rounded
    once, as torch computes it: a function or formula (`Elementwise.widened`), an add/sub
    with an alpha (a product, then a sum), or an operator with a 32-bit scalar operand that
    torch does not round to 16 bits first (`scalar_dtypes`: per operand position, the dtype
    of a 0-d operand, else None; `x * v` with v = -70000 an argument beside a float16 tile is
    finite in torch, while `x + v` and `x % v` take v rounded to float16, `_ROUNDED_SCALAR`).
    Codegen emits it so; the cost model charges it so."""
    definition = OPS.get(op)
    facts = definition.elementwise if definition is not None else None
    if facts is None or out_dtype not in (torch.bfloat16, torch.float16):
        return False
    if attrs.get("rounding_mode") is not None or op == "floor_divide":
        return False  # torch truncates the quotient rounded to 16 bits; it floors in 16-bit steps
    rounded = _ROUNDED_SCALAR.get(op, ())
    scalar_operand = definition.operator is not None and any(  # `x * v` (not a seed of hl.rand)
        dtype in (torch.float32, torch.int32) and not (rounded is None or position in rounded)
        for position, dtype in enumerate(scalar_dtypes))
    return facts.widened or attrs.get("alpha", 1) != 1 or scalar_operand


__all__ = [
    "BITS", "BOOL", "EVERY_DTYPE", "FLOATS", "INTEGERS", "NUMBERS",
    "COMPOSITES", "FACTORIES", "FILL_ARGUMENT", "new_tensor_size_and_fill", "OPS", "REQUIRED", "SPELLINGS", "TILE_ATTRIBUTES", "scalar_arithmetic", "computes_in_float32",
    "Accumulator", "Binder", "Bound", "Call", "Composite", "Contraction", "Elementwise", "Factory", "Partials", "OpDef", "OpKind", "PythonOperator", "Record",
    "Earlier", "augmented_dtype", "check_number_fits", "number_refusal", "Reduction", "Redirect", "ScalarArithmetic", "Signature", "Spelling", "ViewRule", "matmul_rule", "normalize_dims",
]
