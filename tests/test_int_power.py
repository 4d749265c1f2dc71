"""torch's integer `x ** y` with a tensor (or runtime) exponent (trial I): jnp.power took only
the exponent's low 6 bits (3 ** 64 gave 1, 3 ** 65 gave 3) and gave garbage for a negative
one (5 ** -1 gave 1501274061), where torch wraps and gives 0 (1 for base 1, +-1 for base -1).
`elementwise.int_power` squares over every bit of the exponent; it lowers for TPU."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def powers(x, y):
    out = torch.empty([3, *x.shape], dtype=x.dtype, device=x.device)
    for t0, t1 in hl.tile(x.shape):
        out[0, t0, t1] = torch.pow(x[t0, t1], y[t0, t1])
        out[1, t0, t1] = 2 ** y[t0, t1]
        out[2, t0, t1] = x[t0, t1] ** y[t0, t1].to(torch.int8)
    return out


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.int8, torch.uint8])
def test_integer_powers_of_tensor_exponents(dtype):
    torch.manual_seed(0)
    low = 0 if dtype == torch.uint8 else -5
    x = torch.randint(low, 6, (8, 128), dtype=dtype)
    y = torch.randint(0 if dtype == torch.uint8 else -3, 100, (8, 128), dtype=dtype)
    x[0, :6] = torch.tensor([3, 3, 1, 5, 2, 0], dtype=dtype)
    y[0, :6] = torch.tensor([64, 65, 99, 0, 31, 0], dtype=dtype)
    expected = torch.stack([torch.pow(x, y), 2 ** y, (x ** y.to(torch.int8)).to(dtype)])
    _, result = code_and_output(powers, (x, y))
    torch.testing.assert_close(result, expected, rtol=0, atol=0)
    torch.testing.assert_close(run_ref(powers, (x, y)), expected, rtol=0, atol=0)


def test_negative_exponents():
    x = torch.tensor([[5, 2, 3, -4, 1, -1, -1, 0]] * 8, dtype=torch.int32).repeat(1, 16)
    y = torch.tensor([[-1, -2, -1, -1, -5, -3, -4, -2]] * 8, dtype=torch.int32).repeat(1, 16)
    _, result = code_and_output(powers, (x, y))
    torch.testing.assert_close(result[0], torch.pow(x, y), rtol=0, atol=0)


@pallasite.kernel
def power_of_argument(x, e: int):
    out = torch.empty_like(x)
    for t in hl.tile(x.shape):
        out[t] = x[t] ** e
    return out


def test_a_runtime_exponent_uses_every_bit():
    x = torch.tensor([[3, 2, -2, 5]] * 8, dtype=torch.int32)
    for e in (3, 64, 65):
        torch.testing.assert_close(power_of_argument(x, e), x ** e, rtol=0, atol=0)
    check_tpu_lowering(power_of_argument, (x, 65))
