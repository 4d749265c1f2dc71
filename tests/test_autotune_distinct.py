"""The search collapses configs whose plans are the same kernel (issue 10): a knob the plan
reports unused (`plan/knobs.py`: `pallas_load_buffer_count` with nothing streamed,
`pallas_pre_broadcast` with no operand that qualifies, `pallas_loop_type` with no inner
loop) is dropped from the candidate, so the search scores each kernel once and the
report's top table lists distinct kernels."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.autotune.search import search
from pallasite.autotune.summary import format_table
from pallasite.plan.knobs import canonical_config, unused_knobs

from plan_helpers import add_kernel, matmul, matmul_bias_steps, only_call, randn


@pytest.fixture(autouse=True)
def _quiet(tmp_path, monkeypatch):
    monkeypatch.setenv("PALLASITE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PALLASITE_AUTOTUNE_QUIET", "1")


MM_ARGS = (randn(32, 256, seed=1), randn(256, 256, seed=2))
BIAS_ARGS = (*MM_ARGS, randn(256, seed=3))
ADD_ARGS = (randn(16, 256, seed=4), randn(16, 256, seed=5))


def _plan(kernel, args, **config):
    return kernel.bind(args).plan(pallasite.Config(**config))


def test_the_plan_reports_the_knobs_it_did_not_use():
    sizes = {"block_sizes": [16, 128, 128]}
    resident = _plan(matmul, MM_ARGS, pallas_loop_type="unroll", pallas_load_buffer_count=3,
                     pallas_pre_broadcast=True, **sizes)
    assert {"pallas_load_buffer_count", "pallas_pre_broadcast"} <= unused_knobs(resident)
    assert "pallas_loop_type" not in unused_knobs(resident)
    assert dict(canonical_config(resident)) == {"pallas_loop_type": "unroll", **sizes}
    streamed = _plan(matmul, MM_ARGS, pallas_loop_type="fori_loop", pallas_load_buffer_count=3, **sizes)
    assert "pallas_load_buffer_count" not in unused_knobs(streamed)  # x and y stream, 3 deep
    assert canonical_config(streamed)["pallas_load_buffer_count"] == 3
    widened = _plan(matmul_bias_steps, BIAS_ARGS, pallas_pre_broadcast=True, **sizes)
    assert "pallas_pre_broadcast" not in unused_knobs(widened)
    no_loops = _plan(add_kernel(), ADD_ARGS, block_sizes=[8, 128], pallas_loop_type="fori_loop")
    assert "pallas_loop_type" in unused_knobs(no_loops)
    assert dict(canonical_config(no_loops)) == {"block_sizes": [8, 128]}


def test_configs_that_plan_the_same_kernel_are_scored_once():
    base = {"block_sizes": [16, 128, 128], "pallas_loop_type": "unroll"}
    configs = [pallasite.Config(base), pallasite.Config(base, pallas_load_buffer_count=3),
               pallasite.Config(base, pallas_pre_broadcast=True),
               pallasite.Config(base, pallas_load_buffer_count=3, pallas_pre_broadcast=True),
               pallasite.Config(base, pallas_loop_type="fori_loop", pallas_load_buffer_count=3)]
    bound = matmul.bind(MM_ARGS)
    scored = []
    result = search(bound.config_spec, lambda c: scored.append(c) or 1.0 + len(scored),
                    configs=configs, quiet=True)
    assert scored == [pallasite.Config(base), configs[-1]]  # the first four are one kernel
    assert [t.config for t in result.trials] == scored


@pytest.mark.parametrize("kernel, args", [(matmul, MM_ARGS), (matmul_bias_steps, BIAS_ARGS),
                                          (add_kernel(), ADD_ARGS)], ids=["matmul", "bias", "add"])
def test_the_top_table_lists_distinct_kernels(kernel, args):
    bound = kernel.bind(args)
    result = bound.autotune(args, effort="quick", quiet=True)
    ranked = result.ranked()
    assert len(ranked) >= 2
    # every candidate is canonical: the knobs its plan leaves unused are gone
    for trial in result.trials:
        if trial.error is None:
            plan = bound.plan(trial.config)
            assert not unused_knobs(plan) & set(trial.config)
    # and the table's rows are different kernels (checked here on the generated modules)
    codes = [bound.to_code(t.config) for t in ranked[:6]]
    assert len(set(codes)) == len(codes)
    table = format_table(result, kernel, args, top=6)
    rows = [line for line in table.splitlines()[3:] if line.strip()[:1].isdigit()]
    assert len(rows) == min(6, len(ranked))


def test_the_model_scores_the_plan_canonicalizing_built(monkeypatch):
    """Each candidate is planned once: the cost model reuses the plan `canonical` made."""
    bound = matmul.bind(MM_ARGS)
    bound.config_spec  # planning for canonical forms goes through the space's own planner
    monkeypatch.setattr(bound, "plan", lambda *a, **k: pytest.fail("planned a candidate twice"))
    result = bound.autotune(MM_ARGS, effort="quick", quiet=True)
    assert len(result.ranked()) >= 2


def test_the_worklist_knobs_join_the_space_and_collapse_when_unflattened():
    from examples import jagged_attention

    args = jagged_attention.example_inputs(lengths=(5, 0, 40, 17))
    bound = jagged_attention.jagged_attention.bind(args)
    space = bound.config_spec
    paths = [gene.path for gene in space.genes()]
    assert ("pallas_flatten_worklist",) in paths and ("pallas_worklist_grouping",) in paths
    flat, _ = space.canonical(pallasite.Config(pallas_worklist_grouping=2))
    assert flat["pallas_worklist_grouping"] == 2  # a flattened worklist reads it
    unflat, _ = space.canonical(pallasite.Config(pallas_flatten_worklist=False, pallas_worklist_grouping=2))
    assert "pallas_worklist_grouping" not in unflat  # no worklist: grouping is no knob
    result = bound.autotune(args, effort="quick", quiet=True)
    tried = [t.config for t in result.trials]
    assert any(c.get("pallas_worklist_grouping") == 2 for c in tried)
    assert any(c.get("pallas_flatten_worklist") is False for c in tried)
    assert len({c.key() for c in tried}) == len(tried)


@pallasite.kernel
def _two_pass_center(x, offsets):
    """Two q loops per segment: no worklist applies, whatever the config says."""
    segments = offsets.size(0) - 1
    _, d = x.size()
    out = torch.empty_like(x)
    for seg in hl.grid(segments):
        start = offsets[seg]
        end = offsets[seg + 1]
        acc = hl.zeros([d], dtype=torch.float32)
        for rows in hl.tile(start, end):
            acc = acc + x[rows, :].sum(0)
        mean = acc / torch.clamp((end - start).to(torch.float32), min=1.0)
        for rows2 in hl.tile(start, end):
            out[rows2, :] = x[rows2, :] - mean[None, :]
    return out


def test_flatten_worklist_is_unused_when_the_structure_rules_the_worklist_out():
    from examples import jagged_attention

    args = (randn(40, 128, seed=6), torch.tensor([0, 5, 5, 31, 40], dtype=torch.int32))
    off = only_call(_two_pass_center, args, block_sizes=[8, 8], pallas_flatten_worklist=False)
    assert off.worklist is None and off.worklist_reason == "the segment body is not exactly one q-tile loop"
    plan = _plan(_two_pass_center, args, block_sizes=[8, 8], pallas_flatten_worklist=False)
    assert "pallas_flatten_worklist" in unused_knobs(plan)
    result = _two_pass_center.bind(args).autotune(args, effort="quick", quiet=True)
    assert not any("pallas_flatten_worklist" in t.config for t in result.trials)
    codes = [_two_pass_center.bind(args).to_code(t.config) for t in result.ranked()]
    assert len(set(codes)) == len(codes)
    # where a worklist would apply, turning it off is a knob and the reason says so
    jagged = jagged_attention.example_inputs(lengths=(5, 0, 40, 17))
    unflat = only_call(jagged_attention.jagged_attention, jagged, pallas_flatten_worklist=False)
    assert unflat.worklist is None and unflat.worklist_reason == "pallas_flatten_worklist=False"
    kept = _plan(jagged_attention.jagged_attention, jagged, pallas_flatten_worklist=False)
    assert "pallas_flatten_worklist" not in unused_knobs(kept)


@pytest.mark.parametrize("sizes, dropped", [([32, 256, 128], True),   # one program
                                            ([16, 256, 128], True),   # one axis steps: same walk
                                            ([16, 128, 128], False)], # 2 x 2 programs: a real order
                         ids=["one_block", "one_axis", "two_axes"])
def test_a_loop_order_of_single_block_axes_is_no_knob(sizes, dropped):
    bound = matmul.bind(MM_ARGS)
    config = pallasite.Config(block_sizes=sizes, loop_orders=[[1, 0]])
    canonical, plan = bound.config_spec.canonical(config)
    assert ("loop_orders" not in canonical) == dropped
    assert canonical["block_sizes"] == sizes
    if dropped:  # the plan returned is the canonical config's own (the model reuses it)
        assert plan.calls[0].grid[0].dim.name == "tile_m"


def test_the_search_scores_a_one_program_matmul_once():
    bound = matmul.bind(MM_ARGS)
    result = bound.autotune(MM_ARGS, effort="full", quiet=True)
    for trial in result.trials:
        if trial.error is None and "loop_orders" in trial.config:
            grid = bound.plan(trial.config).calls[0].grid
            assert sum(axis.num_blocks > 1 for axis in grid) > 1, trial.config


def test_block_candidates_stop_at_the_smallest_block_covering_the_extent():
    """64 rows: no 128- or 1024-row block (the same single block, more padding); a lane dim of
    300 keeps the whole dim (300) and nothing past it."""
    bound = add_kernel(autotune_effort="quick").bind((randn(64, 300), randn(64, 300)))
    rows, lanes = (spec.candidates() for spec in bound.config_spec.block_sizes)
    assert rows == [8, 16, 32, 64] and lanes == [128, 256, 300]
