"""The differential fuzzer (`python -m pallasite.fuzz`): a smoke run, its grammar, its shrinker."""
from __future__ import annotations

import importlib.util
import io
import re
import sys

import pytest
import torch

from pallasite.fuzz import KINDS, Outcome, generate, run_case, run_fuzz, shrink
from pallasite import exc
from pallasite.fuzz.cases import Case, InputSpec, Line, ScopeConstant
from pallasite.fuzz.report import regression_test
from pallasite.fuzz.runner import compare
from pallasite.fuzz.session import main
from pallasite.config import FOLDED_LOOP_TYPE
from pallasite.plan.loops import LOOP_TYPES

SEED = 7


def test_a_fixed_seed_smoke_run_finds_no_mismatch_no_internal_error_and_lowers_every_case(tmp_path):
    stream = io.StringIO()
    report = run_fuzz(2 * len(KINDS), SEED, out=tmp_path, timeout_per_case=60, stream=stream,  # each kind twice
                      lowering=True)
    assert len(report.results) == 2 * len(KINDS)
    assert {r.case.kind for r in report.results} == set(KINDS)
    assert report.count(Outcome.MISMATCH) == 0, stream.getvalue()
    assert report.count(Outcome.INTERNAL) == 0, stream.getvalue()
    assert report.count(Outcome.NO_LOWER) == 0, stream.getvalue()
    assert report.count(Outcome.REF_ERROR) == 0, stream.getvalue()
    assert report.count(Outcome.FALSE_REFUSAL) == 0, stream.getvalue()
    assert report.count(Outcome.MATCH) >= 15  # rejections are allowed, but most kernels must run


def test_the_command_line_parses_its_options_and_prints_the_summary(tmp_path, capsys):
    assert main(["--cases", "1", "--seed", "3", "--kinds", "tile_rows", "--loop-types", "fori_loop",
                 "--out", str(tmp_path), "--timeout-per-case", "60", "--lowering"]) == 0
    printed = capsys.readouterr().out
    assert "tile_rows" in printed and "1 cases in" in printed and "does not lower" in printed


def _sources(seed: int, count: int) -> list[str]:
    return [generate(seed, i).source() for i in range(count)]


def test_generation_is_deterministic_for_a_seed():
    assert _sources(SEED, 27) == _sources(SEED, 27)
    assert _sources(SEED, 9) != _sources(SEED + 1, 9)


def test_the_three_issue_13_shapes_are_generated():
    sources = _sources(SEED, 27)
    # A block-sized accumulator reduced along its lanes after the inner loop.
    lane = [s for s in sources if "block_n = hl.register_block_size(n)" in s]
    assert lane and all("acc = hl." in s and "[tm, block_n]" in s and "out[tm] = " in s for s in lane)
    assert any("hl.tile(n, block_size=block_n)" in s for s in lane)
    # A masked mean inside a jagged segment loop.
    means = [generate(SEED, i, kinds=("segment_mean",)).source() for i in range(20)]
    assert any("hl.tile(offsets[g], offsets[g + 1]" in s and "x[t, :].mean(" in s for s in means)
    # A tile's id (or begin // block) as an output row.
    assert any("out[tm.id, tn]" in s or "out[tn.id, tm]" in s for s in sources)
    assert any("out[tm.begin // " in generate(SEED, i, kinds=("tile_rows",)).source() for i in range(20))


def test_a_one_tuple_of_tiles_is_used_as_an_index():
    """Helion's `for t in hl.tile([n])`: t is a 1-tuple of tiles inside subscripts."""
    cases = [generate(SEED, i, kinds=("pointwise", "in_place")) for i in range(120)]
    spelled = [case for case in cases if any(re.search(r"hl\.tile\(\[\w\]\)", line.text) for line in case.body)]
    assert spelled and any(case.loop_type for case in spelled)


def test_bool_mask_arguments_reach_inner_loops():
    """A bool argument read by an inner loop (Mosaic copies no bool ref by DMA: it stays
    resident), through masked_fill."""
    cases = [generate(SEED, i, kinds=("pointwise", "in_place")) for i in range(120)]
    masked = [case for case in cases if any(spec.dtype == torch.bool for spec in case.inputs)]
    assert any(case.loop_type for case in masked)
    assert all(".masked_fill(~keep[" in case.source() for case in masked)


def test_the_issue_20_index_forms_are_generated():
    cases = [generate(SEED, i, kinds=("paired_indices", "flat_gather")) for i in range(120)]
    forms = {case.tags[1] for case in cases}
    # several index tensors in one subscript, paired and broadcast, in inner loops too
    assert {"diagonal", "target", "rows_cols", "row_then_tile", "separated", "broadcast", "index_tiles",
            "inner"} <= forms
    # gathers through computed flat indices, tables past the VMEM budget (the config's or a chip's)
    assert {"jagged_mean", "computed_rows", "row_windows", "jagged_tile"} <= forms
    flat = [case for case in cases if case.kind == "flat_gather"]
    assert any("real_table" in case.tags for case in flat) and any("budget_knob" in case.tags for case in flat)
    assert all(dict(case.knobs).get("vmem_limit_bytes") for case in flat if "budget_knob" in case.tags)
    # a tile's window of each gathered row, copied by DMA whatever the table's size
    assert any("dma_mode" in case.tags for case in flat if case.tags[1] == "row_windows")
    assert {case.loop_type for case in cases if case.tags[1] in ("inner", "jagged_mean")} == set(LOOP_TYPES)


def test_the_window_shapes_kind_reads_a_half_through_a_shifted_window():
    cases = [generate(SEED, i, kinds=("window_shapes",)) for i in range(120)]
    halves = [case for case in cases if case.tags[1].startswith("half_window")]
    assert halves and any(case.loop_type for case in halves)
    windows = ("x[tm, start:start + tn.block_size]", "x[tm, tn.begin + h:tn.begin + h + tn.block_size]")
    assert all(any(window in case.source() for window in windows) for case in halves)


def test_the_window_shapes_kind_shifts_by_an_int_argument():
    """`x[tm, tn.index - c]` with c an int argument: a shifted tile, as reference mode reads it."""
    cases = [generate(SEED, i, kinds=("window_shapes",)) for i in range(120)]
    shifted = [case for case in cases if case.tags[1].endswith(":argument")]
    assert {case.tags[1].split(":")[1] for case in shifted} == {"+", "-"}
    assert all(any(spec.name == "c" and spec.fill.startswith("int:") for spec in case.inputs) for case in shifted)


def test_the_reduction_kind_draws_integer_sums_torch_holds_in_int64():
    """Integer sums into torch's int64, arithmetic on them, and data whose sums leave int32
    (both modes then raise at the line: plan/int64_values.py, reference/int64.py)."""
    cases = [generate(SEED, i, kinds=("reduction",)) for i in range(600)]
    sources = [case.source() for case in cases]
    assert any("dtype=torch.int64" in s and ".sum(" in s or "torch.sum(" in s and "int64" in s for s in sources)
    assert any(") * " in s and " + 1" in s for s in sources)
    assert any(spec.fill == "large" for case in cases for spec in case.inputs)


def test_the_reduction_kind_carries_tuples_and_lists():
    cases = [generate(SEED, i, kinds=("reduction",)) for i in range(300)]
    carried = {case.tags[2] for case in cases if case.tags[:1] == ("two_pass",)}
    assert {"stat", "tuple", "list"} <= carried


def test_the_issue_22_scatter_and_masked_load_forms_are_generated():
    cases = [generate(SEED, i, kinds=("scatter", "flat_gather")) for i in range(120)]
    forms = {case.tags[1] for case in cases}
    # a scatter under a mask of its lanes, atomics through an index vector, causal_conv1d's taps
    assert {"masked_rows", "atomic_rows", "atomic_inner", "shifted"} <= forms
    sources = [case.source() for case in cases]
    assert any("hl.atomic_add(out, [dest[t], " in s for s in sources)
    assert any("hl.atomic_max(out, [dest[t], " in s for s in sources)
    assert {case.loop_type for case in cases if case.tags[1] == "atomic_inner"} == set(LOOP_TYPES)
    assert any(case.inputs[0].dtype == torch.float16 for case in cases if case.kind == "scatter")


def test_the_statistics_kind_generates_every_statistic():
    cases = [generate(SEED, i, kinds=("statistics",)) for i in range(120)]
    sources = [case.source() for case in cases]
    for spelling in ("torch.var(", ".var(", "torch.std(", ".std(", "torch.var_mean(", "torch.std_mean(",
                     "torch.logsumexp(", ".sum(", "torch.mean(", "torch.amax(", ".amin("):
        assert any(spelling in source for source in sources), spelling
    assert any("correction=0" in s for s in sources) and any("unbiased=False" in s for s in sources)
    assert any("dim=[1, 2]" in s or "dim=(1, 2)" in s or "[1, 2]" in s for s in sources)  # several dims
    assert any("keepdim=True" in s for s in sources)
    assert {case.inputs[0].dtype for case in cases} == {torch.float32, torch.bfloat16}
    assert {case.loop_type for case in cases if case.loop_type is not None} == set(LOOP_TYPES)


def test_the_scans_kind_generates_every_scan():
    cases = [generate(SEED, i, kinds=("scans",)) for i in range(150)]
    tags = {case.tags[1] for case in cases}
    assert {"cumsum", "cumprod", "hl_cumsum", "hl_cumprod", "pair_scan"} <= tags
    assert any(tag.startswith("scan:") for tag in tags) and any(tag.startswith("reduce:") for tag in tags)
    sources = [case.source() for case in cases]
    assert any("reverse=True" in s for s in sources) and any("other=" in s for s in sources)
    assert {case.inputs[0].dtype for case in cases} == {torch.float32, torch.bfloat16}
    assert {case.loop_type for case in cases if case.loop_type is not None} == set(LOOP_TYPES)


def test_the_segment_rows_kind_flattens_worklists_both_ways():
    """compact_worklist half the time, a drawn loop type (flattened or not) otherwise; and the
    cases run: a sample matches reference mode, one of them flattened."""
    cases = [generate(SEED, i, kinds=("segment_rows",)) for i in range(60)]
    assert {case.tags[1] for case in cases} == {"pointwise", "attend"}
    assert {case.tags[2] for case in cases} == {"compact", "drawn"}
    assert any(dict(case.knobs).get("pallas_flatten_worklist") is False for case in cases)
    compact = next(case for case in cases if case.tags[1:] == ("attend", "compact"))
    assert run_case(compact).outcome is Outcome.MATCH


def test_the_shared_rows_kind_revisits_rows_out_of_order():
    """Every write and row form is drawn, and a sample of each write matches reference mode."""
    cases = [generate(SEED, i, kinds=("shared_rows",)) for i in range(80)]
    assert {case.tags[1] for case in cases} == {"store", "update", "atomic_add", "atomic_max"}
    sources = [case.source() for case in cases]
    for form in ("g % ", "g // ", "seg[g]", "tm.id % ", "tm.id // 2"):
        assert any(form in source for source in sources), form
    for write in ("store", "update", "atomic_add"):
        case = next(case for case in cases if case.tags[1] == write and "% " in case.source())
        assert run_case(case).outcome is Outcome.MATCH


def test_the_shape_ops_kind_generates_every_form():
    cases = [generate(SEED, i, kinds=("shape_ops",)) for i in range(150)]
    tags = {case.tags[1] for case in cases}
    assert {"cat_lanes", "cat_rows", "stack_0", "stack_1", "stack_2", "rope", "tile_gather", "cat_inner_loop",
            "einsum:ik,kj->ij", "einsum:ij,kj->ik", "matvec", "vecmat", "einsum_matvec", "two_batch_dims"} <= tags
    sources = [case.source() for case in cases]
    assert any("hl.split(" in s and "hl.join(" in s for s in sources)
    # the vector products' inner loop may fold
    assert {case.loop_type for case in cases if case.loop_type is not None} == {*LOOP_TYPES, FOLDED_LOOP_TYPE}


def _synthetic_case() -> Case:
    body = (
        Line(0, "m, n = x.size()"),
        Line(0, "out = torch.empty([m, n], dtype=torch.float32, device=x.device)"),
        Line(0, "for tm, tn in hl.tile([m, n]):"),
        Line(1, "a = x[tm, tn]"),
        Line(1, "v0 = torch.sigmoid(a)", droppable=True),
        Line(1, "v1 = torch.tanh(v0) * a", droppable=True),
        Line(1, "v2 = v1 + 1.0", droppable=True),
        Line(1, "out[tm, tn] = v2"),
        Line(0, "return out"),
    )
    return Case("pointwise", "synthetic", (InputSpec("x", ("m", "n")),), body, {"m": 37, "n": 300},
                block_sizes=(16, 128))


def test_the_shrinker_keeps_the_smallest_case_that_still_fails():
    def still_fails(case: Case) -> bool:  # "fails" while a tanh survives on at least 3 rows
        return "torch.tanh" in case.source() and case.dims["m"] >= 3 and case.dims["n"] >= 1

    small, attempts = shrink(_synthetic_case(), still_fails)
    assert still_fails(small) and attempts < 80
    assert small.dims == {"m": 3, "n": 1}
    assert small.block_sizes == (1, 1)
    # The lines the failure does not need are gone; the structure (not droppable) stays.
    assert [line.text for line in small.body if line.droppable] == ["v1 = torch.tanh(v0) * a"]
    assert [l for l in small.body if not l.droppable] == [l for l in _synthetic_case().body if not l.droppable]


def test_compare_is_exact_for_integers_and_allows_bf16_ulps():
    case = _synthetic_case()
    x = torch.randn(64, 64)
    assert compare(x, x.clone(), case) is None
    assert "1 of 4096" in compare(x + (torch.arange(4096).reshape(64, 64) == 5).float(), x, case)
    ints = torch.arange(10, dtype=torch.int32)
    assert compare(ints + (ints == 3).int(), ints, case.with_(exact=True)).startswith("1 of 10")
    bf16 = case.with_(inputs=(InputSpec("x", ("m", "n"), torch.bfloat16),))
    y = torch.randn(100).bfloat16()
    assert compare(y.float().mul(1 + 2 ** -8).bfloat16(), y, bf16) is None  # within an ulp or two
    assert compare(y * 1.25, y, bf16) is not None


def test_a_written_regression_test_runs_as_a_pytest_test(tmp_path):
    result = run_case(generate(SEED, 8), timeout=60)  # a tile_rows kernel
    assert result.outcome is Outcome.MATCH
    path = tmp_path / f"test_{result.case.name}.py"
    path.write_text(regression_test(result.case, result))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    getattr(module, f"test_{result.case.name}")()


def _constants_cases(count: int) -> list[Case]:
    return [generate(SEED, i, kinds=("scope_constants",)) for i in range(count)]


def test_the_scope_constants_kind_changes_globals_and_closure_values_between_calls():
    cases = _constants_cases(16)
    assert {case.closure for case in cases} == {False, True}
    assert all(any(c.change for c in case.constants) and "def rebind_constants():" in case.source()
               for case in cases)
    sources = "".join(case.source() for case in cases)
    for form in ("if USE_OP:", "COEFFS[0]", "WEIGHTS[0] = ", "CFG.norm.eps", 'TABLE["scale"]', "nonlocal "):
        assert form in sources
    for closure in (False, True):  # one case of each scope, run twice with other values: it matches
        case = next(c for c in cases if c.closure is closure)
        result = run_case(case, timeout=60)
        assert result.outcome is Outcome.MATCH, result.detail


def _scaled_by_a_global() -> Case:
    body = (Line(0, "n, = x0.size()"), Line(0, "out = torch.empty_like(x0)"), Line(0, "for tn in hl.tile(n):"),
            Line(1, "out[tn] = x0[tn] * SCALE"), Line(0, "return out"))
    return Case("scope_constants", "scaled_by_a_global", (InputSpec("x0", ("n",)),), body, {"n": 256},
                constants=(ScopeConstant("SCALE", "2.0", "SCALE = 3.0"),))


def test_the_scope_constants_kind_finds_constants_missing_from_the_variant_key(monkeypatch):
    """Without the constants in the variant key (issue 20), the second call reuses the variant
    compiled with the first value: the fuzzer sees the mismatch."""
    from pallasite.runtime import compiled as compiled_module, kernel as kernel_module
    from pallasite.runtime.scope import read_scope

    assert run_case(_scaled_by_a_global(), timeout=60).outcome is Outcome.MATCH
    def without_constants(fn, reads, constants=True):
        return read_scope(fn, reads, constants=False)[0], ()

    for module in (kernel_module, compiled_module):  # the key, and the check of a compiled variant
        monkeypatch.setattr(module, "read_scope", without_constants)
    result = run_case(_scaled_by_a_global(), timeout=60)
    assert result.outcome is Outcome.MISMATCH, result.detail


def test_a_written_regression_test_of_a_constants_case_calls_twice(tmp_path):
    case = _scaled_by_a_global().with_(closure=True)
    result = run_case(case, timeout=60)
    text = regression_test(result.case, result)
    assert "rebind_constants()" in text
    path = tmp_path / "test_scaled_by_a_global.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    module.test_scaled_by_a_global()
    assert callable(module.make_scaled_by_a_global)  # the closure form was written


# ------------------------------------------------- narrowing reads, lowering --


def test_the_narrowing_kind_reads_runs_of_loaded_blocks_under_every_loop_type():
    cases = [generate(SEED, i, ("narrowing",)) for i in range(40)]
    sources = [case.source() for case in cases]
    loop_types = {t for case in cases for t in ((case.loop_type,) if isinstance(case.loop_type, str)
                                                 else case.loop_type)}
    assert loop_types == set(LOOP_TYPES)
    assert {case.tags[1] for case in cases} == {"grid", "nested", "jagged"}  # where the outer tile comes from
    for form in ("blk[ts.index]", "blk[ts.begin]", "blk[ts.index, None", "wb[ts.index", "][ts.begin]",
                 "hl.tile(tt.end - tt.begin", "hl.tile(min(tt.end - tt.begin", "out[tt.begin + ts.begin",
                 "for ts, th in hl.tile([", "blk[ts, th]"):
        assert any(form in source for source in sources), form


def _vmem_limit_case() -> Case:
    """A small kernel whose config asks for 96 MiB of scoped VMEM: v5e and v6e have it, v7x not."""
    body = (
        Line(0, "m, n = x.size()"),
        Line(0, "out = torch.empty([m, n], dtype=torch.float32, device=x.device)"),
        Line(0, "for tm, tn in hl.tile([m, n]):"),
        Line(1, "out[tm, tn] = torch.sigmoid(x[tm, tn])"),
        Line(0, "return out"),
    )
    return Case("pointwise", "asks_for_vmem", (InputSpec("x", ("m", "n")),), body, {"m": 16, "n": 128},
                block_sizes=(8, 128), knobs=(("vmem_limit_bytes", 96 * 2**20),))


@pytest.mark.no_tpu_lowering(reason="runs a case v7x cannot plan, to see the fuzzer report it")
def test_with_lowering_a_case_that_runs_but_does_not_lower_is_a_finding(monkeypatch):
    monkeypatch.setenv("PALLASITE_TPU_CHIP", "v6e")  # interpret mode runs it as a v6e would
    case = _vmem_limit_case()
    assert run_case(case, timeout=60).outcome is Outcome.MATCH
    result = run_case(case, timeout=60, lowering=True)
    assert result.outcome is Outcome.NO_LOWER and result.outcome.is_finding
    assert "does not plan for TPU v7x" in result.detail and "over the 64 MiB" in result.detail
    assert "check_tpu_lowering(asks_for_vmem, asks_for_vmem_inputs(), **config)" in regression_test(case, result)


def _tile_into_fixed_slice() -> Case:
    """A column tile stored into a fixed-size slice of its block's width (n = 100, block 64: the
    last tile is 36 wide)."""
    body = (
        Line(0, "m, n = x.size()"),
        Line(0, "out = torch.zeros([m, 128], dtype=torch.float32, device=x.device)"),
        Line(0, "for tm in hl.tile(m):"),
        Line(1, "for tn in hl.tile(n):"),
        Line(2, "out[tm, 0:tn.block_size] = x[tm, tn]"),
        Line(0, "return out"),
    )
    return Case("window_shapes", "tile_into_fixed_slice", (InputSpec("x", ("m", "n")),), body,
                {"m": 16, "n": 100}, block_sizes=(8, 64), loop_type="fori_loop")


@pytest.mark.no_tpu_lowering(reason="its variants are planned with the compiled check patched out or in")
def test_compiling_what_reference_mode_refuses_and_refusing_what_it_runs_are_findings(monkeypatch):
    """The partial tile into a fixed slice: both refuse it (torch raises on the short tile).
    Without the compiled check it ran (its padded tail stored as data): a ref-mode error;
    with a check refusing everything, a false refusal. Both are findings, to be shrunk."""
    from pallasite.plan import passes

    case = _tile_into_fixed_slice()
    assert run_case(case, timeout=60).outcome is Outcome.REJECTED
    monkeypatch.setattr(passes, "check_extents", lambda body, padded, dims: ())
    result = run_case(case, timeout=60)
    assert result.outcome is Outcome.REF_ERROR and result.outcome.is_finding, result.detail

    def refuse(body, padded, dims):
        raise exc.ShapeMismatch("every store refused")

    monkeypatch.setattr(passes, "check_extents", refuse)
    fine = case.with_(dims={"m": 16, "n": 256})  # full tiles: reference mode runs it
    result = run_case(fine, timeout=60)
    assert result.outcome is Outcome.FALSE_REFUSAL and result.outcome.is_finding, result.detail
    assert "reference mode runs it" in result.detail
