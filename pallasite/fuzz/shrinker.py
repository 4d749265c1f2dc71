"""Shrink a failing case: simpler cases that still fail the same way.

Greedy and generic: each pass proposes simpler variants of the case (fewer
lines, an expression replaced by one of its operands, smaller dims, fewer or
shorter segments, smaller block sizes, the resident loop type); the first
variant for which `still_fails` holds is kept and the passes start again,
until none helps or the attempt budget runs out.
"""
from __future__ import annotations

import time
from typing import Callable, Iterator

from ..config import KNOB_DEFAULTS
from .cases import Case, Line, assigned_name, operand_names

Proposal = Callable[[Case], Iterator[Case]]


def _drop_lines(case: Case) -> Iterator[Case]:
    for i, line in enumerate(case.body):
        if line.droppable:
            yield case.with_(body=case.body[:i] + case.body[i + 1:])


def _use_an_operand(case: Case) -> Iterator[Case]:
    """`v3 = torch.tanh(v1) * v2` → `v3 = v1`, `v3 = v2` (the line then often becomes dead)."""
    known: set[str] = set()
    for i, line in enumerate(case.body):
        if line.droppable:
            for name in operand_names(line, known):
                target = assigned_name(line)
                if f"{target} = {name}" != line.text:
                    simpler = Line(line.indent, f"{target} = {name}", droppable=True)
                    yield case.with_(body=case.body[:i] + (simpler,) + case.body[i + 1:])
        target = assigned_name(line)
        if target:
            known.add(target)


def _smaller_values(value: int) -> list[int]:
    values = [1, 2, 3, 8, value // 2, value - 1]
    return sorted({v for v in values if 0 < v < value})


def _shrink_dims(case: Case) -> Iterator[Case]:
    """Each dim smaller, with the same block sizes, then with block sizes chosen afresh (a block
    sized for the old extent is often illegal for the new one)."""
    for name, value in case.dims.items():
        for smaller in _smaller_values(value):
            yield case.with_(dims={**case.dims, name: smaller})
            if case.block_sizes is not None:
                yield case.with_(dims={**case.dims, name: smaller}, block_sizes=None)


def _drop_inputs(case: Case) -> Iterator[Case]:
    """An input the body does not read (one it reads then fails another way)."""
    for i in range(1, len(case.inputs)):
        yield case.with_(inputs=case.inputs[:i] + case.inputs[i + 1:])


def _shrink_segments(case: Case) -> Iterator[Case]:
    segments = case.segments
    for i in range(len(segments)):
        if len(segments) > 1:
            yield case.with_(segments=segments[:i] + segments[i + 1:])
    for i, length in enumerate(segments):
        for smaller in [0, *_smaller_values(length)]:
            if smaller < length:
                yield case.with_(segments=segments[:i] + (smaller,) + segments[i + 1:])


def _shrink_block_sizes(case: Case) -> Iterator[Case]:
    """Smaller sizes (the runner rejects illegal ones, which then do not fail the same way)."""
    sizes = case.block_sizes or ()
    for i, size in enumerate(sizes):
        for smaller in (1, 8, 128, size // 2):
            if 0 < smaller < size:
                yield case.with_(block_sizes=sizes[:i] + (smaller,) + sizes[i + 1:])


def _simpler_loop_type(case: Case) -> Iterator[Case]:
    simplest = KNOB_DEFAULTS["pallas_loop_type"]  # what a config without the knob runs
    if case.loop_type not in (None, simplest):
        yield case.with_(loop_type=simplest)


PASSES: tuple[Proposal, ...] = (_drop_lines, _use_an_operand, _drop_inputs, _shrink_segments, _shrink_dims,
                                _shrink_block_sizes, _simpler_loop_type)


def shrink(case: Case, still_fails: Callable[[Case], bool], *, max_attempts: int = 80,
           max_seconds: float = 300.0, passes: tuple[Proposal, ...] = PASSES) -> tuple[Case, int]:
    """The smallest case found that still fails, and how many candidates were tried."""
    attempts = 0
    deadline = time.monotonic() + max_seconds
    improved = True
    while improved:
        improved = False
        for propose in passes:
            for candidate in propose(case):
                if attempts >= max_attempts or time.monotonic() > deadline:
                    return case, attempts
                attempts += 1
                if still_fails(candidate):
                    case = candidate
                    improved = True
                    break
            if improved:
                break
    return case, attempts
