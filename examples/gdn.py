"""Recurrent gated delta rule (GDN) forward over variable-length sequences, token by token.

Per sequence and head, a state ``S`` ``[K, V]`` (float32, starting from the sequence's
initial state) is updated every token ``t``::

    S = S * exp(g[t])                      # gated decay
    S = S + k[t]^T ((v[t] - k[t] S) beta[t])   # delta rule
    o[t] = q[t] S

Each program owns one (sequence, head); the tokens' q/k/v/g/beta rows are loaded a tile
at a time (staged in VMEM once per tile) and read one token per step of an inner loop
(``qb[tile_s.begin]``, ``gb[tile_s.index, head]``): pallasite reads them out of the VMEM
refs with ``pl.ds`` rather than slicing loaded values. The state is carried across both
loops (in VMEM scratch under ``emit_pipeline``). The final state is returned too.
"""

from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl

BLOCK_SIZES = [8]


@pallasite.kernel(config=pallasite.Config(block_sizes=BLOCK_SIZES))
def gdn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
        initial_state: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, heads, key_dim = q.shape
    value_dim = v.size(2)
    sequences = offsets.size(0) - 1
    out = torch.empty([tokens, heads, value_dim], dtype=torch.float32, device=q.device)
    final = torch.empty([sequences, heads, key_dim, value_dim], dtype=torch.float32, device=q.device)
    for head, seq in hl.grid([heads, sequences]):
        start = offsets[seq]
        end = offsets[seq + 1]
        state = initial_state[seq, head, :, :]
        for tile_t in hl.tile(start, end):
            qb = q[tile_t, head, :]
            kb = k[tile_t, head, :]
            vb = v[tile_t, head, :]
            gb = g[tile_t, :]
            bb = beta[tile_t, :]
            for tile_s in hl.tile(tile_t.end - tile_t.begin, block_size=1):
                q_t = qb[tile_s.begin]
                k_t = kb[tile_s.begin]
                v_t = vb[tile_s.begin]
                decay = torch.exp(gb[tile_s.index, head])  # [1]
                state = state * decay[:, None]
                predicted = (state * k_t[:, None]).sum(0)  # k_t S: [V]
                delta = (v_t - predicted) * bb[tile_s.index, head]
                state = state + k_t[:, None] * delta[None, :]
                out[tile_t.begin + tile_s.begin, head, :] = (state * q_t[:, None]).sum(0)
        final[seq, head, :, :] = state
    return out, final


def reference(q, k, v, g, beta, initial_state, offsets) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence by sequence, head by head, token by token, with matrix products."""
    out = torch.empty(q.shape[0], q.shape[1], v.shape[2])
    final = torch.empty_like(initial_state)
    bounds = offsets.tolist()
    for n, (a, b) in enumerate(zip(bounds, bounds[1:])):
        for h in range(q.shape[1]):
            state = initial_state[n, h].clone()
            for t in range(a, b):
                state = state * torch.exp(g[t, h])
                delta = (v[t, h] - k[t, h] @ state) * beta[t, h]
                state = state + torch.outer(k[t, h], delta)
                out[t, h] = q[t, h] @ state
            final[n, h] = state
    return out, final


def example_inputs() -> tuple:
    torch.manual_seed(0)
    heads, key_dim, value_dim = 4, 128, 128
    lengths = [3, 0, 1, 12, 6]  # unaligned, one empty, one of a single token
    tokens = sum(lengths)
    offsets = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
    q = torch.randn(tokens, heads, key_dim) * key_dim ** -0.5
    k = torch.nn.functional.normalize(torch.randn(tokens, heads, key_dim), dim=-1)
    v = torch.randn(tokens, heads, value_dim)
    g = -torch.rand(tokens, heads) * 0.5  # log decay
    beta = torch.rand(tokens, heads)
    initial_state = torch.randn(len(lengths), heads, key_dim, value_dim) * 0.1
    return q, k, v, g, beta, initial_state, offsets


# float32 recurrences of up to 12 steps, reductions in another order
TOLERANCES = {torch.float32: (1e-4, 1e-4)}


def check() -> float:
    inputs = example_inputs()
    result = gdn(*inputs)
    expected = reference(*inputs)
    atol, rtol = TOLERANCES[inputs[0].dtype]
    torch.testing.assert_close(result, expected, atol=atol, rtol=rtol)
    return max((r - e).abs().max().item() for r, e in zip(result, expected))


if __name__ == "__main__":
    print(f"gdn: max abs error {check():.2e}")
