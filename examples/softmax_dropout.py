"""Fused row softmax + dropout: one pass over each row, no mask tensor in HBM.

Each program owns a block of whole rows. ``torch.softmax`` is recorded as
the stable max/exp/sum/div steps; ``hl.rand([tile_m, n], seed)`` draws one
uniform number per element from a hash of (seed, row, column), so the mask
does not depend on the block size and the same seed reproduces it. Kept
elements are scaled by ``1 / (1 - p)`` so the expectation is the softmax.

``reference`` rebuilds the mask with ``pallasite.testing.reference_rand`` (the
numbers ``hl.rand`` draws at each coordinate, computed in PyTorch).
``check()`` compares with it and tests what dropout promises whatever the
hash: every kept element equals ``softmax / (1 - p)``, dropped elements are 0,
the dropped fraction is ``p`` within five standard deviations, the same seed
gives the same output and another seed another mask.
"""

from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl
from pallasite.testing import reference_rand


@pallasite.kernel
def softmax_dropout(x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        probs = torch.softmax(x[tile_m, :].to(torch.float32), dim=1)
        keep = hl.rand([tile_m, n], seed=seed) >= p
        out[tile_m, :] = torch.where(keep, probs / (1 - p), 0.0).to(out.dtype)
    return out


def reference(x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    keep = reference_rand(x.shape, seed) >= p
    probs = torch.softmax(x.to(torch.float32), dim=1)
    return torch.where(keep, probs / (1 - p), 0.0).to(x.dtype)


def example_inputs(dtype: torch.dtype = torch.float32) -> tuple:
    torch.manual_seed(0)
    return (torch.randn(250, 300).to(dtype), 0.25, 1234)


# (atol, rtol) per input dtype for the kept elements.
TOLERANCES = {torch.float32: (1e-6, 1e-5), torch.bfloat16: (1e-2, 1e-2)}


def check() -> float:
    worst = 0.0
    for dtype, (atol, rtol) in TOLERANCES.items():
        x, p, seed = example_inputs(dtype)
        result = softmax_dropout(x, p, seed)
        expected = reference(x, p, seed)
        kept = result != 0
        assert torch.equal(kept, expected != 0), "the kernel dropped other elements than hl.rand's"
        torch.testing.assert_close(result, expected, atol=atol, rtol=rtol)
        scaled = (torch.softmax(x.float(), dim=1) / (1 - p)).to(dtype)
        torch.testing.assert_close(result[kept], scaled[kept], atol=atol, rtol=rtol)
        dropped = 1 - kept.double().mean().item()
        sigma = (p * (1 - p) / x.numel()) ** 0.5
        assert abs(dropped - p) < 5 * sigma, f"dropped {dropped:.4f} of the elements, expected {p}"
        assert torch.equal(softmax_dropout(x, p, seed), result), "the same seed must give the same output"
        other = softmax_dropout(x, p, seed + 1) != 0
        assert (other != kept).double().mean() > p / 2, "another seed must give another mask"
        worst = max(worst, (result.float() - expected.float()).abs().max().item())
    return worst


if __name__ == "__main__":
    print(f"softmax_dropout: max abs error of kept elements {check():.2e}")
