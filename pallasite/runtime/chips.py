"""TPU generations: which one we compile for, and its figures.

On a CPU machine Pallas asks JAX for the TPU's chip info (for emit_pipeline,
Mosaic lowering); we register the chosen generation's info for the "cpu"
device kind so those paths work, and switch it per chip when checking the
lowering for several generations.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass
import os
from functools import cache

from jax._src.pallas.mosaic import tpu_info

from .. import exc
from ..plan.vmem import SCOPED_VMEM_DEFAULT

_ALIASES = {"v5e": "v5e", "v5litepod": "v5e", "v6e": "v6e", "v7x": "7x", "7x": "7x",
            "v5p": "v5p", "v4": "v4", "7": "7", "v7": "7", "8i": "8i", "v8i": "8i"}
CHIP_ENV = "PALLASITE_TPU_CHIP"
# the generation `simulated_chip` presents: while it is set, what is planned is planned for it
_SIMULATED: ContextVar[str | None] = ContextVar("pallasite_simulated_chip", default=None)


def chip_version(name: str) -> tpu_info.ChipVersion:
    key = _ALIASES.get(name.lower().removeprefix("tpu").strip(" _-"), name)
    try:
        return tpu_info.ChipVersion(key)
    except ValueError:
        raise exc.InvalidConfig(
            f"Unknown TPU generation {name!r}; known: v5e, v6e, v7x (and others JAX knows)."
        ) from None


def chip_info(name: str) -> tpu_info.TpuInfo:
    return tpu_info.get_tpu_info_for_chip(chip_version(name), 1)


DEFAULT_CHIP = "v7x"  # the generation the seed results (benchmarks/) were measured on


def lowering_facts(name: str) -> tuple:
    """What JAX's Pallas TPU lowering reads of the chip (jax 0.10: `tpu_info`'s lane and
    sublane counts, to check rank-1 blocks; whether the generation is 4 or later, for a bf16
    sign and a rank-1 value's tiling; sparse-core facts only for sparse-core kernels, which
    pallasite does not write). One generated module lowers to the same Mosaic on chips with
    equal facts: v5e, v6e and v7x share them (tests/test_tpu_lowering_edges.py checks it), so
    a module generated alike for them is lowered once. Plans still differ per chip (VMEM)."""
    info = chip_info(name)
    return (info.num_lanes, info.num_sublanes, info.generation >= 4)


def default_chip() -> str:
    """The generation kernels are planned, modelled and simulated for: the one `simulated_chip`
    presents, else `PALLASITE_TPU_CHIP` when set, else the attached TPU's own generation,
    else v7x."""
    named = _SIMULATED.get() or os.environ.get(CHIP_ENV)
    if named:
        return named
    kind = attached_device_kind()
    return DEFAULT_CHIP if kind is None else _chip_of_device_kind(kind)


@cache
def attached_device_kind() -> str | None:
    """The device kind of the attached TPU (e.g. "TPU v6 lite"), None without one."""
    import jax

    tpus = [device for device in jax.devices() if device.platform == "tpu"]
    return tpus[0].device_kind if tpus else None


@cache
def _chip_of_device_kind(kind: str) -> str:
    version = tpu_info.chip_version_from_device_kind(kind)
    if version is None:
        exc.warn_user(f"pallasite: JAX does not describe the attached TPU ({kind!r}); planning for "
                      f"{DEFAULT_CHIP}. Set {CHIP_ENV} to choose another generation.")
        return DEFAULT_CHIP
    return version.value if version.value.startswith("v") else f"v{version.value}"  # "7x" -> "v7x"


def on_tpu() -> bool:
    return attached_device_kind() is not None


def register_cpu_chip(name: str) -> None:
    """Make Pallas on the CPU see TPU generation `name`."""
    info = chip_info(name)
    tpu_info.registry["cpu"] = lambda: info
    tpu_info.get_tpu_info.cache_clear()


@contextlib.contextmanager
def simulated_chip(name: str):
    """Temporarily present generation `name` to Pallas, and plan for it (a default config is
    the one a call on that chip runs); restores the previous one."""
    previous = tpu_info.registry.get("cpu")
    register_cpu_chip(name)
    token = _SIMULATED.set(name)
    try:
        yield chip_info(name)
    finally:
        _SIMULATED.reset(token)
        if previous is None:
            tpu_info.registry.pop("cpu", None)
        else:
            tpu_info.registry["cpu"] = previous
        tpu_info.get_tpu_info.cache_clear()


# ----------------------------------------------------------- cost figures --
# What the cost model (autotune/cost_model.py) and the VMEM ceiling (plan/vmem.py) read
# per generation. Peaks, HBM bandwidth and VMEM capacity come from JAX's `tpu_info`
# (per TensorCore); the rest JAX does not describe, so it is listed here with its source.

MIB = 2 ** 20

# MXUs per TensorCore, to turn JAX's bf16 peak into a clock (peak = 2 * MXUs * side^2 *
# clock). Public descriptions: v4/v5e/v5p have four 128x128 MXUs per core (v5e: 197 TF/s =
# 4 * 128^2 * 2 * 1.5 GHz); Trillium (v6e) quadrupled each MXU to 256x256 (918 TF/s at
# four MXUs -> 1.75 GHz); v7x's core is taken as v6e's layout (1.155 PF/s -> 2.2 GHz).
# JAX's `num_mxus` (2 for v6e/v7x) would give 3.5-4.4 GHz clocks, which no TPU runs at.
_MXUS_PER_CORE = {"v4": 4, "v4i": 4, "v5e": 4, "v5p": 4, "v6e": 4, "7": 4, "7x": 4, "8i": 4}


# Inter-chip interconnect (ICI), which JAX's `tpu_info` does not describe. Google Cloud's
# TPU pages list the bidirectional ICI bandwidth per chip: v5e 400 GB/s with 4 ICI ports
# (2-D torus; docs.cloud.google.com/tpu/docs/v5e), v6e 800 GB/s (2-D torus, taken as 4
# ports like v5e) and TPU7x 1200 GB/s (3-D torus: 6 ports; docs.cloud.google.com/tpu/docs/tpu7x,
# whose table lists v6e too). One link, one direction, is that / (2 * ports): the
# bandwidth a ring hop to one neighbour gets. A v7x chip holds two TensorCores (two JAX
# devices) sharing its ports; the figure is per chip, not per device.
_ICI_BIDIRECTIONAL_BYTES_PER_CHIP = {"v5e": 400e9, "v6e": 800e9, "7x": 1200e9, "7": 1200e9, "v5p": 1200e9}
_ICI_PORTS = {"v5e": 4, "v6e": 4, "7x": 6, "7": 6, "v5p": 6}


@dataclass(frozen=True)
class ChipFigures:
    """One generation's figures for one pallas_call, per TensorCore unless said."""

    name: str  # the generation as JAX spells it ("7x", "v6e", ...)
    cores: int  # TensorCores one pallas_call's parallel grid axes are split over (megacore)
    hbm_bytes_per_second: float
    bf16_flops_per_second: float
    clock_hz: float  # bundles per second (derived from the bf16 peak, see _MXUS_PER_CORE)
    vmem_capacity_bytes: int
    scoped_vmem_default_bytes: int
    mxu_side: int  # the MXU's systolic array is side x side
    mxu_accumulators: int  # f32 (8, side) result buffers per MXU (0: JAX does not say)
    # one ICI link, one direction (0.0: no documented figure; see _ICI_BIDIRECTIONAL_BYTES_PER_CHIP)
    ici_link_bytes_per_second: float = 0.0


def chip_figures(name: str | None = None) -> ChipFigures:
    """The cost figures of generation `name` (default: `default_chip()`)."""
    version = chip_version(name or default_chip())
    info = tpu_info.get_tpu_info_for_chip(version, 1)
    key = str(version)
    # Megacore (v4, v5p): one logical device drives both TensorCores and Mosaic splits the
    # grid's parallel axes between them. v7x exposes each TensorCore as its own device
    # (JAX's table: no megacore), so a pallas_call runs on one core there.
    cores = version.num_physical_tensor_cores_per_chip if version.supports_megacore else 1
    mxu_macs = _MXUS_PER_CORE.get(key, info.num_mxus) * info.mxu_column_size ** 2
    return ChipFigures(
        name=key,
        cores=cores,
        hbm_bytes_per_second=float(info.mem_bw_bytes_per_second),
        bf16_flops_per_second=float(info.bf16_ops_per_second),
        clock_hz=info.bf16_ops_per_second / (2 * mxu_macs),
        vmem_capacity_bytes=info.vmem_capacity_bytes,
        scoped_vmem_default_bytes=SCOPED_VMEM_DEFAULT.get(key, 16 * MIB),
        mxu_side=info.mxu_column_size,
        mxu_accumulators=info.num_accumulators,
        ici_link_bytes_per_second=(_ICI_BIDIRECTIONAL_BYTES_PER_CHIP[key] / (2 * _ICI_PORTS[key])
                                   if key in _ICI_PORTS else 0.0),
    )
