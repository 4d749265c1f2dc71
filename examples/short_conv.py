"""Ragged causal depthwise conv1d (width 4), the short convolution of linear-attention
models, over variable-length sequences packed along one axis.

Sequence ``n`` is rows ``offsets[n]:offsets[n + 1]`` of ``x`` ``[tokens, H, D]``; each
starts from its own conv state (the 3 rows before it), and output row ``t`` is
``sum_k weight[k] * x[t - 3 + k]``. Each program owns one sequence; its rows are loaded a
tile at a time (``blk = x[tile_t, :, :]``, staged in VMEM once per tile) and read one
row per step of an inner loop (``blk[tile_s.begin]``), which pallasite lowers to a read
of the VMEM ref (``x_ref[begin + row]``) rather than a slice of a value. The weight and
the conv state are read the same way (``w[k]``, ``state[k]``). Sequence lengths are
unaligned, one is empty and one has a single token.
"""

from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl

BLOCK_SIZES = [16]


@pallasite.kernel(config=pallasite.Config(block_sizes=BLOCK_SIZES))
def short_conv(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor,
               offsets: torch.Tensor) -> torch.Tensor:
    sequences = offsets.size(0) - 1
    out = torch.empty_like(x)
    for seq in hl.grid(sequences):
        start = offsets[seq]
        end = offsets[seq + 1]
        w = weight[:, :, :]  # [4, H, D]
        state = conv_state[seq, :, :, :]  # [3, H, D]: the rows before the sequence
        back3 = state[0].to(torch.float32)
        back2 = state[1].to(torch.float32)
        back1 = state[2].to(torch.float32)
        for tile_t in hl.tile(start, end):
            blk = x[tile_t, :, :]
            for tile_s in hl.tile(tile_t.end - tile_t.begin, block_size=1):
                row = blk[tile_s.begin].to(torch.float32)
                y = (w[0].to(torch.float32) * back3 + w[1].to(torch.float32) * back2
                     + w[2].to(torch.float32) * back1 + w[3].to(torch.float32) * row)
                out[tile_t.begin + tile_s.begin, :, :] = y.to(out.dtype)
                back3 = back2
                back2 = back1
                back1 = row
    return out


def reference(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor,
              offsets: torch.Tensor) -> torch.Tensor:
    """Sequence by sequence, row by row, in float32."""
    out = torch.empty_like(x)
    bounds = offsets.tolist()
    for n, (a, b) in enumerate(zip(bounds, bounds[1:])):
        padded = torch.cat([conv_state[n], x[a:b]]).float()  # [3 + length, H, D]
        for i in range(b - a):
            out[a + i] = (padded[i:i + 4] * weight.float()).sum(0).to(x.dtype)
    return out


def example_inputs() -> tuple:
    torch.manual_seed(0)
    heads, dim = 4, 128
    lengths = [5, 0, 1, 37, 13]  # unaligned, one empty, one of a single token
    offsets = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
    x = torch.randn(sum(lengths), heads, dim).to(torch.bfloat16)
    weight = (torch.randn(4, heads, dim) * 0.5).to(torch.bfloat16)
    conv_state = torch.randn(len(lengths), 3, heads, dim).to(torch.bfloat16)
    return x, weight, conv_state, offsets


# bf16 outputs of a float32 sum: one bf16 rounding apart at most
TOLERANCES = {torch.bfloat16: (2e-2, 2e-2)}


def check() -> float:
    inputs = example_inputs()
    result = short_conv(*inputs)
    expected = reference(*inputs)
    atol, rtol = TOLERANCES[inputs[0].dtype]
    torch.testing.assert_close(result, expected, atol=atol, rtol=rtol)
    return (result.float() - expected.float()).abs().max().item()


if __name__ == "__main__":
    print(f"short_conv: max abs error {check():.2e}")
