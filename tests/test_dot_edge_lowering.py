"""Dots interpret mode ran but Mosaic refused (trial E): uint8 x uint8 ("Unsigned integer
dtype uint8 is not supported for dot_general"; the factors are widened to int16, as int8 x
uint8 already were) and a contraction over K = 0 ("vector types must have positive constant
sizes": the product is zeros, with no 0-sized vector)."""
from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl
from pallasite.testing import check_tpu_lowering, code_and_output


@pallasite.kernel
def int_product(x, y):
    out = torch.empty([x.size(0), y.size(1)], dtype=torch.int32, device=x.device)
    for tm, tn in hl.tile([x.size(0), y.size(1)]):
        out[tm, tn] = hl.dot(x[tm, :], y[:, tn])
    return out


@pallasite.kernel
def float_product(x, y):
    out = torch.empty([x.size(0), y.size(1)], dtype=torch.float32, device=x.device)
    for tm, tn in hl.tile([x.size(0), y.size(1)]):
        out[tm, tn] = hl.dot(x[tm, :], y[:, tn]) + 1.0
    return out


def test_a_uint8_dot_lowers():
    x = torch.randint(0, 256, (16, 128), dtype=torch.uint8)
    y = torch.randint(0, 256, (128, 128), dtype=torch.uint8)
    _, result = code_and_output(int_product, (x, y))
    torch.testing.assert_close(result, (x.int() @ y.int()))
    assert set(check_tpu_lowering(int_product, (x, y))) == {"v5e", "v6e", "v7x"}


def test_a_dot_over_nothing_lowers():
    x, y = torch.randn(16, 0), torch.randn(0, 128)
    _, result = code_and_output(float_product, (x, y))
    torch.testing.assert_close(result, torch.ones(16, 128))
    assert set(check_tpu_lowering(float_product, (x, y))) == {"v5e", "v6e", "v7x"}
