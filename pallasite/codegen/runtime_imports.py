"""The functions of `pallasite.runtime` that lowering rules call, as the generated module imports them.

A rule names the one its text calls (`lowering.rule(..., imports=...)`); the
module emitter imports those its plan's nodes need, in `RUNTIME_IMPORTS` order,
and the kernel and host functions keep their names free.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuntimeImport:
    """A function of `pallasite.runtime` that a rule's text calls: the generated module
    imports it, with `comment` saying why, when one of the rule's ops is used."""

    name: str  # what the text calls it (a module-level name of the generated code)
    statement: str
    comment: str


RANDOM_UNIFORM = RuntimeImport("random_uniform", "from pallasite.runtime.prng import random_uniform",
                               "# hl.rand / torch.rand_like: a counter-based hash (see its docstring)")
ELEMENTWISE = RuntimeImport(
    "elementwise", "from pallasite.runtime import elementwise",
    "# functions Mosaic has no primitive for, written with those it has (see its docstring)")
PROD_BY_HALVES = RuntimeImport("prod_by_halves", "from pallasite.runtime.reductions import prod_by_halves",
                               "# x.prod(dim): Mosaic has no product reduction (see its docstring)")
INTEGER_ARG_EXTREME = RuntimeImport(
    "integer_arg_extreme", "from pallasite.runtime.reductions import integer_arg_extreme",
    "# an integer argmax/argmin: Mosaic's take float32 only (see its docstring)")
RELAYOUT = RuntimeImport(
    "relayout", "from pallasite.runtime import relayout",
    "# torch.cat at offsets Mosaic's concatenate does not take, built by selects (see its docstring)")
RUNTIME_IMPORTS = (RANDOM_UNIFORM, ELEMENTWISE, PROD_BY_HALVES, INTEGER_ARG_EXTREME, RELAYOUT)  # the module's order
