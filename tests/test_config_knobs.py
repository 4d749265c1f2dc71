"""Helion config knobs with real meaning here (issue #7 §6): `pallas_load_buffer_count`,
`pallas_pre_broadcast`, `reduction_loops` — each validated, in the compile key, and
honoured by the plan and the generated code."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.ir import walk_nodes
from pallasite.plan.loops import LOOP_TYPES, STRATEGIES, loop_types
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref
from plan_helpers import matmul, matmul_bias_steps, only_call, randn

STREAMING = loop_types(streams=True)  # the knobs of streams apply to loop types that stream


# ---------------------------------------------------------------- pallas_load_buffer_count

@pallasite.kernel
def row_scale(x, w):
    """Streams x in and out through an inner loop (an input and an output stream)."""
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        for tile_n in hl.tile(n):
            out[tile_m, tile_n] = x[tile_m, tile_n] * w[tile_m, None]
    return out


@pytest.mark.parametrize("loop_type", STREAMING)
@pytest.mark.parametrize("buffers", [3, 4])
def test_load_buffer_count_keeps_results(loop_type, buffers):
    x, y = randn(8, 640, seed=1), randn(640, 128, seed=2)
    config = {"block_sizes": [8, 128, 128], "pallas_loop_type": loop_type, "pallas_load_buffer_count": buffers}
    code, out = code_and_output(matmul, (x, y), **config)
    torch.testing.assert_close(out, x @ y, rtol=1e-4, atol=1e-4)
    plan = only_call(matmul, (x, y), **config)
    (loop_plan,) = plan.inner_loops.values()
    assert {s.buffers for s in loop_plan.streams} == {buffers}
    if loop_type == "emit_pipeline":
        assert (f"pipeline_mode=pl.Buffered({buffers})" in code) == (buffers != 2)
    else:
        assert f"% {buffers}" in code


@pytest.mark.parametrize("loop_type", STREAMING)
def test_load_buffer_count_grows_the_vmem_estimate(loop_type):
    x, y = randn(16, 640, seed=1), randn(640, 256, seed=2)
    base = {"block_sizes": [8, 128, 128], "pallas_loop_type": loop_type}
    sizes = [only_call(matmul, (x, y), **base, pallas_load_buffer_count=n).vmem_bytes for n in (2, 3, 4)]
    assert sizes[0] < sizes[1] < sizes[2]
    assert only_call(matmul, (x, y), **base).vmem_bytes == sizes[0]  # 2 is the default


@pytest.mark.parametrize("loop_type", STREAMING)
@pytest.mark.parametrize("buffers", [3])
def test_load_buffer_count_with_output_streams(loop_type, buffers):
    x, w = randn(16, 700, seed=3), randn(16, seed=4)
    config = {"block_sizes": [8, 128], "pallas_loop_type": loop_type, "pallas_load_buffer_count": buffers}
    _, out = code_and_output(row_scale, (x, w), **config)
    torch.testing.assert_close(out, x * w[:, None])
    plan = only_call(row_scale, (x, w), **config)
    depth = {s.symbol.name: s.buffers for p in plan.inner_loops.values() for s in p.streams}
    # emit_pipeline writes outputs back with two buffers at most (JAX's pipeline)
    assert depth == {"x": buffers, "out": buffers if loop_type == "fori_loop" else 2}


@pallasite.kernel
def causal_row_sums(q, k):
    s, d = q.size()
    out = torch.empty_like(q)
    for tq in hl.tile(s):
        acc = hl.zeros([tq, d], dtype=torch.float32)
        for tk in hl.tile(0, min(k.size(0), tq.end)):
            acc = acc + q[tq, :] * k[tk, :].sum(0)[None, :]
        out[tq, :] = acc
    return out


@pytest.mark.parametrize("loop_type", STREAMING)
def test_more_buffers_than_the_streamed_tensor_has_tiles(loop_type):
    # (fuzzer finding) k has one tile of 1 row: the copy a third buffer prefetches, of
    # tile 1, would start past k. The loop never runs it, but a window at a constant
    # start past the tensor failed to trace, before anything ran.
    q, k = randn(1, 128, seed=5), randn(1, 128, seed=6)
    config = {"block_sizes": [1, 1], "pallas_loop_type": loop_type, "pallas_load_buffer_count": 3}
    _, out = code_and_output(causal_row_sums, (q, k), **config)
    torch.testing.assert_close(out, q * k.sum(0)[None, :])
    check_tpu_lowering(causal_row_sums, (q, k), **config)


@pytest.mark.parametrize("loop_type", STREAMING)
def test_load_buffer_count_lowers_to_mosaic(loop_type):
    x, y = randn(16, 640, seed=1), randn(640, 256, seed=2)
    check_tpu_lowering(matmul, (x, y), block_sizes=[8, 128, 128], pallas_loop_type=loop_type,
                       pallas_load_buffer_count=3)
    x, w = randn(16, 700, seed=3), randn(16, seed=4)
    check_tpu_lowering(row_scale, (x, w), chips=("v6e",), block_sizes=[8, 128], pallas_loop_type=loop_type,
                       pallas_load_buffer_count=3)


def test_load_buffer_count_unroll_is_a_documented_no_op():
    x, y = randn(8, 256, seed=1), randn(256, 128, seed=2)
    base = {"block_sizes": [8, 128, 128], "pallas_loop_type": "unroll"}
    code2, out2 = code_and_output(matmul, (x, y), **base)
    code3, out3 = code_and_output(matmul, (x, y), **base, pallas_load_buffer_count=3)
    assert _body(code2) == _body(code3) and torch.equal(out2, out3)


def _body(code: str) -> list[str]:
    """The generated code without its header (which names the config)."""
    return [line for line in code.splitlines() if not line.startswith(("# Generated", "# Config"))]


@pytest.mark.parametrize("value", [1, 0, "3", 2.0, True])
def test_bad_load_buffer_count(value):
    with pytest.raises(exc.InvalidConfig, match="pallas_load_buffer_count must be an int >= 2"):
        pallasite.Config(pallas_load_buffer_count=value)


@pallasite.kernel
def two_row_sums(x, y):
    """Two sibling inner loops, streaming x and then y."""
    m, n = x.size()
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        acc = hl.zeros([tile_m], dtype=torch.float32)
        for tile_n in hl.tile(n, block_size=128):
            acc = acc + x[tile_m, tile_n].sum(1)
        for tile_n in hl.tile(n, block_size=128):
            acc = acc + 2.0 * y[tile_m, tile_n].sum(1)
        out[tile_m] = acc
    return out


@pytest.mark.parametrize("loop_type", STREAMING)
@pytest.mark.parametrize("buffers, depths", [([3, None], (3, 2)), ([None, 4], (2, 4)), ((3, 3), (3, 3)),
                                             (None, (2, 2))])
def test_load_buffer_count_per_inner_loop(loop_type, buffers, depths):
    """Helion's form: one entry per inner loop (source order), None for the default."""
    x, y = randn(16, 640, seed=7), randn(16, 640, seed=8)
    config = {"block_sizes": [8], "pallas_loop_type": loop_type, "pallas_load_buffer_count": buffers}
    _, out = code_and_output(two_row_sums, (x, y), **config)
    torch.testing.assert_close(out, x.sum(1) + 2 * y.sum(1), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(run_ref(two_row_sums, (x, y), **config), out, rtol=1e-5, atol=1e-4)
    plan = only_call(two_row_sums, (x, y), **config)
    found = {s.symbol.name: s.buffers for p in plan.inner_loops.values() for s in p.streams}
    assert found == dict(zip(("x", "y"), depths))


def test_a_load_buffer_count_list_has_one_entry_per_inner_loop():
    x, y = randn(16, 640, seed=7), randn(16, 640, seed=8)
    with pytest.raises(exc.InvalidConfig, match=r"pallas_load_buffer_count has 3 entries but the kernel has 2 inner"):
        two_row_sums.bind((x, y)).plan({"block_sizes": [8], "pallas_load_buffer_count": [2, 3, 3]})
    for bad in ([1, 2], [2, "3"], [[2]]):
        with pytest.raises(exc.InvalidConfig, match="pallas_load_buffer_count must be"):
            pallasite.Config(pallas_load_buffer_count=bad)


# ---------------------------------------------------------------- pallas_pre_broadcast

def _bias_steps_reference(x, y, b, block_k):
    steps = -(-x.shape[1] // block_k)
    return x @ y + steps * b


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_pre_broadcast_widens_the_bias_once_before_the_loop(loop_type):
    x, y, b = randn(8, 256, seed=5), randn(256, 128, seed=6), randn(128, seed=7)
    base = {"block_sizes": [8, 128, 128], "pallas_loop_type": loop_type}
    code_off, out_off = code_and_output(matmul_bias_steps, (x, y, b), **base)
    code_on, out_on = code_and_output(matmul_bias_steps, (x, y, b), **base, pallas_pre_broadcast=True)
    torch.testing.assert_close(out_on, _bias_steps_reference(x, y, b, 128), rtol=1e-4, atol=1e-4)
    assert torch.equal(out_on, out_off)
    assert "jnp.broadcast_to(bias, (8, 128))" in code_on and "bias_wide" in code_on
    assert "broadcast_to(bias" not in code_off
    # computed before the inner loop starts, read inside it
    lines = code_on.splitlines()
    widened = next(i for i, line in enumerate(lines) if "bias_wide =" in line)
    loop_start = next(i for i, line in enumerate(lines) if "inner loop 'tile_k'" in line)
    assert widened < loop_start
    plan = only_call(matmul_bias_steps, (x, y, b), **base, pallas_pre_broadcast=True)
    ((widen,),) = plan.pre_broadcasts.values()
    assert widen.shape == (8, 128) and widen.value.shape == (128,)
    check_tpu_lowering(matmul_bias_steps, (x, y, b), chips=("v7x",), **base, pallas_pre_broadcast=True)


def test_pre_broadcast_is_a_no_op_below_128_lanes():
    x, y, b = randn(8, 256, seed=5), randn(256, 64, seed=6), randn(64, seed=7)
    base = {"block_sizes": [8, 64, 128], "pallas_loop_type": "fori_loop"}
    code_off, out_off = code_and_output(matmul_bias_steps, (x, y, b), **base)
    code_on, out_on = code_and_output(matmul_bias_steps, (x, y, b), **base, pallas_pre_broadcast=True)
    assert _body(code_on) == _body(code_off) and torch.equal(out_on, out_off)
    assert only_call(matmul_bias_steps, (x, y, b), **base, pallas_pre_broadcast=True).pre_broadcasts == {}


@pytest.mark.parametrize("value", [1, "yes", None])
def test_bad_pre_broadcast(value):
    with pytest.raises(exc.InvalidConfig, match="pallas_pre_broadcast must be True or False"):
        pallasite.Config(pallas_pre_broadcast=value)


# ---------------------------------------------------------------- reduction_loops

@pallasite.kernel
def row_reductions(x):
    """sum / mean / amax / amin of each row, over the whole last dim."""
    m, n = x.size()
    out = torch.empty([m, 4], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        row = x[tile_m, :]
        out[tile_m, 0] = (row * 2.0).sum(-1).to(torch.float32)
        out[tile_m, 1] = row.mean(-1).to(torch.float32)
        out[tile_m, 2] = torch.amax(row, dim=-1).to(torch.float32)
        out[tile_m, 3] = torch.amin(row, dim=-1).to(torch.float32)
    return out


def _row_reductions_reference(x):
    return torch.stack([(x * 2.0).sum(-1), x.mean(-1), x.amax(-1), x.amin(-1)], dim=1).float()


@pallasite.kernel
def softmax_rows(x):
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        out[tile_m, :] = torch.softmax(x[tile_m, :], dim=-1)
    return out


@pallasite.kernel
def layer_norm_rows(x, w, b, eps: float):
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        row = x[tile_m, :].to(torch.float32)
        mean = row.mean(-1, keepdim=True)
        centered = row - mean
        var = (centered * centered).mean(-1, keepdim=True)
        out[tile_m, :] = (centered * torch.rsqrt(var + eps) * w[None, :] + b[None, :]).to(out.dtype)
    return out


@pallasite.kernel
def blocked_row_sums(x):
    """A whole-dim reduction inside an inner loop over a leading dim."""
    k, m, n = x.size()
    out = torch.empty([m, 1], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        acc = hl.zeros([tile_m], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = acc + x[tile_k, tile_m, :].sum(-1).sum(0)
        out[tile_m, 0] = acc
    return out


@pytest.mark.parametrize("n, chunk", [(300, 128), (512, 128), (640, 256), (130, 128)])
def test_reduction_loops_row_reductions(n, chunk):
    x = randn(16, n, seed=n)
    config = {"block_sizes": [8], "reduction_loops": [chunk]}
    code, out = code_and_output(row_reductions, (x,), **config)
    torch.testing.assert_close(out, _row_reductions_reference(x), rtol=1e-5, atol=1e-5)
    plan = only_call(row_reductions, (x,), **config)
    looped = sorted(plan.looped_reductions.values(), key=lambda r: r.node_id)
    trips = -(-n // chunk)
    assert [r.chunk for r in looped] == [chunk] * 4 and {r.trips for r in looped} == {trips}
    assert {r.tail_masked for r in looped} == {n % chunk != 0}
    assert code.count("lax.fori_loop(0, ") == 4 and f"pl.ds(pl.multiple_of(" in code
    # the row is never loaded whole: only chunk by chunk
    assert "x_ref[...]" not in code and f"x_ref[:, :{n}]" not in code
    chips = {} if (n, chunk) == (300, 128) else {"chips": ("v7x",)}  # every generation once
    check_tpu_lowering(row_reductions, (x,), **chips, **config)


@pallasite.kernel
def row_truths(x):
    """all / any of each row (nonzero is true), over the whole last dim."""
    m, n = x.size()
    out = torch.empty([m, 2], dtype=torch.bool, device=x.device)
    for tm in hl.tile(m):
        out[tm, 0] = x[tm, :].all(1)
        out[tm, 1] = torch.any(x[tm, :] > 0.5, dim=1)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int8, torch.bool])
@pytest.mark.parametrize("n, chunk", [(300, 128), (512, 256)])
def test_reduction_loops_carry_all_and_any_across_chunks(dtype, n, chunk):
    """Trial LL: all/any with reduction_loops were refused compiled and run by reference mode.
    A zero (or an element past 0.5) in only one chunk, or only in the tail, decides its row;
    a fraction like 0.25 is true (a float source is never cast to an int)."""
    gen = torch.Generator().manual_seed(n)
    x = (torch.rand(16, n, generator=gen) + 0.25)
    x[1, 5], x[2, n - 1], x[3, :] = 0, 0, 0.25  # a zero in the first chunk, one in the tail
    x[4, :] = 0
    x = x.to(dtype) if dtype != torch.bool else x > 0.3
    expected = torch.stack([x.all(1), torch.any(x > 0.5, dim=1)], dim=1)
    config = {"block_sizes": [8], "reduction_loops": [chunk]}
    code, out = code_and_output(row_truths, (x,), **config)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(row_truths, (x,), **config), expected)
    assert code.count("lax.fori_loop(0, ") == 2


def test_reduction_loops_none_is_one_block():
    x = randn(16, 300, seed=1)
    code_none, out_none = code_and_output(row_reductions, (x,), block_sizes=[8], reduction_loops=[None])
    code_default, out_default = code_and_output(row_reductions, (x,), block_sizes=[8])
    assert _body(code_none) == _body(code_default) and torch.equal(out_none, out_default)
    assert only_call(row_reductions, (x,), block_sizes=[8], reduction_loops=[None]).looped_reductions == {}
    # a chunk as long as the dim is one block too
    assert only_call(row_reductions, (x,), block_sizes=[8], reduction_loops=[384]).looped_reductions == {}


def test_reduction_loops_bfloat16_sums_accumulate_in_float32():
    x = randn(16, 1000, seed=2, dtype=torch.bfloat16)
    _, out = code_and_output(row_reductions, (x,), block_sizes=[8], reduction_loops=[256])
    _, whole = code_and_output(row_reductions, (x,), block_sizes=[8])
    torch.testing.assert_close(out, whole, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(out, _row_reductions_reference(x.float()).to(torch.bfloat16).float(),
                               rtol=2e-2, atol=5e-2)
    check_tpu_lowering(row_reductions, (x,), chips=("v7x",), block_sizes=[8], reduction_loops=[256])


def test_reduction_loops_softmax_two_passes():
    x = randn(16, 300, seed=3) * 4
    config = {"block_sizes": [8], "reduction_loops": [128]}
    code, out = code_and_output(softmax_rows, (x,), **config)
    torch.testing.assert_close(out, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    plan = only_call(softmax_rows, (x,), **config)
    nodes = {node.id: node for node in walk_nodes(plan.call.loop.body)}
    assert sorted(nodes[r.node_id].op for r in plan.looped_reductions.values()) == ["amax", "sum"]
    # the row is still needed whole (exp(x - max) / sum), so it is loaded whole once too
    assert "x_ref[:, :300]" in code
    check_tpu_lowering(softmax_rows, (x,), **config)


def test_reduction_loops_layer_norm():
    x, w, b = randn(16, 400, seed=4), randn(400, seed=5), randn(400, seed=6)
    config = {"block_sizes": [8], "reduction_loops": [128]}
    _, out = code_and_output(layer_norm_rows, (x, w, b, 1e-5), **config)
    expected = torch.nn.functional.layer_norm(x, (400,), w, b, 1e-5)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    assert len(only_call(layer_norm_rows, (x, w, b, 1e-5), **config).looped_reductions) == 2
    check_tpu_lowering(layer_norm_rows, (x, w, b, 1e-5), chips=("v6e",), **config)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("n", [384, 300])
def test_reduction_loops_inside_inner_loops(loop_type, n):
    x = randn(6, 16, n, seed=7)
    config = {"block_sizes": [8, 4], "pallas_loop_type": loop_type, "reduction_loops": [128]}
    _, out = code_and_output(blocked_row_sums, (x,), **config)
    torch.testing.assert_close(out, x.sum(-1).sum(0)[:, None], rtol=1e-4, atol=1e-4)
    plan = only_call(blocked_row_sums, (x,), **config)
    (looped,) = plan.looped_reductions.values()
    assert looped.chunk == 128 and looped.tail_masked == (n % 128 != 0)
    streamed = {s.symbol.name for p in plan.inner_loops.values() for s in p.streams}
    # a dim of whole chunks may still be streamed; otherwise the block stays resident, padded
    assert ("x" in streamed) == (STRATEGIES[loop_type].streams and n % 128 == 0)
    check_tpu_lowering(blocked_row_sums, (x,), chips=("v7x",), **config)


def test_reduction_loops_config_space():
    x = randn(16, 300, seed=1)
    spec = row_reductions.bind((x,)).config_spec
    (dim,) = spec.reduction_dims
    assert dim.extent == 300 and dim.candidates() == [128, 256]
    x, w, b = randn(16, 400, seed=4), randn(400, seed=5), randn(400, seed=6)
    (dim,) = layer_norm_rows.bind((x, w, b, 1e-5)).config_spec.reduction_dims
    assert dim.extent == 400  # mean and variance share the entry


@pytest.mark.parametrize("value, message", [
    ([100], "not a legal chunk"),
    ([128, None], "1 reduction dim"),
])
def test_bad_reduction_loops_for_the_kernel(value, message):
    x = randn(16, 300, seed=1)
    with pytest.raises(exc.InvalidConfig, match=message):
        row_reductions.bind((x,)).resolve_config({"block_sizes": [8], "reduction_loops": value})


def test_reduction_loops_of_nones_run_at_any_length():
    """A Helion config may count reduction dims differently; None entries change nothing."""
    x = randn(16, 300, seed=1)
    _, out = code_and_output(row_reductions, (x,), block_sizes=[8], reduction_loops=[None, None])
    torch.testing.assert_close(out, _row_reductions_reference(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("value", [128, [0], ["a"], [True]])
def test_bad_reduction_loops_values(value):
    with pytest.raises(exc.InvalidConfig, match="reduction_loops must be a list"):
        pallasite.Config(reduction_loops=value)


@pallasite.kernel
def argmax_rows(x):
    m, n = x.size()
    out = torch.empty([m, 2], dtype=torch.int32, device=x.device)
    for tile_m in hl.tile(m):
        row = x[tile_m, :]
        out[tile_m, 0] = torch.argmax(row, dim=-1).to(torch.int32)
        out[tile_m, 1] = torch.argmin(row * 1.0, dim=-1).to(torch.int32)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bfloat16])
def test_reduction_loops_argmax_argmin_first_occurrence(dtype):
    x = torch.randint(-3, 4, (16, 300), generator=torch.Generator().manual_seed(12)).to(dtype)
    x[0, 200] = 50  # a winner in a later chunk
    x[1, 290] = -50  # ... and in the masked tail chunk
    if dtype.is_floating_point:
        x[2, 150] = float("nan")  # NaN wins, as in torch
    config = {"block_sizes": [8], "reduction_loops": [128]}
    _, out = code_and_output(argmax_rows, (x,), **config)
    expected = torch.stack([x.argmax(-1), (x * 1.0).argmin(-1)], dim=1).to(torch.int32)
    assert torch.equal(out, expected)
    assert len(only_call(argmax_rows, (x,), **config).looped_reductions) == 2
    # Mosaic's argmax takes float32 only, looped or not: bf16 is widened, int32 is max + first index
    check_tpu_lowering(argmax_rows, (x,), chips=("v7x",), **config)


@pallasite.kernel
def logsumexp_rows(x):
    m, n = x.size()
    out = torch.empty([m, 1], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        out[tile_m, 0] = torch.logsumexp(x[tile_m, :], dim=-1)
    return out


@pallasite.kernel
def cumsum_then_sum(x):
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        row = x[tile_m, :]
        out[tile_m, :] = row - row.sum(-1, keepdim=True)
        total = (out[tile_m, :] * 2.0).sum(-1, keepdim=True)
        out[tile_m, :] = row * total
    return out


@pytest.mark.parametrize("kernel, why", [
    (logsumexp_rows, "only 'sum', 'mean', 'amax', 'amin', 'prod', 'argmax', 'argmin', 'all', 'any' carry partials"),
    (cumsum_then_sum, "'out' is also written in this loop"),
])
def test_unloopable_reductions_name_the_line(kernel, why):
    x = randn(16, 300, seed=1)
    with pytest.raises(exc.BackendUnsupported, match="Set reduction_loops\\[0\\] to None") as info:
        code_and_output(kernel, (x,), block_sizes=[8], reduction_loops=[128])
    assert why in str(info.value) and "test_config_knobs.py" in str(info.value)
    _, out = code_and_output(kernel, (x,), block_sizes=[8], reduction_loops=[None])  # still runs whole


def test_reduction_loops_shrink_the_vmem_estimate():
    """The whole-row intermediate (row * 2.0) exists only chunk by chunk."""
    x = randn(64, 4096, seed=8)
    whole = only_call(row_reductions, (x,), block_sizes=[64]).vmem_bytes
    looped = only_call(row_reductions, (x,), block_sizes=[64], reduction_loops=[512]).vmem_bytes
    assert looped < whole


def test_knobs_are_part_of_the_compile_key():
    keys = {pallasite.Config(block_sizes=[8], **extra).key() for extra in (
        {}, {"reduction_loops": [128]}, {"reduction_loops": [None]}, {"pallas_pre_broadcast": True},
        {"pallas_load_buffer_count": 3})}
    assert len(keys) == 5


@pytest.mark.parametrize("key", ["num_warps", "num_stages"])
def test_gpu_only_keys_are_dropped_and_named(key):
    config = pallasite.Config(**{key: 4})  # the kernel warns about them (tests/test_helion_settings.py)
    assert key not in config and config.ignored_keys == (key,)


@pallasite.kernel
def batched_row_max(x):
    b, m, n = x.size()
    out = torch.empty([b, m], dtype=x.dtype, device=x.device)
    for g in hl.grid(b):
        for tile_m in hl.tile(m):
            out[g, tile_m] = torch.amax(x[g, tile_m, :], dim=-1)
    return out


@pallasite.kernel
def column_sums(x):
    """A reduction over the whole second-to-last (sublane) dim."""
    m, n = x.size()
    out = torch.empty([1, n], dtype=torch.float32, device=x.device)
    for tile_n in hl.tile(n):
        out[0, tile_n] = x[:, tile_n].to(torch.float32).sum(0)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reduction_loops_over_a_sublane_dim(dtype):
    x = randn(100, 256, seed=10, dtype=dtype)
    chunk = 16 if dtype == torch.bfloat16 else 8
    config = {"block_sizes": [128], "reduction_loops": [chunk]}
    _, out = code_and_output(column_sums, (x,), **config)
    torch.testing.assert_close(out, x.float().sum(0, keepdim=True), rtol=1e-4, atol=1e-3)
    (looped,) = only_call(column_sums, (x,), **config).looped_reductions.values()
    assert looped.axis == 0 and looped.trips == -(-100 // chunk) and looped.tail_masked
    check_tpu_lowering(column_sums, (x,), chips=("v7x",), **config)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_reduction_loops_with_a_grid_index_and_a_partial_tile(loop_type):
    x = randn(3, 20, 300, seed=9)
    config = {"block_sizes": [8], "pallas_loop_type": loop_type, "reduction_loops": [128]}
    _, out = code_and_output(batched_row_max, (x,), **config)
    torch.testing.assert_close(out, x.amax(-1))
    assert len(only_call(batched_row_max, (x,), **config).looped_reductions) == 1


@pallasite.kernel
def row_products(x):
    m, n = x.size()
    out = torch.empty([m, 1], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        out[tile_m, :] = torch.prod(x[tile_m, :], dim=-1, keepdim=True)
    return out


def test_reduction_loops_prod():
    x = 1.0 + 0.01 * randn(16, 300, seed=11)
    _, out = code_and_output(row_products, (x,), block_sizes=[8], reduction_loops=[128])
    torch.testing.assert_close(out, x.prod(-1, keepdim=True), rtol=1e-5, atol=1e-5)
