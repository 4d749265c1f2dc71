"""Planning is a list of named passes over a frozen draft (plan/build.py `CALL_PASSES`),
and the config, below the plan, holds every knob's default once (`KNOB_DEFAULTS`)."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import pallasite
from pallasite.config import KNOB_DEFAULTS, Config, resolve
from pallasite.plan.build import CALL_PASSES, plan_call
from pallasite.plan.draft import CallDraft, KernelContext
from plan_helpers import matmul, randn


def test_each_pass_adds_its_decisions_to_a_frozen_draft():
    x, y = randn(16, 256, seed=1), randn(256, 128, seed=2)
    bound = matmul.bind((x, y))
    config = bound.resolve_config({"pallas_loop_type": "fori_loop"})
    plan = bound.plan(config, resolved=True)
    (call,) = plan.ir.device_loops
    kernel = KernelContext.of(plan.ir, plan.target)
    draft = CallDraft(kernel, call, (0, 1), frozenset(id(s) for s in plan.ir.arguments), {})
    for planning_pass in CALL_PASSES:
        before = draft
        draft = planning_pass(draft)
        assert isinstance(draft, CallDraft) and draft is not before, planning_pass.__name__
        with pytest.raises(dataclasses.FrozenInstanceError):
            draft.plan = None
    assert draft.plan == plan.calls[0]
    assert plan_call(kernel, call, draft.defined, {}, (0, 1)).inner_loops == plan.calls[0].inner_loops


def test_a_plan_reads_every_knob_resolved():
    knobs = resolve(Config(block_sizes=[8], pallas_load_buffer_count=3))
    assert knobs.pallas_load_buffer_count == 3
    assert {field.name: getattr(knobs, field.name) for field in dataclasses.fields(knobs)
            if field.name != "pallas_load_buffer_count"} == {
        key: value for key, value in KNOB_DEFAULTS.items() if key != "pallas_load_buffer_count"}


def test_config_imports_nothing_of_the_stages_above_it():
    source = Path(pallasite.config.__file__).read_text()
    modules = [node.module or "" for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)]
    assert not [m for m in modules if m.split(".")[0] in ("plan", "autotune", "codegen", "runtime")]
