"""Jagged row sum and mean: segments of rows given by an ``offsets`` tensor.

Segment ``g`` is rows ``offsets[g]:offsets[g + 1]`` of ``x``. Each program owns
one segment (``hl.grid``) and reads its bounds as scalars from ``offsets``
(int32, so it can live in SMEM); the inner ``hl.tile(start, end)`` loop then
has a data-dependent, unaligned begin and trip count, so the rows of a partial
tile that belong to a neighbouring segment must be masked out of the sum. The
example's offsets include an empty segment (its sum is 0 and its mean is 0,
since the row count is clamped to 1) and segments that start mid-block.
"""

from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl

# Block size for the inner row tile: the longest segment (160 rows) takes three steps.
BLOCK_SIZES = [64]


@pallasite.kernel(config=pallasite.Config(block_sizes=BLOCK_SIZES))
def jagged_sum(x: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    rows, cols = x.size()
    segments = offsets.size(0) - 1
    sums = torch.empty([segments, cols], dtype=torch.float32, device=x.device)
    means = torch.empty([segments, cols], dtype=torch.float32, device=x.device)
    for g in hl.grid(segments):
        start = offsets[g]
        end = offsets[g + 1]
        acc = hl.zeros([cols], dtype=torch.float32)
        for tile in hl.tile(start, end):
            acc = acc + x[tile, :].to(torch.float32).sum(0)
        count = torch.clamp(end - start, min=1)
        sums[g, :] = acc
        means[g, :] = acc / count
    return sums, means


def reference(x: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    bounds = offsets.tolist()
    sums = torch.stack([x[a:b].float().sum(0) for a, b in zip(bounds, bounds[1:])])
    counts = torch.tensor([max(b - a, 1) for a, b in zip(bounds, bounds[1:])], dtype=torch.float32)
    return sums, sums / counts[:, None]


def example_inputs() -> tuple:
    torch.manual_seed(0)
    x = torch.randn(300, 128)
    # Segment lengths 5, 0, 135, 160: unaligned starts, one empty segment.
    offsets = torch.tensor([0, 5, 5, 140, 300], dtype=torch.int32)
    return x, offsets


# (atol, rtol) per input dtype: float32 sums of up to 160 rows in another order.
TOLERANCES = {torch.float32: (1e-4, 1e-5)}


def check() -> float:
    inputs = example_inputs()
    result = jagged_sum(*inputs)
    expected = reference(*inputs)
    atol, rtol = TOLERANCES[inputs[0].dtype]
    torch.testing.assert_close(result, expected, atol=atol, rtol=rtol)
    return max((r - e).abs().max().item() for r, e in zip(result, expected))


if __name__ == "__main__":
    print(f"jagged_sum: max abs error {check():.2e}")
