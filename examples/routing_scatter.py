"""Routing scatter: tokens written, scaled by their gate, into their experts' slots.

A mixture-of-experts layer sends each token to one expert, and each expert
has ``capacity`` slots; ``dest[t]`` is token t's slot, precomputed on the host
from its expert and its rank among that expert's tokens (no top-k inside the
kernel). Tokens past an expert's capacity are dropped: they all go to one
overflow row after the slots. The kernel is one scatter per token tile,
``out[dest[tile], :] = x[tile, :] * gate[tile]``: the output stays whole in
VMEM and each tile's rows are placed by a one-hot matmul (exact at HIGHEST
precision). Slots no token fills keep their zeros. Several tokens write the
overflow row; the last of them (in token order) wins, deterministically.
"""

from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl

# Tokens per program: 200 tokens take three whole tiles and a partial one.
BLOCK_SIZES = [64]


@pallasite.kernel(config=pallasite.Config(block_sizes=BLOCK_SIZES))
def routing_scatter(x: torch.Tensor, gate: torch.Tensor, dest: torch.Tensor, slots: int) -> torch.Tensor:
    slots = hl.specialize(slots)
    tokens, hidden = x.size()
    out = torch.zeros([slots + 1, hidden], dtype=x.dtype, device=x.device)  # + the overflow row
    for tile in hl.tile(tokens):
        out[dest[tile], :] = x[tile, :] * gate[tile].unsqueeze(1)
    return out


def destinations(expert: torch.Tensor, experts: int, capacity: int) -> torch.Tensor:
    """Each token's slot: its expert's first slot + its rank among that expert's tokens,
    or the overflow row `experts * capacity` past the expert's capacity."""
    one_hot = torch.nn.functional.one_hot(expert.long(), experts)
    rank = (one_hot.cumsum(0) * one_hot).sum(1) - 1
    slot = expert.long() * capacity + rank
    return torch.where(rank < capacity, slot, experts * capacity).to(torch.int32)


def reference(x: torch.Tensor, gate: torch.Tensor, dest: torch.Tensor, slots: int) -> torch.Tensor:
    out = torch.zeros(slots + 1, x.size(1), dtype=x.dtype)
    for token, slot in enumerate(dest.tolist()):  # in token order: the last writer wins
        out[slot] = x[token] * gate[token]
    return out


EXPERTS, CAPACITY = 4, 48


def example_inputs() -> tuple:
    torch.manual_seed(0)
    tokens, hidden = 200, 256
    x = torch.randn(tokens, hidden)
    gate = torch.rand(tokens)
    expert = torch.randint(0, EXPERTS, (tokens,), dtype=torch.int32)
    return x, gate, destinations(expert, EXPERTS, CAPACITY), EXPERTS * CAPACITY


def check() -> float:
    inputs = example_inputs()
    result = routing_scatter(*inputs)
    expected = reference(*inputs)
    assert int((inputs[2] == EXPERTS * CAPACITY).sum()) > 1, "the example should overflow an expert"
    torch.testing.assert_close(result, expected, atol=0, rtol=0)
    return (result - expected).abs().max().item()


if __name__ == "__main__":
    print(f"routing_scatter: max abs error {check():.2e}")
