"""Elementwise add with broadcasting: ``x`` (M, N) plus ``y`` (N,).

Shows a 2-D ``hl.tile`` loop, a 1-D tensor indexed by one of the tiles and
widened with ``[None, :]`` in device code, and shapes that no TPU block size
divides (300 x 200), so the last tiles are partial.
"""

from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl


@pallasite.kernel
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    assert y.size() == (n,), f"y must have shape ({n},), got {tuple(y.size())}"
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([m, n]):
        out[tile_m, tile_n] = x[tile_m, tile_n] + y[tile_n][None, :]
    return out


def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def example_inputs() -> tuple:
    torch.manual_seed(0)
    return torch.randn(300, 200), torch.randn(200)


def check() -> float:
    inputs = example_inputs()
    result = add(*inputs)
    expected = reference(*inputs)
    torch.testing.assert_close(result, expected)
    return (result - expected).abs().max().item()


if __name__ == "__main__":
    print(f"add: max abs error {check():.2e}")
