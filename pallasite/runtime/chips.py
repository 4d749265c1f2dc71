"""TPU generations: which one we compile for, and its figures.

On a CPU machine Pallas asks JAX for the TPU's chip info (for emit_pipeline,
Mosaic lowering); we register the chosen generation's info for the "cpu"
device kind so those paths work, and switch it per chip when checking the
lowering for several generations.
"""
from __future__ import annotations

import contextlib
import os
from functools import cache

from jax._src.pallas.mosaic import tpu_info

from .. import exc

_ALIASES = {"v5e": "v5e", "v5litepod": "v5e", "v6e": "v6e", "v7x": "7x", "7x": "7x",
            "v5p": "v5p", "v4": "v4", "7": "7", "v7": "7", "8i": "8i", "v8i": "8i"}
CHIP_ENV = "PALLASITE_TPU_CHIP"


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


@cache
def newest_known_chip() -> str:
    """The newest generation the installed JAX can describe."""
    for version in reversed(list(tpu_info.ChipVersion)):
        try:
            tpu_info.get_tpu_info_for_chip(version, 1)
        except Exception:  # noqa: BLE001 - JAX raises various errors for unknown chips
            continue
        return str(version)
    return "v5e"


def default_chip() -> str:
    return os.environ.get(CHIP_ENV) or newest_known_chip()


def on_tpu() -> bool:
    import jax

    return any(d.platform == "tpu" for d in jax.devices())


def register_cpu_chip(name: str) -> None:
    """Make Pallas on the CPU see TPU generation `name`."""
    info = chip_info(name)
    tpu_info.registry["cpu"] = lambda: info
    tpu_info.get_tpu_info.cache_clear()


@contextlib.contextmanager
def simulated_chip(name: str):
    """Temporarily present generation `name` to Pallas (restores the previous one)."""
    previous = tpu_info.registry.get("cpu")
    register_cpu_chip(name)
    try:
        yield chip_info(name)
    finally:
        if previous is None:
            tpu_info.registry.pop("cpu", None)
        else:
            tpu_info.registry["cpu"] = previous
        tpu_info.get_tpu_info.cache_clear()
