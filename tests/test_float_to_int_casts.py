"""A float cast to a 32-bit or narrower integer dtype saturates in both modes: NaN is 0, a value
past the dtype's range its nearest end, others round toward 0. torch calls an out-of-range value
undefined (its CPU wraps); the compiled kernel saturated while reference mode wrapped (trial G).
`.long()` is defined past int32 (`3e9.long()` is exact in int64): there both modes raise
(tests/test_int64_values.py), as a saturated number is not torch's."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def casts(x):
    out = torch.empty([4, x.size(0)], dtype=torch.int32, device=x.device)
    for t in hl.tile(x.size(0)):
        v = x[t]
        out[0, t] = v.to(torch.int8).int()
        out[1, t] = v.to(torch.uint8).int()
        out[2, t] = v.to(torch.int16).int()
        out[3, t] = v.int()
    return out


def test_float_to_int_casts_saturate_in_both_modes():
    x = torch.tensor([300, -300, float("nan"), float("inf"), 3e9, -5e9, 2.7, -2.7, float("-inf"), 127.9] + [0.0] * 6)
    values = x.double().nan_to_num(0.0)
    expected = torch.stack([values.clamp(lo, hi).trunc().int() for lo, hi in (
        (-128, 127), (0, 255), (-32768, 32767), (-2**31, 2**31 - 1))])
    _, result = code_and_output(casts, (x,))
    torch.testing.assert_close(result, expected, rtol=0, atol=0)
    torch.testing.assert_close(run_ref(casts, (x,)), expected, rtol=0, atol=0)


@pallasite.kernel
def stored(x, out8, out32):
    for t in hl.tile(x.size(0)):
        out8[t] = x[t]
        out32[t] = x[t] * 1
    return out8, out32


def test_a_float_stored_into_an_int_tensor_saturates_in_both_modes():
    """(trial K) The store's implicit cast: reference mode wrapped as torch's CPU does (300 gave 44
    in int8, 3e9 INT_MIN in int32) where the kernel saturated."""
    x = torch.tensor([3e9, -3e9, float("inf"), float("-inf"), float("nan"), 300.0, -300.0, 127.9] * 2)
    values = x.double().nan_to_num(0.0)
    expected = (values.clamp(-128, 127).trunc().to(torch.int8), values.clamp(-2**31, 2**31 - 1).trunc().int())

    def fresh():
        return x, torch.zeros(16, dtype=torch.int8), torch.zeros(16, dtype=torch.int32)

    torch.testing.assert_close(code_and_output(stored, fresh())[1], expected, rtol=0, atol=0)
    torch.testing.assert_close(run_ref(stored, fresh()), expected, rtol=0, atol=0)


@pallasite.kernel
def store_number(x, out):
    for t in hl.tile(x.size(0)):
        out[t] = 300
    return out


def test_a_number_an_int_tensor_cannot_hold_is_refused_in_both_modes():
    """(trial L) `out[t] = 300` into int8 stored 44 compiled; torch's store refuses it."""
    args = (torch.zeros(8), torch.zeros(8, dtype=torch.int8))
    with pytest.raises(exc.UnsupportedDtype, match="cannot be converted to type int8_t"):
        store_number(*args)
    with pytest.raises(exc.UnsupportedDtype, match="cannot be converted to type int8_t"):
        run_ref(store_number, args)
