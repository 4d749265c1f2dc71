"""How generated kernels execute: Mosaic on a TPU, TPU interpret mode on the CPU."""
from __future__ import annotations

import functools
import os

from jax._src.pallas.mosaic.interpret import interpret_pallas_call as _tpu_interpret
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
    _trim_aliased_outputs()
    return pltpu.InterpretParams(
        detect_races=_flag(RACES_ENV),
        out_of_bounds_reads="raise",
    )


def _trim_aliased_outputs() -> None:
    """Work around TPU interpret mode returning aliased outputs padded to whole blocks.

    JAX (0.10) pads every input to a multiple of its block shape and, for an
    output aliased to an input, reads the result back at the padded shape, so
    an in-place update of a tensor the blocks do not divide fails to lower
    ("doesn't match function result type"). Slicing each result to its
    declared shape gives what a TPU returns.
    """
    original = _tpu_interpret.interpret_pallas_call
    if getattr(original, "_pallasite_trims_outputs", False):
        return

    @functools.wraps(original)
    def interpret_pallas_call(*args, out_avals, **kwargs):
        results = original(*args, out_avals=out_avals, **kwargs)
        return [
            result if result.shape == aval.shape else result[tuple(slice(0, d) for d in aval.shape)]
            for result, aval in zip(results, out_avals)
        ]

    interpret_pallas_call._pallasite_trims_outputs = True
    _tpu_interpret.interpret_pallas_call = interpret_pallas_call
