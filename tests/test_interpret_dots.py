"""XLA's CPU runtime cannot run some 16-bit dots inside a loop (`x[tk, tm].T @ y[tk, tn]` in
bfloat16 with a float32 result: "Unsupported element type for DotThunk::Execute: BF16 x BF16
= F32", a raw JaxRuntimeError; plain JAX reproduces it with a masked transposed operand in a
fori_loop). In interpret mode only, the kernel's 16-bit dots take float32 operands (exact:
a product of two 16-bit floats fits float32), so the generated code, what a TPU runs, keeps its
16-bit MXU inputs (runtime/interpret_dots.py)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def transposed_lhs_matmul(x, y):  # x is [k, m]: x.T @ y
    k, m = x.size()
    n = y.size(1)
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tm, tn in hl.tile([m, n]):
        acc = hl.zeros([tm, tn], dtype=torch.float32)
        for tk in hl.tile(k):
            acc = hl.dot(x[tk, tm].T, y[tk, tn], acc=acc)
        out[tm, tn] = acc
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_16bit_dot_of_a_transposed_masked_operand_runs_in_interpret_mode(dtype, loop_type):
    x, y = torch.randn(300, 64).to(dtype), torch.randn(300, 64).to(dtype)
    config = dict(block_sizes=[64, 64, 128], pallas_loop_type=loop_type)
    code, out = code_and_output(transposed_lhs_matmul, (x, y), **config)
    expected = x.float().T @ y.float()
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(run_ref(transposed_lhs_matmul, (x, y), **config), expected, rtol=1e-4, atol=1e-3)
    assert "astype(jnp.float32)" not in code.split("def transposed_lhs_matmul(")[0]  # TPU code keeps 16-bit inputs


@pallasite.kernel
def rounded_sum(x, y):
    out = torch.empty([x.size(0)], dtype=torch.float32, device=x.device)
    for t in hl.tile(x.size(0)):
        out[t] = (x[t] + y[t]).float() + (x[t] * y[t] * 3.0).float()
    return out


def test_a_16_bit_result_is_rounded_as_a_tpu_rounds_it():
    """(trials E, G) XLA's CPU compiler kept a bf16/f16 sum in float32 before `.float()`
    (1 + 1e-3 gave 1.0009995, not bf16's 1.0); interpret mode compiles without excess precision."""
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.tensor([1.0, 1.5, -2.25, 0.3] * 2, dtype=dtype)
        y = torch.full((8,), 1e-3, dtype=dtype)
        expected = (x + y).float() + (x * y * 3.0).float()
        torch.testing.assert_close(code_and_output(rounded_sum, (x, y))[1], expected, rtol=0, atol=0)


@pallasite.kernel(config=pallasite.Config(block_sizes=[32]))
def row_extremes(x):
    out = torch.empty([x.size(0), 3], dtype=x.dtype, device=x.device)
    for tm in hl.tile(x.size(0)):
        out[tm, 0] = torch.amax(x[tm, :], dim=1)
        out[tm, 1] = torch.amin(x[tm, :], dim=1)
        out[tm, 2] = x[tm, :].max(1).values
    return out


def test_a_nan_reaches_a_max_over_a_large_block():
    """(trial E) XLA's CPU runtime dropped a NaN in a max/min over 4096 or more elements (plain
    jnp.max of a 32x128 array does), where torch, a TPU and reference mode give NaN."""
    x = torch.zeros(64, 128)
    x[0, 3], x[1, 127], x[33, 64] = float("nan"), float("nan"), float("nan")
    x[2, :] = float("nan")
    x[5, 7] = 4.0
    expected = torch.stack([torch.amax(x, 1), torch.amin(x, 1), x.max(1).values], 1)
    _, result = code_and_output(row_extremes, (x,))
    torch.testing.assert_close(result, expected, equal_nan=True)
    torch.testing.assert_close(run_ref(row_extremes, (x,)), expected, equal_nan=True)


@pallasite.kernel
def product_sums(a, b):
    n = a.size(0)
    out = torch.empty([n, 2], dtype=torch.float32, device=a.device)
    for t in hl.tile(n):
        out[t, 0] = (a[t, :] * b[t, :]).float().sum(1)
        out[t, 1] = (torch.exp(a[t, :]) + b[t, :]).float().sum(1)
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_each_16_bit_op_rounds_before_a_fused_reduction(dtype):
    """(trial G) XLA's CPU compiler fused `(a * b).float().sum(1)` of bfloat16 a, b and summed
    the exact float32 products, even with excess precision disabled; torch and a TPU round
    each product to bfloat16 first (a difference of 0.07 in a sum of 256)."""
    torch.manual_seed(0)
    a, b = torch.randn(16, 256, dtype=dtype), torch.randn(16, 256, dtype=dtype)
    expected = torch.stack([(a * b).float().sum(1), (torch.exp(a) + b).float().sum(1)], 1)
    _, result = code_and_output(product_sums, (a, b))
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(product_sums, (a, b)), expected)


@pallasite.kernel
def scaled(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] * 0.1 + 257 - x[t] / 3.3 - 0.7 * x[t]
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_16_bit_product_takes_its_number_in_float32(dtype):
    """(trial E) `x * 0.1` of bfloat16 x: torch's CPU multiply and divide take the number in
    float32 and round once; JAX rounded 0.1 to bfloat16 first (1 ulp off in 698 of 4096).
    torch's add and sub round the number first (`x + 257` adds 256 in bfloat16), and so do we."""
    torch.manual_seed(0)
    x = torch.randn(4096, dtype=dtype) * 10
    expected = x * 0.1 + 257 - x / 3.3 - 0.7 * x
    _, result = code_and_output(scaled, (x,))
    torch.testing.assert_close(result, expected, rtol=0, atol=0)
    torch.testing.assert_close(run_ref(scaled, (x,)), expected, rtol=0, atol=0)


@pallasite.kernel
def halved(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = torch.fmod(x[t], 0.25) * 0.5 - x[t] * 2 ** -12
    return out


def test_float16_subnormals_survive_the_rounding_of_each_op():
    """reduce_precision flushes what would be a float16 subnormal (below 2 ** -14): the rounding
    of each 16-bit op kept 0.0 where torch keeps 5.4e-05 (a bfloat16 floor division was off by
    2 through it). Such values are rounded to their multiple of 2 ** -24 by hand."""
    x = torch.tensor([2.0 ** -20, -3 * 2.0 ** -18, 2.0 ** -14 + 2.0 ** -24, 0.2501, -1.3e-5, 0.1] * 2,
                     dtype=torch.float16)
    expected = torch.fmod(x, 0.25) * 0.5 - x * 2 ** -12
    assert (expected.abs() < 2.0 ** -14).sum() >= 4
    torch.testing.assert_close(code_and_output(halved, (x,))[1], expected, rtol=0, atol=0)
