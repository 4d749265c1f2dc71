"""How generated kernels execute: Mosaic on a TPU, TPU interpret mode on the CPU."""
from __future__ import annotations

import os

from jax.experimental.pallas import tpu as pltpu

from .chips import default_chip, on_tpu, register_cpu_chip

RACES_ENV = "PALLASITE_INTERPRET_DETECT_RACES"


def _flag(name: str, default: str = "0") -> bool:
    return os.environ.get(name, default).lower() in ("1", "true", "yes", "on")


def interpret_params():
    """None on a TPU; otherwise TPU interpret parameters for the simulated chip."""
    if on_tpu():
        return None
    register_cpu_chip(default_chip())
    return pltpu.InterpretParams(
        detect_races=_flag(RACES_ENV),
        out_of_bounds_reads="raise",
    )
