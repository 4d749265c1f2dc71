"""Published TPU measurements of Pallas kernels, the data the cost model is calibrated on.

Each `MeasuredPoint` is one figure read in a public source: the kernel, its shape, dtype,
chip, the schedule it was measured with, the time (converted to seconds from what the
source printed: a time, a TF/s figure over stated useful FLOPs, or device cycles at the
source's stated clock) and how it was timed. Nothing here is estimated: a figure the
sources do not print (an f32 run of the matmul guide, the jagged attention's segment
lengths) is absent, and a point whose work cannot be rebuilt from what was published
carries the reason instead of a config (`unreproducible`).

`benchmarks/cost_model_calibration.py` pairs each point with the pallasite kernel and
config nearest its schedule and prints the model beside the measurement.

Sources (the words `source` fields below abbreviate):
- MATMUL_GUIDE: JAX's Pallas TPU matmul guide, https://docs.jax.dev/en/latest/pallas/tpu/matmul.html
  (repo jax-ml/jax, docs/pallas/tpu/matmul.ipynb, the executed cells' printed output). Run on
  one TPU v5e chip; each time is `timeit` of a jitted call with `block_until_ready`, 100 trials:
  the guide says it includes Python dispatch and is an upper bound on the kernel. Inputs are
  bf16, the accumulator an f32 VMEM scratch, the output bf16. Grid (m/bm, n/bn, k/bk) with K
  the last, "arbitrary" axis. Three kernels: plain, right-hand side transposed in HBM
  (`x @ y.T` with y stored (n, k)), ReLU applied to the accumulator before the store. The guide
  prints only bf16 runs (its float32 kernel is shown without timings), so there is no f32 point.
- SEED_CAUSAL: shared/seeds/dependent-tile-end-bounds.md, "Dense causal flash" table:
  tpu7x, B=8 H=32 D=256 S=4096 bf16, emit_pipeline, TF/s of causal useful FLOPs.
- SEED_JAGGED: the same file, jagged causal self-attention table (B=1152, H=4, D=128,
  blocks 512x512, grouping 1, unroll), TF/s of causal useful FLOPs.
- SEED_SUBVIEWS: shared/seeds/resident-vmem-ref-subviews.md (commit messages: "Re-measured on
  tpu7x"): ragged short conv (H=4, D=128, width 4) and recurrent GDN (H=4, K=V=128).
- V4_PIPELINE: github.com/ayaka14732/pallas-tpu-tutorial, chapter02/02_dma_pipeline/README.md:
  TPU v4, one TensorCore, `y = 2x + 1` over f32[32768,128] (16 MiB) in one kernel whose loop
  copies row tiles HBM->VMEM and back with explicit async copies; cycles per pass read from the
  core's cycle counter (repeat 8 times minus 4 times, over 4), clock 1.05 GHz as the tutorial
  calibrates it.
- V4_MATMUL: the same repository, chapter02/09_large_matmul/README.md and 02_pallas_matmul.txt:
  TPU v4, bf16[2048,2048] @ bf16[2048,2048] -> f32, both TensorCores (1024 rows each), the
  core's LHS half loaded into VMEM once, RHS in 256-column blocks double-buffered, output
  blocks f32[1024,256] double-buffered; XProf's op time on TPU:0.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

MATMUL_GUIDE = ("JAX Pallas TPU matmul guide (docs.jax.dev/en/latest/pallas/tpu/matmul.html; "
                "jax-ml/jax docs/pallas/tpu/matmul.ipynb, printed outputs)")
SEED_CAUSAL = "shared/seeds/dependent-tile-end-bounds.md, dense causal flash table"
SEED_JAGGED = "shared/seeds/dependent-tile-end-bounds.md, jagged causal self-attn table"
SEED_SUBVIEWS = "shared/seeds/resident-vmem-ref-subviews.md, 'Re-measured on tpu7x'"
V4_PIPELINE = "github.com/ayaka14732/pallas-tpu-tutorial chapter02/02_dma_pipeline/README.md"
V4_MATMUL = ("github.com/ayaka14732/pallas-tpu-tutorial chapter02/09_large_matmul/README.md, "
             "02_pallas_matmul.txt")

# How a time was taken: what it includes beside the kernel.
HOST_TIMED = "host"  # wall time of a jitted call from Python: dispatch included
DEVICE_TIMED = "device"  # device time of the kernel alone (profiler op time, cycle counter, TF/s)

# The matmul guide's fastest printed time at all (XLA's own 1024^3 bf16 matmul, 119.4 us,
# whose MXU work alone is ~11 us): an upper bound on the dispatch its host timings include.
# A host-timed point measured under three times that is counted as dominated by dispatch.
MATMUL_GUIDE_HOST_FLOOR_S = 0.00011943008983507753
DISPATCH_DOMINATED_FACTOR = 3.0

V4_CLOCK_HZ = 1.05e9  # the tutorial's calibrated TensorCore clock (cycles -> seconds)


@dataclass(frozen=True)
class MeasuredPoint:
    """One published measurement of one kernel at one schedule."""

    key: str  # unique, short: family/variant/shape/config
    family: str  # the kernel family (one table section)
    kernel: str  # which pallasite kernel reproduces it (names in cost_model_calibration.KERNELS)
    chip: str  # the TPU generation measured on, as pallasite spells it
    shape: Mapping[str, int]  # the problem's sizes, by name
    dtype: str  # input dtype
    schedule: Mapping[str, Any]  # the measured kernel's own schedule, as its source gives it
    measured_s: float  # seconds per call, from the source's printed figure
    timing: str  # HOST_TIMED or DEVICE_TIMED
    source: str
    printed: str  # the figure exactly as the source states it (value and unit)
    host_floor_s: float = 0.0  # host-timed sources: the dispatch bound above (0: device-timed)
    # why no pallasite kernel and config reproduce it ("" when one does): the work cannot be
    # rebuilt from what was published, or the schedule is not one pallasite can express
    unreproducible: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def dispatch_dominated(self) -> bool:
        return (self.timing == HOST_TIMED
                and self.measured_s < DISPATCH_DOMINATED_FACTOR * self.host_floor_s)


def _matmul_guide_points() -> list[MeasuredPoint]:
    # (kernel variant, (bm, bk, bn)) -> printed "Matmul time" in seconds at 1024^3, 4096^3, 8192^3
    printed = {
        "plain": {(128, 128, 128): (0.00029766598949208854, 0.011771515250438824, 0.09183577066054567),
                  (512, 1024, 1024): (0.00012708659982308746, 0.00088908776990138, 0.006099433819763363)},
        "transposed_rhs": {(128, 128, 128): (0.0003029372810851783, 0.012017967159627005, 0.09500920018996112),
                           (512, 1024, 1024): (0.00012131539988331496, 0.0008790623804088682,
                                               0.006107717020204291)},
        "relu": {(128, 128, 128): (0.00030103540048003196, 0.011807117109419778, 0.09181861146935262),
                 (512, 1024, 1024): (0.00012622540001757442, 0.000896632740041241, 0.006130605939542875)},
    }
    points = []
    for variant, by_blocks in printed.items():
        for (bm, bk, bn), times in by_blocks.items():
            for size, seconds in zip((1024, 4096, 8192), times):
                points.append(MeasuredPoint(
                    key=f"matmul_{variant}/{size}^3/bm{bm}_bk{bk}_bn{bn}",
                    family=f"matmul guide, {variant.replace('_', ' ')}",
                    kernel=f"matmul_{variant}",
                    chip="v5e",
                    shape={"m": size, "k": size, "n": size},
                    dtype="bfloat16",
                    schedule={"grid": "(m/bm, n/bn, k/bk), k arbitrary", "bm": bm, "bk": bk, "bn": bn},
                    measured_s=seconds,
                    timing=HOST_TIMED,
                    source=MATMUL_GUIDE,
                    printed=f"Matmul time: {seconds} (s)",
                    host_floor_s=MATMUL_GUIDE_HOST_FLOOR_S,
                ))
    return points


SEED_CAUSAL_SHAPE = {"batch": 8, "heads": 32, "head_dim": 256, "seq": 4096}
# causal useful FLOPs: half of the two S x S x D products of every (batch, head)
SEED_CAUSAL_USEFUL_FLOPS = 4 * 8 * 32 * 4096 * 4096 * 256 / 2
SEED_CAUSAL_TFLOPS = {
    (512, "masked"): 85.4, (512, "pruned"): 131.9,
    (1024, "masked"): 158.8, (1024, "pruned"): 225.8,
    (2048, "masked"): 144.2, (2048, "pruned"): 174.9,
}
SEED_CAUSAL_BATCH_BLOCK = {512: 2, 1024: 2, 2048: 1}


def _seed_causal_points() -> list[MeasuredPoint]:
    points = []
    for (block, variant), tflops in sorted(SEED_CAUSAL_TFLOPS.items(), key=lambda item: item[0][::-1]):
        points.append(MeasuredPoint(
            key=f"causal_attention/{variant}/q{block}_k{block}_bh{SEED_CAUSAL_BATCH_BLOCK[block]}",
            family="dense causal flash attention (seed)",
            kernel=f"attention_{variant}",
            chip="v7x",
            shape=SEED_CAUSAL_SHAPE,
            dtype="bfloat16",
            schedule={"block_q": block, "block_k": block, "batch_block": SEED_CAUSAL_BATCH_BLOCK[block],
                      "loop": "emit_pipeline", "key loop": "pruned at the diagonal" if variant == "pruned"
                      else "every key block, masked"},
            measured_s=SEED_CAUSAL_USEFUL_FLOPS / (tflops * 1e12),
            timing=DEVICE_TIMED,
            source=SEED_CAUSAL,
            printed=f"{tflops} TF/s (causal useful)",
        ))
    return points


def _seed_jagged_points() -> list[MeasuredPoint]:
    table = {"gdpa": (76.0, 118.5), "hstu": (81.9, 126.1), "flash": (63.5, 97.7)}
    points = []
    for kernel, (masked, pruned) in table.items():
        for variant, tflops in (("masked", masked), ("pruned", pruned)):
            points.append(MeasuredPoint(
                key=f"jagged_attention/{kernel}/{variant}",
                family="jagged causal attention (seed)",
                kernel=f"jagged_{kernel}",
                chip="v7x",
                shape={"segments": 1152, "heads": 4, "head_dim": 128},
                dtype="bfloat16",
                schedule={"block_q": 512, "block_k": 512, "loop": "unroll", "worklist grouping": 1},
                measured_s=float("nan"),
                timing=DEVICE_TIMED,
                source=SEED_JAGGED,
                printed=f"{tflops} TF/s (causal useful)",
                unreproducible=("the seed gives TF/s of causal useful FLOPs but not the segment lengths "
                                "(nor their total), so neither the time nor the work can be rebuilt"),
            ))
    return points


def _seed_subview_points() -> list[MeasuredPoint]:
    return [
        MeasuredPoint(
            key="short_conv/resident_subviews", family="ragged short conv / GDN (seed)",
            kernel="short_conv", chip="v7x", shape={"heads": 4, "dim": 128, "width": 4},
            dtype="bfloat16", schedule={"rows": "read as resident VMEM subviews"},
            measured_s=84.67e-6, timing=DEVICE_TIMED, source=SEED_SUBVIEWS,
            printed="short conv 84.67us (vs 445.35us, 5.26x)",
            unreproducible=("the token count, sequence count and lengths are not published (the "
                            "PR's shape table is lost); the 445.35 us is another implementation"),
        ),
        MeasuredPoint(
            key="gdn/resident_subviews", family="ragged short conv / GDN (seed)",
            kernel="gdn", chip="v7x", shape={"heads": 4, "key_dim": 128, "value_dim": 128},
            dtype="float32", schedule={"rows": "read as resident VMEM subviews"},
            measured_s=2749.00e-6, timing=DEVICE_TIMED, source=SEED_SUBVIEWS,
            printed="GDN 2749.00us (vs 3248.04us, 1.18x)",
            unreproducible=("the token count, sequence count and lengths are not published; the "
                            "3248 us is another implementation"),
        ),
    ]


def _v4_pipeline_points() -> list[MeasuredPoint]:
    # tile rows -> cycles per pass, input and output double-buffered ("只改 tile 大小" table)
    double_buffered = {512: 67929, 1024: 53147, 2048: 43872}
    points = [
        MeasuredPoint(
            key=f"v4_scale_shift/double_buffered/tile{rows}",
            family="v4 DMA pipeline, y = 2x + 1",
            kernel="scale_shift",
            chip="v4",
            shape={"rows": 32768, "cols": 128},
            dtype="float32",
            schedule={"tile": f"f32[{rows},128]", "input buffers": 2, "output buffers": 2,
                      "one kernel program, explicit async copies": True},
            measured_s=cycles / V4_CLOCK_HZ,
            timing=DEVICE_TIMED,
            source=V4_PIPELINE,
            printed=f"{cycles} cycles per pass (1.05 GHz)",
        )
        for rows, cycles in double_buffered.items()
    ]
    points.append(MeasuredPoint(
        key="v4_scale_shift/serial/tile512", family="v4 DMA pipeline, y = 2x + 1", kernel="scale_shift",
        chip="v4", shape={"rows": 32768, "cols": 128}, dtype="float32",
        schedule={"tile": "f32[512,128]", "input buffers": 1, "output buffers": 1,
                  "each copy waited before the next starts": True},
        measured_s=102958 / V4_CLOCK_HZ, timing=DEVICE_TIMED, source=V4_PIPELINE,
        printed="102958 cycles per pass (1.05 GHz)",
        unreproducible=("single-buffered copies: pallasite's streamed loops keep at least two buffers "
                        "(pallas_load_buffer_count >= 2), so the next tile's copy always overlaps"),
    ))
    return points


def _v4_matmul_points() -> list[MeasuredPoint]:
    base = dict(family="v4 matmul 2048^2 bf16 -> f32, two TensorCores", kernel="matmul_f32_out",
                chip="v4", shape={"m": 2048, "k": 2048, "n": 2048}, dtype="bfloat16",
                timing=DEVICE_TIMED, source=V4_MATMUL)
    hand = ("a hand-ordered DMA schedule inside one program per core; pallasite's schedules are "
            "BlockSpec grids and inner-loop strategies, which issue every block's copy together")
    return [
        MeasuredPoint(key="v4_matmul/lhs_once", measured_s=81.05e-6, printed="XProf TPU:0 op matmul.1: 81.05 us",
                      schedule={"rows per core": 1024, "rhs block": "bf16[2048,256]", "lhs": "whole, once"},
                      unreproducible=("the core's 4 MiB LHS half is single-buffered; pallasite double-buffers "
                                      "every BlockSpec block, which puts the same schedule at ~19 MiB, over "
                                      "v4's 16 MiB VMEM (planning refuses it)"),
                      **base),
        MeasuredPoint(key="v4_matmul/lhs_4_panels_together", measured_s=81.09e-6,
                      printed="XProf TPU:0 op matmul.1: 81.09 us",
                      schedule={"lhs": "4 panels issued together, block 0 computed per panel"},
                      unreproducible=hand, **base),
        MeasuredPoint(key="v4_matmul/lhs_4_panels_staged", measured_s=78.58e-6,
                      printed="XProf TPU:0 op matmul.1: 78.58 us",
                      schedule={"lhs": "4 panels, each issued when the previous arrives"},
                      unreproducible=hand, **base),
        MeasuredPoint(key="v4_matmul/split_last_writeback", measured_s=76.62e-6,
                      printed="XProf TPU:0 op matmul.1: 76.62 us",
                      schedule={"last block": "written back per panel"}, unreproducible=hand, **base),
        MeasuredPoint(key="v4_matmul/dot_512_rows", measured_s=74.64e-6,
                      printed="XProf TPU:0 op matmul.1: 74.64 us",
                      schedule={"jnp.dot": "512 rows at a time"},
                      unreproducible=("the split_last_writeback schedule with one jnp.dot per 512 rows: "
                                      "hand-ordered DMAs, and MXU weight reuse inside a block, which "
                                      "the model does not see"),
                      **base),
    ]


def all_points() -> list[MeasuredPoint]:
    """Every point, in a fixed order (families in turn, each in the source's order)."""
    return [*_matmul_guide_points(), *_seed_causal_points(), *_v4_pipeline_points(), *_v4_matmul_points(),
            *_seed_jagged_points(), *_seed_subview_points()]
