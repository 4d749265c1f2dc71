"""Two-pass row centering: subtract each row's mean, walking the row in column tiles.

Each program owns a block of rows. A first inner loop over column tiles sums
the rows into a float32 carried value; a second, sibling loop over the same
columns reads the tiles again and writes ``x - mean``. N = 300 is not a
multiple of the 128-wide column block, so the last tile of the first pass is
masked before the sum (padding never reaches it) and the last store of the
second pass is clipped at the true row end.
"""

from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl

# Block sizes for [tile_m, first-pass tile_n, second-pass tile_n]: two row
# blocks, three column steps in each pass.
BLOCK_SIZES = [32, 128, 128]


@pallasite.kernel(config=pallasite.Config(block_sizes=BLOCK_SIZES))
def centering(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        total = hl.zeros([tile_m], dtype=torch.float32)
        for tile_n in hl.tile(n):
            total = total + x[tile_m, tile_n].to(torch.float32).sum(1)
        mean = total / n
        for tile_n in hl.tile(n):
            out[tile_m, tile_n] = (x[tile_m, tile_n].to(torch.float32) - mean[:, None]).to(out.dtype)
    return out


def reference(x: torch.Tensor) -> torch.Tensor:
    centered = x.float() - x.float().mean(dim=1, keepdim=True)
    return centered.to(x.dtype)


def example_inputs() -> tuple:
    torch.manual_seed(0)
    return (torch.randn(64, 300) + 3.0,)


# (atol, rtol) per input dtype: the row sum is accumulated in another order.
TOLERANCES = {torch.float32: (1e-5, 1e-5)}


def check() -> float:
    inputs = example_inputs()
    result = centering(*inputs)
    expected = reference(*inputs)
    atol, rtol = TOLERANCES[inputs[0].dtype]
    torch.testing.assert_close(result, expected, atol=atol, rtol=rtol)
    return (result - expected).abs().max().item()


if __name__ == "__main__":
    print(f"centering: max abs error {check():.2e}")
