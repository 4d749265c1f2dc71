"""GEGLU, ``gelu(a) * b`` with the tanh approximation of GELU, on bfloat16.

Shows a 3-D ``hl.tile`` loop over (batch, sequence, hidden), a sequence
length (100) that is not a multiple of the TPU sublane count, and GELU written
out in pointwise torch ops computed in float32 and cast back to bfloat16.
"""

from __future__ import annotations

import math

import torch

import pallasite
import pallasite.language as hl

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@pallasite.kernel
def geglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    assert a.size() == b.size(), "a and b must have the same shape"
    bsz, seq, hid = a.size()
    out = torch.empty_like(a)
    for tile_b, tile_s, tile_h in hl.tile([bsz, seq, hid]):
        gate = a[tile_b, tile_s, tile_h].to(torch.float32)
        value = b[tile_b, tile_s, tile_h].to(torch.float32)
        inner = SQRT_2_OVER_PI * (gate + 0.044715 * gate * gate * gate)
        gelu = 0.5 * gate * (1.0 + torch.tanh(inner))
        out[tile_b, tile_s, tile_h] = (gelu * value).to(out.dtype)
    return out


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    gelu = torch.nn.functional.gelu(a.float(), approximate="tanh")
    return (gelu * b.float()).to(a.dtype)


def example_inputs() -> tuple:
    torch.manual_seed(0)
    a = torch.randn(2, 100, 256).to(torch.bfloat16)
    b = torch.randn(2, 100, 256).to(torch.bfloat16)
    return a, b


def check() -> float:
    inputs = example_inputs()
    result = geglu(*inputs)
    expected = reference(*inputs)
    # bfloat16 output: allow one bfloat16 rounding step of difference.
    torch.testing.assert_close(result, expected, atol=2e-2, rtol=2e-2)
    return (result.float() - expected.float()).abs().max().item()


if __name__ == "__main__":
    print(f"geglu: max abs error {check():.2e}")
