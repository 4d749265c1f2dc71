"""`pallas_loop_type` per inner loop (issue 10): a list with one loop type per inner loop
(every device loop's, in source order, nested loops after the loop holding them), or one
string for all of them (back-compatible). The plan records each loop's choice; the config
space has one loop-type gene per inner loop."""
from __future__ import annotations

import itertools
import random

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.codegen import generate_module
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref

from plan_helpers import only_call, randn



@pallasite.kernel
def centre_by_other(x, y):
    """Two inner loops: the first sums rows of x (x streams under a streaming type), the
    second writes y minus that mean (y and out stream)."""
    m, n = x.size()
    out = torch.empty_like(y)
    for tile_m in hl.tile(m):
        total = hl.zeros([tile_m], dtype=torch.float32)
        for tile_n in hl.tile(n):
            total = total + x[tile_m, tile_n].sum(-1)
        mean = total / n
        for tile_n in hl.tile(n):
            out[tile_m, tile_n] = y[tile_m, tile_n] - mean[:, None]
    return out


ARGS = (randn(16, 512, seed=1), randn(16, 512, seed=2))
CONFIG = {"block_sizes": [8, 128, 128]}


def _expected(x, y):
    return y - x.mean(-1, keepdim=True)


MIXED = [list(pair) for pair in itertools.product(LOOP_TYPES, repeat=2) if pair[0] != pair[1]]


@pytest.mark.parametrize("loop_types", MIXED, ids="+".join)
def test_mixed_loop_types_match_torch(loop_types):
    code, out = code_and_output(centre_by_other, ARGS, pallas_loop_type=loop_types, **CONFIG)
    torch.testing.assert_close(out, _expected(*ARGS), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(run_ref(centre_by_other, ARGS, pallas_loop_type=loop_types, **CONFIG),
                               _expected(*ARGS), rtol=1e-5, atol=1e-5)


# every loop type once first and once second, beside another
@pytest.mark.parametrize("loop_types", [[t, LOOP_TYPES[i - 1]] for i, t in enumerate(LOOP_TYPES)], ids="+".join)
def test_mixed_loop_types_lower_to_mosaic(loop_types):
    check_tpu_lowering(centre_by_other, ARGS, pallas_loop_type=loop_types, **CONFIG)


def test_the_plan_records_each_loops_type_in_source_order():
    call = only_call(centre_by_other, ARGS, pallas_loop_type=["emit_pipeline", "unroll"], **CONFIG)
    assert [plan.strategy for plan in call.inner_loops.values()] == ["emit_pipeline", "unroll"]
    # x streams in the first loop; y and out stay resident under the second (unroll)
    streamed = {s.symbol.name for plan in call.inner_loops.values() for s in plan.streams}
    assert streamed == {"x"}
    flipped = only_call(centre_by_other, ARGS, pallas_loop_type=["unroll", "fori_loop"], **CONFIG)
    assert {s.symbol.name for plan in flipped.inner_loops.values() for s in plan.streams} == {"y", "out"}


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_one_string_still_means_every_inner_loop(loop_type):
    call = only_call(centre_by_other, ARGS, pallas_loop_type=loop_type, **CONFIG)
    assert [plan.strategy for plan in call.inner_loops.values()] == [loop_type, loop_type]
    same = only_call(centre_by_other, ARGS, pallas_loop_type=[loop_type, loop_type], **CONFIG)
    assert [p.strategy for p in same.inner_loops.values()] == [loop_type, loop_type]
    # the same module, but for the header quoting the config
    assert _body(pallasite.Config(pallas_loop_type=loop_type, **CONFIG)) == \
        _body(pallasite.Config(pallas_loop_type=[loop_type, loop_type], **CONFIG))


def _body(config):
    code = generate_module(centre_by_other.bind(ARGS).plan(config))
    return [line for line in code.splitlines() if not (line.startswith("#") and "pallas_loop_type" in line)]


def test_a_list_of_the_wrong_length_is_a_clear_error():
    with pytest.raises(exc.InvalidConfig, match=r"pallas_loop_type has 3 entries but the kernel has 2 "
                                                r"inner loop\(s\).*line \d+ .*for tile_n in hl.tile\(n\)"):
        centre_by_other.bind(ARGS).plan(pallasite.Config(pallas_loop_type=["unroll"] * 3, **CONFIG))
    with pytest.raises(exc.InvalidConfig, match="Invalid pallas_loop_type 'while'"):
        pallasite.Config(pallas_loop_type=["unroll", "while"])
    with pytest.raises(exc.InvalidConfig, match="a list of them"):
        pallasite.Config(pallas_loop_type=3)


def test_the_space_has_one_loop_type_gene_per_inner_loop():
    bound = centre_by_other.bind(ARGS)
    space = bound.config_spec
    paths = [gene.path for gene in space.genes()]
    assert ("pallas_loop_type", 0) in paths and ("pallas_loop_type", 1) in paths
    assert not any(path == ("pallas_loop_type", 2) for path in paths)
    seen = set()
    for config in space.enumerate(limit=400):
        value = config.get("pallas_loop_type")
        # a uniform choice is spelled as one string, a mixed one as a list of two
        assert isinstance(value, str) or (isinstance(value, list) and len(value) == 2 and value[0] != value[1])
        seen.add(tuple(value) if isinstance(value, list) else value)
    assert {("unroll", "emit_pipeline"), ("fori_loop", "unroll")} <= seen and "fori_loop" in seen
    rng = random.Random(0)
    default = space.normalize(space.default_config())
    moved = [space.mutate(default, rng) for _ in range(40)] + [space.sample(rng) for _ in range(40)]
    assert any(isinstance(c.get("pallas_loop_type"), list) for c in moved)
    for config in moved + space.neighbours(default):
        bound.plan(space.normalize(config))  # each names a type per loop that plans


@pallasite.kernel
def nested_sums(x):
    """Nested inner loops: the list's first entry is the outer one, the second the nested."""
    m, a, b = x.size()
    out = torch.empty([m, 128], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        acc = hl.zeros([tile_m, 128], dtype=torch.float32)
        for tile_a in hl.tile(a):
            for tile_b in hl.tile(b):
                acc = acc + x[tile_m, tile_a, tile_b].sum(1)
        out[tile_m, :] = acc
    return out


NESTED_ARGS = (randn(8, 16, 256, seed=3),)


@pytest.mark.parametrize("loop_types", [["emit_pipeline", "fori_loop"], ["unroll", "emit_pipeline"]],
                         ids="+".join)
def test_nested_inner_loops_take_a_type_each(loop_types):
    (x,) = NESTED_ARGS
    expected = x.reshape(8, 16, 2, 128).sum(1).sum(1)
    config = {"block_sizes": [8, 8, 128], "pallas_loop_type": loop_types}
    call = only_call(nested_sums, NESTED_ARGS, **config)
    assert [plan.strategy for plan in call.inner_loops.values()] == loop_types
    _, out = code_and_output(nested_sums, NESTED_ARGS, **config)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-4)
    check_tpu_lowering(nested_sums, NESTED_ARGS, **config)
