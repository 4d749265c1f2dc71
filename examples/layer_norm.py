"""Layer norm over the last dimension: bfloat16 in and out, float32 math.

Shows ``hl.specialize`` of the row length (a whole row is one block), mean and
variance as keepdim reductions, ``torch.rsqrt``, per-column weight and bias
broadcast against a block of rows, and ``eps`` passed as a Python float kernel
argument (a scalar, not a tensor).
"""

from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl


@pallasite.kernel
def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    m, n = x.size()
    n = hl.specialize(n)
    assert weight.size() == (n,), f"weight must have shape ({n},)"
    assert bias.size() == (n,), f"bias must have shape ({n},)"
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        row = x[tile_m, :].to(torch.float32)
        mean = torch.mean(row, dim=1, keepdim=True)
        centered = row - mean
        variance = torch.mean(centered * centered, dim=1, keepdim=True)
        normalized = centered * torch.rsqrt(variance + eps)
        scaled = normalized * weight[:].to(torch.float32) + bias[:].to(torch.float32)
        out[tile_m, :] = scaled.to(out.dtype)
    return out


def reference(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    normalized = torch.nn.functional.layer_norm(
        x.float(), (x.size(1),), weight.float(), bias.float(), eps
    )
    return normalized.to(x.dtype)


def example_inputs() -> tuple:
    torch.manual_seed(0)
    x = (torch.randn(200, 256) * 2.0 + 0.5).to(torch.bfloat16)
    weight = (torch.randn(256) * 0.1 + 1.0).to(torch.bfloat16)
    bias = (torch.randn(256) * 0.1).to(torch.bfloat16)
    return x, weight, bias, 1e-5


def check() -> float:
    inputs = example_inputs()
    result = layer_norm(*inputs)
    expected = reference(*inputs)
    # bfloat16 output: allow one bfloat16 rounding step of difference.
    torch.testing.assert_close(result, expected, atol=2e-2, rtol=2e-2)
    return (result.float() - expected.float()).abs().max().item()


if __name__ == "__main__":
    print(f"layer_norm: max abs error {check():.2e}")
