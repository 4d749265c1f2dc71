"""Causal flash attention, pruned key loop vs masked full loop, counted by `schedule_report`.

Dense causal flash attention, B=8, H=32 (B*H = 256 programs per query block),
D=256, S=4096, bf16, `pallas_loop_type="emit_pipeline"`, at query/key blocks
512², 1024² and 2048². The pruned kernel is `examples/attention.py` with
`causal=True` (key loop `hl.tile(0, min(S, tile_q.end))`); the masked one
below walks every key block and masks above the diagonal. Nothing runs: the
inputs are meta tensors and the report is the plan's counts for them
(key steps, HBM bytes, MXU flops) — model figures, not measurements.

Beside our ratios, the speedups the seed (`dependent-tile-end-bounds.md`)
measured on tpu7x for the same shapes (its blocks 512² and 1024² with a
batch block of 2, ours 1), labelled as such.

Second figure: jagged causal flash attention (`examples/jagged_attention.py`)
over ~1000 segments of skewed lengths (log-normal, median ~55 rows, a long
tail to ~3300), D=128, bf16, blocks 128², `fori_loop`: grid programs and the
largest per-program work (innermost key steps), with the segment grid
flattened into (segment, q-tile) work items and without
(`pallas_flatten_worklist=False`). Total key steps are equal; flattening
spreads them over more, smaller programs, so the busiest program (what a
core waits for) shrinks from the longest segment's whole triangle to one
query tile's row of key blocks.

    python benchmarks/causal.py
"""
from __future__ import annotations

import itertools
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import pallasite  # noqa: E402
import pallasite.language as hl  # noqa: E402
from examples.attention import attention  # noqa: E402
from examples.jagged_attention import jagged_attention  # noqa: E402
from pallasite.testing import schedule_report  # noqa: E402

B, H, D, S = 8, 32, 256, 4096
BLOCKS = (512, 1024, 2048)
LOOP_TYPE = "emit_pipeline"
# Speedup of pruned over masked measured by the seed on tpu7x (TF/s 131.9/85.4, 225.8/158.8, 174.9/144.2).
SEED_MEASURED_SPEEDUP = {512: 1.54, 1024: 1.42, 2048: 1.21}


@pallasite.kernel
def attention_masked(q, k, v):
    """examples/attention.py's causal kernel without pruning: every key block, masked."""
    batch_heads, seq_len, head_dim = q.size()
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(head_dim)
    for tile_b, tile_q in hl.tile([batch_heads, seq_len], block_size=[1, None]):
        m_i = hl.full([tile_b, tile_q], float("-inf"), dtype=torch.float32)
        l_i = hl.zeros([tile_b, tile_q], dtype=torch.float32)
        acc = hl.zeros([tile_b, tile_q, head_dim], dtype=torch.float32)
        q_blk = q[tile_b, tile_q, :]
        for tile_k in hl.tile(seq_len):
            k_blk = k[tile_b, tile_k, :]
            v_blk = v[tile_b, tile_k, :]
            qk = hl.dot(q_blk, k_blk.transpose(1, 2)) * scale
            visible = tile_q.index[None, :, None] >= tile_k.index[None, None, :]
            qk = torch.where(visible, qk, float("-inf"))
            m_new = torch.maximum(m_i, torch.amax(qk, -1))
            p = torch.exp(qk - m_new[:, :, None])
            alpha = torch.exp(m_i - m_new)
            l_i = l_i * alpha + torch.sum(p, -1)
            acc = hl.dot(p.to(v_blk.dtype), v_blk, acc=acc * alpha[:, :, None])
            m_i = m_new
        out[tile_b, tile_q, :] = (acc / l_i[:, :, None]).to(out.dtype)
    return out


def reports(block: int) -> tuple[dict, dict]:
    q, k, v = (torch.empty(B * H, S, D, dtype=torch.bfloat16, device="meta") for _ in range(3))
    config = dict(block_sizes=[block, block], pallas_loop_type=LOOP_TYPE)
    pruned = schedule_report(attention, (q, k, v, True), **config)
    masked = schedule_report(attention_masked, (q, k, v), **config)
    return pruned, masked


def main() -> None:
    gib = 2 ** 30
    print(f"causal flash attention B={B} H={H} D={D} S={S} bf16, {LOOP_TYPE}: pruned vs masked")
    print("model/counts: schedule_report of the plans (nothing runs); measured-by-seed: tpu7x TF/s ratio")
    header = (f"{'block':>10} {'key steps pruned':>16} {'masked':>8} {'steps ratio':>11} "
              f"{'HBM GiB pruned':>14} {'masked':>8} {'HBM ratio':>9} {'flops ratio':>11} "
              f"{'measured-by-seed':>16}")
    print(header)
    print("-" * len(header))
    for block in BLOCKS:
        try:
            pruned, masked = reports(block)
        except pallasite.exc.PallasiteError as err:
            print(f"{block:>4}x{block:<5} not planned: {type(err).__name__}: {str(err).splitlines()[0]}")
            continue
        print(f"{block:>4}x{block:<5} {pruned['inner_tiles']:>16} {masked['inner_tiles']:>8} "
              f"{masked['inner_tiles'] / pruned['inner_tiles']:>10.2f}x "
              f"{pruned['hbm_bytes'] / gib:>14.2f} {masked['hbm_bytes'] / gib:>8.2f} "
              f"{masked['hbm_bytes'] / pruned['hbm_bytes']:>8.2f}x "
              f"{masked['flops'] / pruned['flops']:>10.2f}x "
              f"{SEED_MEASURED_SPEEDUP[block]:>15.2f}x")
    print("Ratios are masked / pruned. Steps and flops: the compute pruning saves; HBM: the K/V windows "
          "it no longer streams. The seed's column is a measured time ratio, ours are counts.")


SEGMENTS, JAGGED_D, JAGGED_BLOCK = 1000, 128, 128


def jagged_lengths() -> list[int]:
    """Skewed, realistic segment lengths (seeded): most short, a few long."""
    generator = torch.Generator().manual_seed(0)
    normal = torch.randn(SEGMENTS, generator=generator)
    return (4.0 + normal).exp().clamp(1, 4096).round().int().tolist()


def jagged_reports() -> dict[str, dict]:
    lengths = jagged_lengths()
    offsets = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)
    q, k, v = (torch.empty(sum(lengths), JAGGED_D, dtype=torch.bfloat16, device="meta") for _ in range(3))
    config = dict(block_sizes=[JAGGED_BLOCK, JAGGED_BLOCK], pallas_loop_type="fori_loop")
    return {
        "per segment": schedule_report(jagged_attention, (q, k, v, offsets), **config,
                                       pallas_flatten_worklist=False),
        "worklist g=1": schedule_report(jagged_attention, (q, k, v, offsets), **config),
        "worklist g=2": schedule_report(jagged_attention, (q, k, v, offsets), **config,
                                        pallas_worklist_grouping=2),
    }


def jagged_main() -> None:
    lengths = jagged_lengths()
    print()
    print(f"jagged causal flash attention: {SEGMENTS} segments, {sum(lengths)} rows (longest {max(lengths)}), "
          f"D={JAGGED_D} bf16, blocks {JAGGED_BLOCK}², fori_loop")
    header = f"{'schedule':>14} {'grid programs':>13} {'key steps':>10} {'busiest program':>15}"
    print(header)
    print("-" * len(header))
    for name, report in jagged_reports().items():
        print(f"{name:>14} {report['grid_programs']:>13} {report['inner_tiles']:>10} "
              f"{report['max_program_tiles']:>15}")
    print("Busiest program: the most key steps one program runs (the load-balance bound on a core).")


if __name__ == "__main__":
    main()
    jagged_main()
