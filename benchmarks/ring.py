"""Ring attention: K/V moved by remote DMA inside the kernel vs `jax.lax.ppermute`
between kernel calls, on a simulated CPU mesh (TPU interpret mode).

For each variant (1-D ring on 4 and 8 devices, 2-D ring on a 2x2 mesh, the
bidirectional 1-D ring; causal and not): from the plan, the bytes each device sends per hop, the hops, and the
matmuls between each copy's start and the wait for it (the compute its transfer
overlaps). Beside it the same attention done as one pallasite kernel call per hop
(`attention_step`: one online-softmax update) with `jax.lax.ppermute` of K and V
between calls — no overlap inside a kernel. Both are checked against unsharded
torch attention; times are interpret-mode wall clock on this CPU (the second call
of a jitted function), which says nothing about a TPU: it shows both run and what
the interpreter costs.

Then a model (nothing measured) of one hop on v5e, v6e and v7x: the ICI transfer
time of the bytes each device sends per hop at the chip's per-link, per-direction
ICI bandwidth (`runtime/chips.py`, from Google Cloud's published per-chip figures;
a bidirectional ring splits its bytes over two links), beside the modelled time of
one hop's attention block (`pallasite.autotune.cost_model.estimate` of
`attention_step`, a same-shape single-device kernel: its compute + overhead terms,
without the HBM terms since the ring keeps K/V in VMEM; and the bare MXU time,
4 * rows^2 * d flops at the bf16 peak), and whether the transfer hides behind it.

    python benchmarks/ring.py [--rows 64] [--head-dim 128] [--model-only]
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from pallasite.runtime.cpu_devices import request_cpu_devices  # noqa: E402 - before JAX starts

request_cpu_devices(8)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import pallasite  # noqa: E402
import pallasite.language as hl  # noqa: E402
from examples import ring_attention as ring  # noqa: E402
from examples import ring_attention_bidirectional as bidirectional  # noqa: E402

# (mesh, causal, bidirectional): 1-D rings, the 2-D ring on 2x2, and half of each block each way
VARIANTS = (((4,), False, False), ((4,), True, False), ((8,), True, False), ((2, 2), False, False),
            ((2, 2), True, False), ((4,), True, True), ((8,), True, True))


@pallasite.kernel(config=pallasite.Config(block_sizes=[]))
def attention_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor, l: torch.Tensor,
                   acc: torch.Tensor, ranks: torch.Tensor, causal: hl.constexpr) -> torch.Tensor:
    """One hop of ring attention: fold the K/V block of rank ranks[1] into (m, l, acc)."""
    s, d = q.size()
    scale = 1.0 / math.sqrt(d)
    for _ in hl.grid(1):
        me, origin = ranks[0], ranks[1]
        m_i = m[:]
        l_i = l[:]
        acc_i = acc[:, :]
        if not causal or origin <= me:
            v_blk = v[:, :]
            qk = hl.dot(q[:, :], k[:, :].transpose(0, 1)) * scale
            if causal:
                visible = (me * s + hl.arange(s))[:, None] >= (origin * s + hl.arange(s))[None, :]
                qk = torch.where(visible, qk, float("-inf"))
            m_new = torch.maximum(m_i, torch.amax(qk, -1))
            p = torch.exp(qk - m_new[:, None])
            alpha = torch.exp(m_i - m_new)
            l_i = l_i * alpha + torch.sum(p, -1)
            acc_i = hl.dot(p.to(v_blk.dtype), v_blk, acc=acc_i * alpha[:, None])
            m_i = m_new
        m[:] = m_i
        l[:] = l_i
        acc[:, :] = acc_i
    return acc


def hop_peers(mesh_shape: tuple[int, ...], hop: int) -> list[tuple[int, int]]:
    """(sender, receiver) flat ranks of hop `hop`'s shift, as the in-kernel ring moves blocks."""
    n, inner = math.prod(mesh_shape), mesh_shape[-1]
    outer = n // inner
    pairs = []
    for rank in range(n):
        row, col = divmod(rank, inner)
        if (hop + 1) % inner != 0:
            pairs.append((rank, row * inner + (col + 1) % inner))
        else:
            pairs.append((rank, ((row + 1) % outer) * inner + col))
    return pairs


def ppermute_attention(q, k, v, mesh_shape, causal):
    n, inner = math.prod(mesh_shape), mesh_shape[-1]
    outer = n // inner
    names = ("x", "y")[:len(mesh_shape)]
    mesh = jax.make_mesh(mesh_shape, names, devices=jax.devices()[:n])
    spec = P(names)
    s, d = q.shape[0] // n, q.shape[1]

    def body(q_shard, k_shard, v_shard, rank_shard):
        me = rank_shard[0]
        row, col = me // inner, me % inner
        m = jnp.full((s,), -jnp.inf, jnp.float32)
        l = jnp.zeros((s,), jnp.float32)
        acc = jnp.zeros((s, d), jnp.float32)
        for hop in range(n):
            r, j = hop // inner, hop % inner
            origin = ((row + outer - r % outer) % outer) * inner + (col + r + inner - j) % inner
            _, updated = attention_step.jax_fn(q_shard, k_shard, v_shard, m, l, acc,
                                               jnp.stack([me, origin]).astype(jnp.int32), causal)
            m, l, acc = updated["m"], updated["l"], updated["acc"]
            if hop < n - 1:
                k_shard, v_shard = (jax.lax.ppermute(x, names, hop_peers(mesh_shape, hop)) for x in (k_shard, v_shard))
        return (acc / l[:, None]).astype(q_shard.dtype)

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(spec,) * 4, out_specs=spec, check_vma=False))
    sharding = NamedSharding(mesh, spec)
    args = [jax.device_put(a, sharding) for a in (q, k, v, jnp.arange(n, dtype=jnp.int32))]
    return step, args


def timed(fn, *args):
    jax.block_until_ready(fn(*args))  # compile and warm up
    start = time.perf_counter()
    result = jax.block_until_ready(fn(*args))
    return result, time.perf_counter() - start


MODEL_CHIPS = ("v5e", "v6e", "v7x")


def modelled_hops(rows: int, d: int, sends: list[tuple[str, int, int]]) -> None:
    """Print the model of one hop per chip: `sends` holds (variant, bytes per device per hop,
    links those bytes are split over)."""
    from pallasite.autotune.cost_model import estimate
    from pallasite.runtime.chips import chip_figures

    block = [torch.zeros(rows, d, dtype=torch.bfloat16) for _ in range(3)]
    args = (*block, torch.zeros(rows), torch.zeros(rows), torch.zeros(rows, d), torch.zeros(2, dtype=torch.int32),
            False)  # a whole (unmasked) block: the most compute a hop has
    print(f"\nmodel (TPU cost model, not measured): one hop, {rows} rows x head dim {d} per device, bf16")
    print(f"{'chip':<6}{'meshes':<22}{'B/dev/hop':>10}{'ICI GB/s/link':>15}{'transfer':>11}"
          f"{'block (model)':>15}{'mxu only':>10}  transfer hidden?")
    for chip in MODEL_CHIPS:
        figures = chip_figures(chip)
        cost = estimate(attention_step, args, chip=chip)
        block_s = cost.breakdown["compute"] + cost.breakdown["overhead"]
        mxu_s = 4 * rows * rows * d / figures.bf16_flops_per_second
        for variant, per_hop, links in sends:
            transfer_s = per_hop / (links * figures.ici_link_bytes_per_second)
            hidden = "yes" if transfer_s <= block_s else f"no ({transfer_s / block_s:.2f}x the block)"
            print(f"{chip:<6}{variant:<22}{per_hop:>10}{figures.ici_link_bytes_per_second / 1e9:>15.0f}"
                  f"{transfer_s * 1e6:>9.2f}us{block_s * 1e6:>13.2f}us{mxu_s * 1e6:>8.3f}us  {hidden}")
        terms = ", ".join(f"{k} {v * 1e6:.2f} us" for k, v in cost.breakdown.items())
        print(f"{'':<6}block breakdown ({cost.label}, {cost.chip}): {terms}")
    print("transfer: bytes / (links x one ICI link's one-way bandwidth), no latency or DMA setup; block: "
          "cost-model estimate of attention_step (compute + overhead terms; at small blocks the "
          "model's fixed per-step overhead dominates); mxu only: 4 rows^2 d flops at the bf16 peak. "
          "A v7x chip's two TensorCores share its links (per-chip figure used). All model, not measurement.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64, help="sequence rows per device")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--model-only", action="store_true", help="print the TPU model only (no interpret runs)")
    options = parser.parse_args()
    rows, d = options.rows, options.head_dim
    sends = []
    print(f"ring attention, {rows} rows per device, head dim {d}, bf16 (interpret mode on CPU)")
    if not options.model_only:
        print(f"{'mesh':<10}{'causal':<8}{'hops':>5}{'B/dev/hop':>11}{'matmuls overlapped':>20}"
              f"{'in-kernel err':>15}{'time':>8}{'ppermute err':>14}{'time':>8}")
    for mesh_shape, causal, both_ways in VARIANTS:
        n = math.prod(mesh_shape)
        q, k, v = ring.example_inputs(n, torch.bfloat16, rows, d)
        shard = torch.zeros(rows, d, dtype=torch.bfloat16)
        rank = torch.zeros(1, dtype=torch.int32)
        if both_ways:
            buffers = torch.zeros(2, 2, rows // 2, d, dtype=torch.bfloat16)
            args = (shard, shard, shard, buffers, buffers, rank, n, causal)
            (call,) = bidirectional.ring_attention_bidirectional.bind(args).plan().calls
        else:
            buffers = torch.zeros(2, rows, d, dtype=torch.bfloat16)
            args = (shard, shard, shard, buffers, buffers, rank, n, mesh_shape[-1], causal)
            (call,) = ring.ring_attention.bind(args).plan().calls
        sites = call.remote.sites
        hops = n - 1  # every hop but the last sends (K and V; both halves when bidirectional)
        per_hop = sum(site.bytes_per_copy for site in sites) // hops
        overlap = min(site.overlapped_matmuls for site in sites)
        label = "x".join(map(str, mesh_shape)) + (" bidir" if both_ways else "")
        links = 2 if both_ways else 1
        same = [i for i, (_, b, k) in enumerate(sends) if (b, k) == (per_hop, links)]
        if not same:
            sends.append((label, per_hop, links))
        elif label not in sends[same[0]][0].split(", "):
            sends[same[0]] = (f"{sends[same[0]][0]}, {label}", per_hop, links)
        if options.model_only:
            continue
        expected = ring.reference(q, k, v, causal).float()
        jq, jk, jv = (ring.to_jax(t) for t in (q, k, v))
        if both_ways:
            ours, ours_time = timed(lambda: bidirectional.run_on_mesh(jq, jk, jv, n, causal))
        else:
            ours, ours_time = timed(lambda: ring.run_on_mesh(jq, jk, jv, mesh_shape, causal))
        step, inputs = ppermute_attention(jq, jk, jv, mesh_shape, causal)
        theirs, theirs_time = timed(step, *inputs)
        errors = [(torch.from_numpy(np.asarray(r, dtype=np.float32)) - expected).abs().max().item()
                  for r in (ours, theirs)]
        print(f"{label:<10}{str(causal):<8}{hops:>5}{per_hop:>11}{overlap:>20}"
              f"{errors[0]:>15.2e}{ours_time:>7.2f}s{errors[1]:>14.2e}{theirs_time:>7.2f}s")
    if not options.model_only:
        print("B/dev/hop: bytes each device sends per hop (bidirectional: half each way, to both neighbours). "
              "matmuls overlapped: the QK^T and PV products between each copy's start and its wait (a causal "
              "hop whose block lies in the future skips them at run time). Times: interpret mode on this CPU, "
              "not a TPU.")
    modelled_hops(rows, d, sends)


if __name__ == "__main__":
    main()
