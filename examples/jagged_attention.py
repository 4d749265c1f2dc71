"""Causal jagged self-attention: segments of different lengths packed along one axis.

``offsets`` (int32, ``n + 1`` entries) cuts the packed rows of ``q``, ``k`` and
``v`` into ``n`` segments; segment ``s`` is rows ``[offsets[s], offsets[s + 1])``
and its query row ``i`` attends its key rows ``j <= i``. The key loop ends at
``min(end, tile_q.end)``, so key blocks above the diagonal are never visited,
and the online softmax is the flash-attention one (see ``attention.py``): the
key loop starts at the segment's first row, which every query row may attend,
so each row's running max is finite after the first key block.

The kernel is written per segment (``for seq in hl.grid(n)``), but long
segments would serialize their query tiles in one program while short ones
idle. pallasite flattens it (``pallas_flatten_worklist``, on by default): the
host builds a worklist of (segment, query tile) items inside the jit and the
grid walks the items, ``pallas_worklist_grouping`` (1 or 2) query tiles each.
Each item writes only its own rows of ``out`` (kept in HBM, copied back by DMA
from a VMEM scratch), so the item axis is ``parallel``: a chip with two
TensorCores splits the items.
``python -m pallasite report examples.jagged_attention:jagged_attention``
shows the items (``grid_programs``) and the busiest item's key steps
(``max_program_tiles``); ``benchmarks/causal.py`` compares both schedules on
~1000 skewed segments.
"""

from __future__ import annotations

import itertools
import math

import torch

import pallasite
import pallasite.language as hl

# Block sizes for [tile_q, tile_k]: 16 rows, a whole bf16 sublane tile.
BLOCK_SIZES = [16, 16]


@pallasite.kernel(config=pallasite.Config(block_sizes=BLOCK_SIZES))
def jagged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    total, head_dim = q.size()
    assert k.size() == q.size() and v.size() == q.size(), "q, k and v must have the same shape"
    out = torch.zeros_like(q)
    scale = 1.0 / math.sqrt(head_dim)
    for seq in hl.grid(offsets.size(0) - 1):
        start = offsets[seq]
        end = offsets[seq + 1]
        for tile_q in hl.tile(start, end):
            q_blk = q[tile_q, :]
            m_i = hl.full([tile_q], float("-inf"), dtype=torch.float32)
            l_i = hl.zeros([tile_q], dtype=torch.float32)
            acc = hl.zeros([tile_q, head_dim], dtype=torch.float32)
            # causal: keys after the query tile's last row are never visited
            for tile_k in hl.tile(start, min(end, tile_q.end)):
                k_blk = k[tile_k, :]
                v_blk = v[tile_k, :]
                qk = hl.dot(q_blk, k_blk.T) * scale
                visible = tile_q.index[:, None] >= tile_k.index[None, :]
                qk = torch.where(visible, qk, float("-inf"))
                m_new = torch.maximum(m_i, torch.amax(qk, -1))
                p = torch.exp(qk - m_new[:, None])
                alpha = torch.exp(m_i - m_new)
                l_i = l_i * alpha + torch.sum(p, -1)
                acc = hl.dot(p.to(v_blk.dtype), v_blk, acc=acc * alpha[:, None])
                m_i = m_new
            out[tile_q, :] = (acc / l_i[:, None]).to(out.dtype)
    return out


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Each segment on its own, with PyTorch's causal attention."""
    out = torch.zeros_like(q)
    bounds = offsets.tolist()
    for begin, end in zip(bounds[:-1], bounds[1:]):
        if end > begin:
            rows = [t[begin:end].float()[None] for t in (q, k, v)]
            result = torch.nn.functional.scaled_dot_product_attention(*rows, is_causal=True)
            out[begin:end] = result[0].to(q.dtype)
    return out


# Skewed segment lengths: an empty one, short ones, one much longer than the rest;
# none a multiple of the block, so tiles straddle segment boundaries.
LENGTHS = (37, 0, 5, 90, 20, 1)


def example_inputs(dtype: torch.dtype = torch.bfloat16, head_dim: int = 64, lengths=LENGTHS) -> tuple:
    torch.manual_seed(0)
    total = sum(lengths)
    q, k, v = (torch.randn(total, head_dim).to(dtype) for _ in range(3))
    offsets = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)
    return q, k, v, offsets


# (atol, rtol) per input dtype, as in attention.py.
TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}


def check() -> float:
    worst = 0.0
    for dtype, (atol, rtol) in TOLERANCES.items():
        for head_dim in (64, 128):
            inputs = example_inputs(dtype, head_dim)
            result = jagged_attention(*inputs)
            expected = reference(*inputs)
            torch.testing.assert_close(result, expected, atol=atol, rtol=rtol)
            worst = max(worst, (result.float() - expected.float()).abs().max().item())
    return worst


if __name__ == "__main__":
    print(f"jagged_attention: max abs error {check():.2e}")
