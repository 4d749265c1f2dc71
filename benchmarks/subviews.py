"""Resident subviews against re-reading rows from the tensor: short conv and GDN.

Each kernel is run twice: as in `examples/` (a block loaded once per outer tile, its rows
read inside the inner loop as VMEM-ref subviews, `blk[tile_s.begin]`), and rewritten to
index the tensor itself in the inner loop (`x[tile_t.begin + tile_s.begin, :, :]`). For
each, per loop type: the plan's HBM bytes against the minimum (each input read once,
each output written once) from `pallasite.report.schedule_report`, the reads per
innermost step (narrowing reads of VMEM refs / tensor loads in the innermost loop), and
the TPU-interpret-mode wall time of one warm call (the CPU simulator's: compare ratios
within one run, not absolute figures). Seed figures on a real tpu7x for the reference
(not measured here): short conv 84.67 us vs 445.35 us (5.26x), GDN 2749 us vs 3248 us
(1.18x). Beside them, the TPU cost model's estimate for v7x
(`pallasite.autotune.cost_model.estimate(...).seconds` and its breakdown), labelled
"model": computed from the plan, nothing measured.

    python benchmarks/subviews.py
"""
from __future__ import annotations

import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import pallasite  # noqa: E402
import pallasite.language as hl  # noqa: E402
from examples import gdn as gdn_example  # noqa: E402
from examples import short_conv as conv_example  # noqa: E402
from pallasite.autotune.cost_model import estimate  # noqa: E402
from pallasite.ir import Load, TileLoop  # noqa: E402
from pallasite.plan.loops import STRATEGIES  # noqa: E402
from pallasite.report import schedule_report  # noqa: E402


@pallasite.kernel
def short_conv_reread(x, weight, conv_state, offsets):
    sequences = offsets.size(0) - 1
    out = torch.empty_like(x)
    for seq in hl.grid(sequences):
        start = offsets[seq]
        end = offsets[seq + 1]
        back3 = conv_state[seq, 0, :, :].to(torch.float32)
        back2 = conv_state[seq, 1, :, :].to(torch.float32)
        back1 = conv_state[seq, 2, :, :].to(torch.float32)
        for tile_t in hl.tile(start, end):
            for tile_s in hl.tile(tile_t.end - tile_t.begin, block_size=1):
                row = x[tile_t.begin + tile_s.begin, :, :].to(torch.float32)
                y = (weight[0, :, :].to(torch.float32) * back3 + weight[1, :, :].to(torch.float32) * back2
                     + weight[2, :, :].to(torch.float32) * back1 + weight[3, :, :].to(torch.float32) * row)
                out[tile_t.begin + tile_s.begin, :, :] = y.to(out.dtype)
                back3 = back2
                back2 = back1
                back1 = row
    return out


@pallasite.kernel
def gdn_reread(q, k, v, g, beta, initial_state, offsets):
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
            for tile_s in hl.tile(tile_t.end - tile_t.begin, block_size=1):
                row = tile_t.begin + tile_s.begin
                q_t = q[row, head, :]
                k_t = k[row, head, :]
                v_t = v[row, head, :]
                state = state * torch.exp(g[row, head])
                predicted = (state * k_t[:, None]).sum(0)
                delta = (v_t - predicted) * beta[row, head]
                state = state + k_t[:, None] * delta[None, :]
                out[row, head, :] = (state * q_t[:, None]).sum(0)
        final[seq, head, :, :] = state
    return out, final


def conv_inputs():
    torch.manual_seed(0)
    lengths = [100, 37, 0, 1, 64]
    offsets = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
    x = torch.randn(sum(lengths), 4, 128).to(torch.bfloat16)
    weight = (torch.randn(4, 4, 128) * 0.5).to(torch.bfloat16)
    state = torch.randn(len(lengths), 3, 4, 128).to(torch.bfloat16)
    return x, weight, state, offsets


def gdn_inputs():
    torch.manual_seed(0)
    lengths = [24, 7, 1, 0]
    tokens = sum(lengths)
    offsets = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
    q = torch.randn(tokens, 4, 128) * 128 ** -0.5
    k = torch.nn.functional.normalize(torch.randn(tokens, 4, 128), dim=-1)
    v = torch.randn(tokens, 4, 128)
    g, beta = -torch.rand(tokens, 4) * 0.5, torch.rand(tokens, 4)
    return q, k, v, g, beta, torch.randn(len(lengths), 4, 128, 128) * 0.1, offsets


def innermost_reads(kernel, args, config) -> tuple[int, int]:
    """(narrowing reads of VMEM refs, tensor loads) in the innermost loop's body."""
    plan = kernel.bind(args).plan(config)

    def innermost(body):
        loops = [item for item in body if isinstance(item, TileLoop)]
        if not loops:
            return None
        for loop in loops:
            deeper = innermost(loop.body)
            return deeper if deeper is not None else loop.body
        return None

    body = innermost(plan.calls[0].call.loop.body) or []
    nodes = [item for item in body if not isinstance(item, TileLoop)]
    return (sum(1 for n in nodes if getattr(n, "op", "") == "subview"),
            sum(1 for n in nodes if isinstance(n, Load)))


def wall_time(kernel, args, config) -> float:
    compiled = kernel.bind(args).compile_config(config)
    compiled(*args)  # compile and warm up
    start = time.perf_counter()
    compiled(*args)
    return time.perf_counter() - start


MODEL_CHIP = "v7x"


def main() -> None:
    header = (f"{'kernel':24} {'variant':10} {'loop type':14} {'HBM KiB':>9} {'min KiB':>9} {'ratio':>6} "
              f"{'VMEM-ref reads/step':>19} {'loads/step':>10} {'interpret s':>11} {f'model {MODEL_CHIP} us':>13}")
    print(header)
    print("-" * len(header))
    cases = [
        ("short conv H=4 D=128", conv_example.short_conv, short_conv_reread, conv_inputs(), [16]),
        ("GDN H=4 K=V=128", gdn_example.gdn, gdn_reread, gdn_inputs(), [8]),
    ]
    for name, resident, reread, args, blocks in cases:
        for loop_type in STRATEGIES:
            times, modelled = {}, {}
            for variant, kernel in (("subviews", resident), ("re-read", reread)):
                config = pallasite.Config(block_sizes=blocks, pallas_loop_type=loop_type)
                report = schedule_report(kernel, args, block_sizes=blocks, pallas_loop_type=loop_type)
                reads, loads = innermost_reads(kernel, args, config)
                times[variant] = wall_time(kernel, args, config)
                modelled[variant] = estimate(kernel, args, config, chip=MODEL_CHIP)
                hbm, minimum = report["hbm_bytes"], report["min_hbm_bytes"]
                hbm_text = f"{hbm / 1024:9.1f}" if hbm is not None else f"{'?':>9}"
                ratio = f"{hbm / minimum:6.2f}" if hbm is not None and minimum else f"{'?':>6}"
                print(f"{name:24} {variant:10} {loop_type:14} {hbm_text} {minimum / 1024:9.1f} {ratio} "
                      f"{reads:19d} {loads:10d} {times[variant]:11.3f} {modelled[variant].seconds * 1e6:13.2f}")
            for variant, cost in modelled.items():
                terms = ", ".join(f"{k} {v * 1e6:.2f}" for k, v in cost.breakdown.items())
                print(f"{'':24} {variant:10} {cost.label} {cost.chip} breakdown (us): {terms}")
            print(f"{'':24} re-read / subviews: interpret time {times['re-read'] / times['subviews']:.2f}x, "
                  f"{modelled['re-read'].label} {modelled['re-read'].seconds / modelled['subviews'].seconds:.2f}x")

    print(f"model {MODEL_CHIP} us: pallasite's TPU cost model (autotune/cost_model.py) from the plan, not measured.")


if __name__ == "__main__":
    main()
