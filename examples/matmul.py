"""Matrix multiply: bfloat16 in, float32 accumulation and output.

Shows an inner ``hl.tile`` loop over the contraction dimension inside the
top-level ``[m, n]`` tile loop, a loop-carried ``hl.zeros`` accumulator, and
``torch.addmm`` lowered to a float32-accumulating dot. K = 320 is not a
multiple of the 128-wide K block, so the last K tile is partial and must be
masked: a padded row or column never reaches the dot.
"""

from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl

# Block sizes for [tile_m, tile_n, tile_k]: a 2 x 2 grid, three K steps.
BLOCK_SIZES = [128, 128, 128]


@pallasite.kernel(config=pallasite.Config(block_sizes=BLOCK_SIZES))
def matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.size()
    k2, n = y.size()
    assert k == k2, f"size mismatch {k} != {k2}"
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc
    return out


def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.float() @ y.float()


def example_inputs() -> tuple:
    torch.manual_seed(0)
    x = torch.randn(256, 320).to(torch.bfloat16)
    y = torch.randn(320, 256).to(torch.bfloat16)
    return x, y


# (atol, rtol) per input dtype: bfloat16 products are exact in float32, so only
# the summation order differs from the reference.
TOLERANCES = {torch.bfloat16: (1e-3, 1e-3)}


def check() -> float:
    inputs = example_inputs()
    result = matmul(*inputs)
    expected = reference(*inputs)
    atol, rtol = TOLERANCES[inputs[0].dtype]
    torch.testing.assert_close(result, expected, atol=atol, rtol=rtol)
    return (result - expected).abs().max().item()


if __name__ == "__main__":
    print(f"matmul: max abs error {check():.2e}")
