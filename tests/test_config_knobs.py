"""Helion config knobs with real meaning here (issue #7 §6): `pallas_load_buffer_count`,
`pallas_pre_broadcast`, `reduction_loops` — each validated, in the compile key, and
honoured by the plan and the generated code."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import check_tpu_lowering, code_and_output
from plan_helpers import matmul, only_call, randn

STREAMING = ["fori_loop", "emit_pipeline"]


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
@pytest.mark.parametrize("buffers", [2, 3, 4])
def test_load_buffer_count_keeps_results(loop_type, buffers):
    x, y = randn(16, 640, seed=1), randn(640, 256, seed=2)
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


@pytest.mark.parametrize("loop_type", STREAMING)
def test_load_buffer_count_lowers_to_mosaic(loop_type):
    x, y = randn(16, 640, seed=1), randn(640, 256, seed=2)
    check_tpu_lowering(matmul, (x, y), block_sizes=[8, 128, 128], pallas_loop_type=loop_type,
                       pallas_load_buffer_count=3)
    x, w = randn(16, 700, seed=3), randn(16, seed=4)
    check_tpu_lowering(row_scale, (x, w), chips=("v6e",), block_sizes=[8, 128], pallas_loop_type=loop_type,
                       pallas_load_buffer_count=3)


def test_load_buffer_count_unroll_is_a_documented_no_op():
    x, y = randn(16, 640, seed=1), randn(640, 256, seed=2)
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


# ---------------------------------------------------------------- pallas_pre_broadcast

@pallasite.kernel
def matmul_bias_steps(x, y, b):
    """A bias row added to the accumulator on every k step (loop-invariant, broadcast)."""
    m, k = x.size()
    _, n = y.size()
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        bias = b[tile_n]
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n]) + bias
        out[tile_m, tile_n] = acc
    return out


def _bias_steps_reference(x, y, b, block_k):
    steps = -(-x.shape[1] // block_k)
    return x @ y + steps * b


@pytest.mark.parametrize("loop_type", ["unroll", "fori_loop", "emit_pipeline"])
def test_pre_broadcast_widens_the_bias_once_before_the_loop(loop_type):
    x, y, b = randn(16, 384, seed=5), randn(384, 256, seed=6), randn(256, seed=7)
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
    check_tpu_lowering(matmul_bias_steps, (x, y, b), chips=("v5e", "v7x"), **base, pallas_pre_broadcast=True)


def test_pre_broadcast_is_a_no_op_below_128_lanes():
    x, y, b = randn(16, 384, seed=5), randn(384, 64, seed=6), randn(64, seed=7)
    base = {"block_sizes": [8, 64, 128], "pallas_loop_type": "fori_loop"}
    code_off, out_off = code_and_output(matmul_bias_steps, (x, y, b), **base)
    code_on, out_on = code_and_output(matmul_bias_steps, (x, y, b), **base, pallas_pre_broadcast=True)
    assert _body(code_on) == _body(code_off) and torch.equal(out_on, out_off)
    assert only_call(matmul_bias_steps, (x, y, b), **base, pallas_pre_broadcast=True).pre_broadcasts == {}


@pytest.mark.parametrize("value", [1, "yes", None])
def test_bad_pre_broadcast(value):
    with pytest.raises(exc.InvalidConfig, match="pallas_pre_broadcast must be True or False"):
        pallasite.Config(pallas_pre_broadcast=value)
