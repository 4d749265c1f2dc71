"""Differential fuzzer: random kernels run compiled and in reference mode, compared.

`python -m pallasite.fuzz --cases N --seed S`; `run_fuzz` is the same in-process.
Modules: `grammar` (kinds of kernels; `constants`: the scope_constants kind),
`expressions` (pointwise chains), `cases` (a kernel as data), `runner` (one case both ways), `shrinker`,
`report` (summary and regression tests), `session` (the run and the CLI).
"""
from __future__ import annotations

from .grammar import FUZZ_LOOP_TYPES, KINDS, LOOP_TYPES, generate
from .runner import Outcome, Result, run_case
from .session import FuzzReport, main, run_fuzz
from .shrinker import shrink

__all__ = ["FUZZ_LOOP_TYPES", "KINDS", "LOOP_TYPES", "FuzzReport", "Outcome", "Result", "generate", "main", "run_case",
           "run_fuzz", "shrink"]
