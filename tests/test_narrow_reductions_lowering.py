"""Mosaic reduces 32-bit values only: a max/min/argmax/argmin of bool, int8, uint8 or int16
values is taken over int32 and cast back, in a whole-dim reduction and in the chunks of
`reduction_loops` alike. Each result matches torch and lowers for v5e/v6e/v7x."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref

NARROW = [torch.bool, torch.int8, torch.uint8, torch.int16]


@pallasite.kernel(static_shapes=True)
def extremes(x):
    m, n = x.size()
    high = torch.empty([m], dtype=x.dtype, device=x.device)
    low = torch.empty([m], dtype=x.dtype, device=x.device)
    first_high = torch.empty([m], dtype=torch.int32, device=x.device)
    first_low = torch.empty([m], dtype=torch.int32, device=x.device)
    for t in hl.tile(m):
        v = x[t, :]
        high[t] = v.amax(1)
        low[t] = torch.min(v, 1).values
        first_high[t] = torch.argmax(v, 1).to(torch.int32)
        first_low[t] = v.argmin(dim=1).to(torch.int32)
    return high, low, first_high, first_low


@pallasite.kernel(static_shapes=True)
def bool_extremes(x):
    m, n = x.size()
    high = torch.empty([m], dtype=torch.bool, device=x.device)
    low = torch.empty([m], dtype=torch.bool, device=x.device)
    for t in hl.tile(m):
        v = x[t, :]
        high[t] = v.amax(1)
        low[t] = torch.min(v, 1).values
    return high, low


def _input(dtype):
    generator = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(16, 1000, generator=generator) > 0.995
    low, high = (0, 255) if dtype == torch.uint8 else (-100, 100)
    return torch.randint(low, high, (16, 1000), generator=generator).to(dtype)


def _expected(x):
    if x.dtype == torch.bool:  # torch has no argmax/argmin of bool
        return x.amax(1), x.amin(1)
    wide = x.to(torch.int32)
    return (x.amax(1), x.amin(1), wide.argmax(1).to(torch.int32), wide.argmin(1).to(torch.int32))


@pytest.mark.parametrize("chunked", [False, True], ids=["whole_dim", "reduction_loops"])
@pytest.mark.parametrize("dtype", NARROW, ids=str)
def test_narrow_extremes_lower(dtype, chunked):
    x = _input(dtype)
    config = {"block_sizes": [8]}
    if chunked:
        config["reduction_loops"] = [128]
    kernel = bool_extremes if dtype == torch.bool else extremes
    _, out = code_and_output(kernel, (x,), **config)
    for got, reference, want in zip(out, run_ref(kernel, (x,), **config), _expected(x)):
        torch.testing.assert_close(got, want, atol=0, rtol=0)
        torch.testing.assert_close(reference, want, atol=0, rtol=0)
    check_tpu_lowering(kernel, (x,), **config)
