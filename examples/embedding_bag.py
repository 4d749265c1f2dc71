"""Embedding bag: the sum of a table's rows picked by each bag's indices.

Bag ``g`` is ``indices[offsets[g]:offsets[g + 1]]`` (as ``torch.nn.functional.
embedding_bag`` with ``mode="sum"``). Each program owns one bag (``hl.grid``),
reads its bounds as scalars, and walks its indices with an inner
``hl.tile(start, end)`` loop; ``table[idx, :]`` gathers the rows of each index
tile. This small table stays whole in VMEM and the gather is a one-hot matmul
(exact at HIGHEST precision); a table too large for VMEM (or the config
``pallas_indirect_access_mode="dma"``) stays in HBM and each index's row is
copied by its own DMA instead. The lanes of a partial index tile past the bag's end
hold no valid index, so their rows are masked out of the sum. The example's
bags include an empty one and bags that start mid-block; the table is bf16
and the sums are float32.
"""

from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl

# Block size for the inner index tile: the longest bag (70 indices) takes three steps.
BLOCK_SIZES = [32]


@pallasite.kernel(config=pallasite.Config(block_sizes=BLOCK_SIZES))
def embedding_bag(table: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    dim = table.size(1)
    bags = offsets.size(0) - 1
    out = torch.empty([bags, dim], dtype=torch.float32, device=table.device)
    for g in hl.grid(bags):
        start = offsets[g]
        end = offsets[g + 1]
        acc = hl.zeros([dim], dtype=torch.float32)
        for tile in hl.tile(start, end):
            idx = indices[tile]
            acc = acc + table[idx, :].to(torch.float32).sum(0)
        out[g, :] = acc
    return out


def reference(table: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.embedding_bag(
        indices.long(), table.float(), offsets[:-1].long(), mode="sum")


def example_inputs() -> tuple:
    torch.manual_seed(0)
    table = torch.randn(100, 256).to(torch.bfloat16)
    # Bag lengths 3, 0, 70, 27: unaligned starts, one empty bag.
    offsets = torch.tensor([0, 3, 3, 73, 100], dtype=torch.int32)
    indices = torch.randint(0, 100, (100,), dtype=torch.int32)
    return table, indices, offsets


# (atol, rtol) per table dtype: float32 sums of up to 70 exact bf16 rows in another order.
TOLERANCES = {torch.bfloat16: (1e-4, 1e-5)}


def check() -> float:
    inputs = example_inputs()
    result = embedding_bag(*inputs)
    expected = reference(*inputs)
    atol, rtol = TOLERANCES[inputs[0].dtype]
    torch.testing.assert_close(result, expected, atol=atol, rtol=rtol)
    return (result - expected).abs().max().item()


if __name__ == "__main__":
    print(f"embedding_bag: max abs error {check():.2e}")
