"""Causal flash attention, pruned key loop vs masked full loop: the cost model beside the seed.

Dense causal flash attention, B=8, H=32, D=256, S=4096, bf16,
`pallas_loop_type="emit_pipeline"`, at the configs the seed
(`dependent-tile-end-bounds.md`) measured on tpu7x: query/key blocks 512² and
1024² with a batch x head block of 2, 2048² with 1. The pruned kernel is
`examples/attention.py`'s causal kernel (key loop `hl.tile(0, min(S,
tile_q.end))`) with a tunable batch block; the masked one walks every key
block and masks above the diagonal. Nothing runs: the inputs are meta tensors.
For each config it prints the plan's counts (`schedule_report`: key steps,
HBM bytes), the cost model's time and breakdown
(`pallasite.autotune.cost_model.estimate`, labelled "model") and the seed's
measured time, then the pruned/masked speedups and both rankings.
`tests/test_cost_model.py` asserts the ranking and the speedups (within 25%).

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
from examples.jagged_attention import jagged_attention  # noqa: E402
from pallasite.testing import schedule_report  # noqa: E402

B, H, D, S = 8, 32, 256, 4096
BLOCKS = (512, 1024, 2048)
LOOP_TYPE = "emit_pipeline"


@pallasite.kernel
def attention_masked(q, k, v):
    """examples/attention.py's causal kernel without pruning: every key block, masked
    (and its batch x head block tunable: block_sizes [batch, query, key])."""
    batch_heads, seq_len, head_dim = q.size()
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(head_dim)
    for tile_b, tile_q in hl.tile([batch_heads, seq_len]):
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


@pallasite.kernel
def attention_pruned(q, k, v):
    """examples/attention.py's causal kernel (key loop pruned at the diagonal) with a
    tunable batch x head block: block_sizes [batch, query, key]."""
    batch_heads, seq_len, head_dim = q.size()
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(head_dim)
    for tile_b, tile_q in hl.tile([batch_heads, seq_len]):
        m_i = hl.full([tile_b, tile_q], float("-inf"), dtype=torch.float32)
        l_i = hl.zeros([tile_b, tile_q], dtype=torch.float32)
        acc = hl.zeros([tile_b, tile_q, head_dim], dtype=torch.float32)
        q_blk = q[tile_b, tile_q, :]
        for tile_k in hl.tile(0, min(seq_len, tile_q.end)):
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


# The seed's measurements (dependent-tile-end-bounds.md, tpu7x): useful causal TF/s per
# (block, variant), and its batch x head block per query/key block.
SEED_MEASURED_TFLOPS = {
    (512, "masked"): 85.4, (512, "pruned"): 131.9,
    (1024, "masked"): 158.8, (1024, "pruned"): 225.8,
    (2048, "masked"): 144.2, (2048, "pruned"): 174.9,
}
SEED_BATCH_BLOCK = {512: 2, 1024: 2, 2048: 1}
USEFUL_FLOPS = 4 * B * H * S * S * D / 2  # causal: half of the two S x S x D products


def seed_configs() -> dict[tuple[int, str], dict]:
    """The seed's six configs: block_sizes [batch, query, key] for both kernels below."""
    return {(block, variant): dict(block_sizes=[SEED_BATCH_BLOCK[block], block, block],
                                   pallas_loop_type=LOOP_TYPE)
            for block in BLOCKS for variant in ("masked", "pruned")}


def main() -> None:
    from pallasite.autotune.cost_model import estimate

    q, k, v = (torch.empty(B * H, S, D, dtype=torch.bfloat16, device="meta") for _ in range(3))
    print(f"causal flash attention B={B} H={H} D={D} S={S} bf16, {LOOP_TYPE}, the seed's configs on v7x")
    print("model: pallasite's TPU cost model (nothing runs); measured: the seed's tpu7x figures")
    header = (f"{'block':>12} {'variant':>7} {'key steps':>9} {'HBM GiB':>8} {'model ms':>9} "
              f"{'measured ms':>11} {'model/meas':>10}   model breakdown (ms)")
    print(header)
    print("-" * len(header))
    modelled = {}
    for (block, variant), config in seed_configs().items():
        kernel = attention_pruned if variant == "pruned" else attention_masked
        try:
            report = schedule_report(kernel, (q, k, v), **config)
            cost = estimate(kernel, (q, k, v), config, chip="v7x")
        except pallasite.exc.PallasiteError as err:
            print(f"{block:>5}x{block:<5} {variant:>7} not planned: {type(err).__name__}: "
                  f"{str(err).splitlines()[0]}")
            continue
        modelled[block, variant] = cost.seconds
        measured = USEFUL_FLOPS / (SEED_MEASURED_TFLOPS[block, variant] * 1e12)
        terms = " ".join(f"{name} {value * 1e3:.2f}" for name, value in cost.breakdown.items())
        print(f"{f'{block}x{block} b{SEED_BATCH_BLOCK[block]}':>12} {variant:>7} {report['inner_tiles']:>9} "
              f"{report['hbm_bytes'] / 2 ** 30:>8.2f} {cost.seconds * 1e3:>9.2f} {measured * 1e3:>11.2f} "
              f"{cost.seconds / measured:>10.2f}   {terms}")
    print()
    print(f"{'block':>10} {'speedup model':>13} {'measured':>9} {'model/measured':>14}")
    for block in BLOCKS:
        if (block, "masked") in modelled and (block, "pruned") in modelled:
            model = modelled[block, "masked"] / modelled[block, "pruned"]
            seed = SEED_MEASURED_TFLOPS[block, "pruned"] / SEED_MEASURED_TFLOPS[block, "masked"]
            print(f"{block:>4}x{block:<5} {model:>12.2f}x {seed:>8.2f}x {model / seed:>14.2f}")
    if len(modelled) == len(SEED_MEASURED_TFLOPS):
        order = lambda table, key: sorted(table, key=key)  # noqa: E731
        model_order = order(modelled, modelled.get)
        seed_order = order(SEED_MEASURED_TFLOPS, lambda c: -SEED_MEASURED_TFLOPS[c])
        fmt = lambda configs: " < ".join(f"{b}{v[0]}" for b, v in configs)  # noqa: E731
        print(f"fastest first, model:    {fmt(model_order)}")
        print(f"fastest first, measured: {fmt(seed_order)}")
    print("Times labelled 'model' are the cost model's estimate (pallasite.autotune.cost_model), not "
          "measurements; 'measured' are the seed's tpu7x figures (useful causal FLOPs / its TF/s).")


SEGMENTS, JAGGED_D, JAGGED_BLOCK = 1000, 128, 128


def jagged_lengths() -> list[int]:
    """Skewed, realistic segment lengths (seeded): most short, a few long."""
    generator = torch.Generator().manual_seed(0)
    normal = torch.randn(SEGMENTS, generator=generator)
    return (4.0 + normal).exp().clamp(1, 4096).round().int().tolist()


def jagged_reports(chip: str | None = None) -> dict[str, dict]:
    lengths = jagged_lengths()
    offsets = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)
    q, k, v = (torch.empty(sum(lengths), JAGGED_D, dtype=torch.bfloat16, device="meta") for _ in range(3))
    config = dict(block_sizes=[JAGGED_BLOCK, JAGGED_BLOCK], pallas_loop_type="fori_loop")
    return {
        "per segment": schedule_report(jagged_attention, (q, k, v, offsets), chip=chip, **config,
                                       pallas_flatten_worklist=False),
        "worklist g=1": schedule_report(jagged_attention, (q, k, v, offsets), chip=chip, **config),
        "worklist g=2": schedule_report(jagged_attention, (q, k, v, offsets), chip=chip, **config,
                                        pallas_worklist_grouping=2),
    }


def jagged_main() -> None:
    lengths = jagged_lengths()
    print()
    print(f"jagged causal flash attention: {SEGMENTS} segments, {sum(lengths)} rows (longest {max(lengths)}), "
          f"D={JAGGED_D} bf16, blocks {JAGGED_BLOCK}², fori_loop")
    header = (f"{'schedule':>14} {'grid programs':>13} {'grid steps':>10} {'key steps':>10} "
              f"{'busiest program':>15} {'model (us)':>10}")
    print(header)
    print("-" * len(header))
    reports = jagged_reports()
    for name, report in reports.items():
        print(f"{name:>14} {report['grid_programs']:>13} {report['grid_steps']:>10} {report['inner_tiles']:>10} "
              f"{report['max_program_tiles']:>15} {report['modelled_seconds'] * 1e6:>10.1f}")
    base = reports["per segment"]["modelled_seconds"]
    figures = ", ".join(f"{name} {base / report['modelled_seconds']:.2f}x"
                        for name, report in reports.items() if name != "per segment")
    print(f"modelled speed over the per-segment grid on {reports['per segment']['chip']}: {figures} (the TPU "
          "cost model, autotune/cost_model.py: a model, not a measurement; one TensorCore per device, so "
          "the worklist's load balance does not show in it, only its extra steps)")
    print("Grid programs: programs that do work; grid steps: every program launched (the worklist's grid is "
          "a static bound on its items). Busiest program: the most key steps one program runs (the "
          "load-balance bound on a core).")


if __name__ == "__main__":
    main()
    jagged_main()
