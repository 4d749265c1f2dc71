"""A first call traces and plans each config once (issue 23 §3): the host code of a kernel
runs once to learn its config space and once per config it plans, and a plan asked for
again (the default config's check, then its compile; `to_code`; a second chip) is reused."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.frontend import tracer as tracer_module
from pallasite.runtime import bound_kernel as kernel_module


@pytest.fixture
def counts(monkeypatch):
    seen = {"traces": 0, "plans": 0}
    run, build = tracer_module.Tracer.run, kernel_module.build_plan

    def counted_run(self):
        seen["traces"] += 1
        return run(self)

    def counted_build(*args, **kwargs):
        seen["plans"] += 1
        return build(*args, **kwargs)

    monkeypatch.setattr(tracer_module.Tracer, "run", counted_run)
    monkeypatch.setattr(kernel_module, "build_plan", counted_build)
    return seen


def _scale():
    @pallasite.kernel(autotune_effort="none")
    def scale(x):
        m, n = x.size()
        out = torch.empty_like(x)
        for tile_m, tile_n in hl.tile([m, n]):
            out[tile_m, tile_n] = x[tile_m, tile_n] * 2.0
        return out
    return scale


def test_a_first_call_traces_the_space_once_and_its_config_once(counts):
    scale, x = _scale(), torch.randn(64, 256)
    torch.testing.assert_close(scale(x), x * 2.0)
    assert counts == {"traces": 2, "plans": 1}  # the discovery trace; the default config's
    scale(x)
    bound = scale.bind((x,))
    bound.to_code()  # the config the call runs: planned already
    assert counts == {"traces": 2, "plans": 1}


def test_each_other_config_is_traced_and_planned_once(counts):
    scale, x = _scale(), torch.randn(64, 256)
    bound = scale.bind((x,))
    before = dict(counts)
    for _ in range(2):
        torch.testing.assert_close(bound.compile_config({"block_sizes": [8, 128]})(x), x * 2.0)
    assert counts["traces"] - before["traces"] <= 1 and counts["plans"] - before["plans"] == 1
    bound.to_code({"block_sizes": [8, 128]}, chip="v5e")
    bound.to_code({"block_sizes": [8, 128]}, chip="v5e")
    assert counts["plans"] - before["plans"] == 2  # one more chip: one more plan, once


def test_a_reused_plan_generates_the_module_a_fresh_one_does():
    """Planning a flattened worklist rewrites its trace's q loop (so traces are never
    reused), and generating code twice from one plan must give the same module."""
    from examples import jagged_attention

    args = jagged_attention.example_inputs(lengths=(5, 0, 40, 17))
    kernel = jagged_attention.jagged_attention
    kernel.reset()
    bound = kernel.bind(args)
    flat_off = {"pallas_flatten_worklist": False}
    first = [bound.to_code(), bound.to_code(flat_off)]
    again = [bound.to_code(), bound.to_code(flat_off)]
    kernel.reset()
    fresh = kernel.bind(args)
    assert first == again == [fresh.to_code(), fresh.to_code(flat_off)]
    assert "work_owner" in first[0] and "work_owner" not in first[1]
