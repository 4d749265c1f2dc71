"""Batched matrix multiply: one batch entry per program, float32 accumulation.

Shows a 3-D top-level tile loop with a fixed block size of 1 on the batch
dimension (``block_size=[1, None, None]``: only M and N are tunable), an inner
loop over the contraction dimension, and ``hl.dot(..., acc=acc)`` adding each
``[1, tile_m, tile_k] @ [1, tile_k, tile_n]`` product to a float32
accumulator. The inputs are bfloat16.
"""

from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl

# Block sizes for [tile_m, tile_n, tile_k] (the batch block is fixed at 1):
# 2 batches x 2 M tiles x 1 N tile = 4 programs, each with two K steps.
BLOCK_SIZES = [128, 128, 128]


@pallasite.kernel(config=pallasite.Config(block_sizes=BLOCK_SIZES))
def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    batch, m, k = a.size()
    batch2, k2, n = b.size()
    assert batch == batch2 and k == k2, "bmm: batch or contraction sizes differ"
    out = torch.empty([batch, m, n], dtype=torch.float32, device=a.device)
    for tile_b, tile_m, tile_n in hl.tile([batch, m, n], block_size=[1, None, None]):
        acc = hl.zeros([tile_b, tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = hl.dot(a[tile_b, tile_m, tile_k], b[tile_b, tile_k, tile_n], acc=acc)
        out[tile_b, tile_m, tile_n] = acc
    return out


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bmm(a.float(), b.float())


def example_inputs() -> tuple:
    torch.manual_seed(0)
    a = torch.randn(2, 256, 256).to(torch.bfloat16)
    b = torch.randn(2, 256, 128).to(torch.bfloat16)
    return a, b


# (atol, rtol) per input dtype: bfloat16 products are exact in float32, so only
# the summation order differs from the reference.
TOLERANCES = {torch.bfloat16: (1e-3, 1e-3)}


def check() -> float:
    inputs = example_inputs()
    result = bmm(*inputs)
    expected = reference(*inputs)
    atol, rtol = TOLERANCES[inputs[0].dtype]
    torch.testing.assert_close(result, expected, atol=atol, rtol=rtol)
    return (result - expected).abs().max().item()


if __name__ == "__main__":
    print(f"bmm: max abs error {check():.2e}")
