"""SwiGLU, ``silu(a) * b`` with ``silu(a) = a * sigmoid(a)``, on float32.

Shows a 3-D ``hl.tile`` loop over (batch, sequence, hidden) with a partial
last tile along the sequence, and ``torch.sigmoid`` in device code.
"""

from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl


@pallasite.kernel
def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    assert a.size() == b.size(), "a and b must have the same shape"
    bsz, seq, hid = a.size()
    out = torch.empty_like(a)
    for tile_b, tile_s, tile_h in hl.tile([bsz, seq, hid]):
        gate = a[tile_b, tile_s, tile_h]
        value = b[tile_b, tile_s, tile_h]
        out[tile_b, tile_s, tile_h] = gate * torch.sigmoid(gate) * value
    return out


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(a) * b


def example_inputs() -> tuple:
    torch.manual_seed(0)
    return torch.randn(2, 100, 256), torch.randn(2, 100, 256)


def check() -> float:
    inputs = example_inputs()
    result = swiglu(*inputs)
    expected = reference(*inputs)
    # sigmoid is computed by XLA in the kernel and by ATen in the reference.
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)
    return (result - expected).abs().max().item()


if __name__ == "__main__":
    print(f"swiglu: max abs error {check():.2e}")
