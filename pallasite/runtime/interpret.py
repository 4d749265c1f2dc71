"""How generated kernels execute: Mosaic on a TPU, TPU interpret mode on the CPU."""
from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
import threading
from typing import Iterator

import jax
import jax.core as jax_core
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as _tpu_interpret
from jax._src.pallas.mosaic.interpret import thread_map as _thread_map
from jax.experimental.pallas import tpu as pltpu

from .chips import default_chip, on_tpu, register_cpu_chip
from .interpret_dots import widened_dots

RACES_ENV = "PALLASITE_INTERPRET_DETECT_RACES"
CORES_ENV = "PALLASITE_INTERPRET_CORES"  # simulated TensorCores: `parallel` grid axes split across them
SEED_ENV = "PALLASITE_INTERPRET_SEED"  # the order interpret mode visits `parallel` grid points in
FAST_COMPILE_ENV = "PALLASITE_INTERPRET_FAST_COMPILE"  # 0: XLA optimizes interpret programs as usual

# An interpret-mode program is a loop of small XLA CPU ops and host callbacks: compiled
# without LLVM's optimizations and XLA's fusion emitters it compiles in ~2/3 of the time
# (0.3-0.5 s less on a first call of the examples) and runs as fast (measured on the
# examples' warm calls: within 4%). LLVM's optimizations stay off in any case
# (`_EXACT_PRECISION`): they fuse `a * b + c` into one rounding, which torch does not.
_FAST_CPU_COMPILE = {"xla_cpu_use_fusion_emitters": False}


def _flag(name: str, default: str = "0") -> bool:
    return os.environ.get(name, default).lower() in ("1", "true", "yes", "on")


def interpret_params():
    """None on a TPU; otherwise TPU interpret parameters for the simulated chip."""
    if on_tpu():
        return None
    register_cpu_chip(default_chip())
    _trim_aliased_outputs()
    seed = os.environ.get(SEED_ENV)
    races = _flag(RACES_ENV)
    return pltpu.InterpretParams(
        detect_races=races,
        # Hunting races, a DMA moves its data when it starts (as a TPU's may), so a
        # copy never waited leaves its semaphore signalled at exit, which is reported.
        dma_execution_mode="eager" if races else "on_wait",
        out_of_bounds_reads="raise",
        uninitialized_memory="nan",  # reading a buffer nothing wrote shows up as NaN
        num_cores_or_threads=int(os.environ.get(CORES_ENV, "1")),
        random_seed=None if seed is None else int(seed),
    )


# XLA's CPU compiler may keep a bf16/f16 intermediate in float32 (`x_bf16 * 3.14159` stored as
# float32 kept bits bf16 rounding drops); a TPU rounds each op's 16-bit result, as torch does.
# LLVM's optimizations contract a float multiply and add into an FMA (one rounding: float32
# results one ulp from torch's); XLA's CPU backend has no switch for that alone.
_EXACT_PRECISION = {"xla_allow_excess_precision": False, "xla_backend_optimization_level": 0}


def compiler_options() -> dict:
    """XLA options for compiling a kernel's program: none on a TPU; in interpret mode, 16-bit
    results rounded as a TPU rounds them and no multiply-add fused, and a fast compile unless
    PALLASITE_INTERPRET_FAST_COMPILE=0."""
    if on_tpu():
        return {}
    return {**_EXACT_PRECISION, **(_FAST_CPU_COMPILE if _flag(FAST_COMPILE_ENV, "1") else {})}


# JAX's pallas_call lowering, in interpret mode, imports its Mosaic GPU interpreter only to
# ask whether the interpret params are GPU ones (`isinstance(..., InterpretGPUParams)`),
# inside `try: ... except ImportError: pass`. pallasite's are TPU ones; the import pulls
# in Mosaic GPU's modules: ~0.2 s of a process's first call.
_GPU_INTERPRETER = "jax._src.pallas.mosaic_gpu.interpret.interpret_pallas_call"


@contextlib.contextmanager
def without_gpu_interpreter() -> Iterator[None]:
    """While a kernel runs (and, on its first call, lowers) in interpret mode, JAX's GPU
    interpreter cannot be imported: its name maps to None in `sys.modules`, which makes the
    import raise ImportError, which JAX's lowering passes over. A process that already
    imported it is left as it is, and the name is removed again afterwards, so code
    outside the block imports it as usual. PALLASITE_INTERPRET_FAST_COMPILE=0 turns this
    off with the fast XLA compile."""
    if _GPU_INTERPRETER in sys.modules or not _flag(FAST_COMPILE_ENV, "1"):
        yield
        return
    sys.modules[_GPU_INTERPRETER] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if sys.modules.get(_GPU_INTERPRETER, 0) is None:
            del sys.modules[_GPU_INTERPRETER]


# With several simulated cores, JAX's interpreter runs each core's body as an XLA program of
# its own, compiled in `thread_map._run_jaxpr` with no options.
_cores_lock = threading.Lock()
_cores_depth = 0


def _run_with_options(jaxpr, consts, *args):
    """JAX's `_run_jaxpr`, compiled with the kernel program's options (`compiler_options`)."""
    def run(jaxpr, consts, *args):
        jax_core.eval_jaxpr(jaxpr, consts, *args)

    traced = jax.jit(run, static_argnums=(0,)).trace(jaxpr, consts, *args)
    traced.lower().compile(compiler_options() or None)(consts, *args)


@contextlib.contextmanager
def cores_compiled_alike() -> Iterator[None]:
    """While kernels run: each simulated core's program (PALLASITE_INTERPRET_CORES > 1) is
    compiled with the options the kernel's own program gets, so results do not depend on the
    core count (without them LLVM fuses `a * b + c` into one rounding, an FMA, on 2 cores and
    not on 1, and XLA may keep 16-bit intermediates in float32). Nested and concurrent calls
    share one replacement, put back when the last ends."""
    global _cores_depth
    module = _thread_map
    if int(os.environ.get(CORES_ENV, "1")) <= 1 or not hasattr(module, "_run_jaxpr"):
        yield
        return
    with _cores_lock:
        if _cores_depth == 0:
            module._pallasite_original_run = module._run_jaxpr
            module._run_jaxpr = _run_with_options
        _cores_depth += 1
    try:
        yield
    finally:
        with _cores_lock:
            _cores_depth -= 1
            if _cores_depth == 0:
                module._run_jaxpr = module._pallasite_original_run


class _Tee(io.TextIOBase):
    """Forwards writes to `stream` and keeps those of the race detector."""

    def __init__(self, stream):
        self.stream = stream
        self.reports: list[str] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        if "RACE DETECTED" in text or "non-zero count" in text:
            with self._lock:
                self.reports.append(text.strip())
            return len(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


@contextlib.contextmanager
def interpreter_reports() -> Iterator[list[str]]:
    """The race detector's reports printed while the block runs (it prints them from
    interpret mode's callbacks and sets a flag only for the last kernel run), and
    the semaphores a kernel left non-zero (a DMA started and never waited)."""
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as state

    state.races = None  # recreated by the next kernel run; never a stale flag
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        yield tee.reports
    if not tee.reports:
        if state.races is not None and state.races.races_found:
            tee.reports.append("RACE DETECTED (see the interpreter's output above)")


def _trim_aliased_outputs() -> None:
    """Work around TPU interpret mode returning aliased outputs padded to whole blocks.

    JAX (0.10) pads every input to a multiple of its block shape and, for an
    output aliased to an input, reads the result back at the padded shape, so
    an in-place update of a tensor the blocks do not divide fails to lower
    ("doesn't match function result type"). Slicing each result to its
    declared shape gives what a TPU returns. The wrapper also hands the
    interpreter the kernel's jaxpr with float32 operands for its 16-bit dots
    (runtime/interpret_dots.py).
    """
    original = _tpu_interpret.interpret_pallas_call
    if getattr(original, "_pallasite_trims_outputs", False):
        return

    @functools.wraps(original)
    def interpret_pallas_call(*args, out_avals, jaxpr, **kwargs):
        # XLA's CPU runtime fails on some 16-bit dots in loops (float32 operands, exact) and drops
        # NaN from large float max/min reductions (NaN restored): interpret_dots.py
        results = original(*args, out_avals=out_avals, jaxpr=widened_dots(jaxpr), **kwargs)
        return [
            result if result.shape == aval.shape else result[tuple(slice(0, d) for d in aval.shape)]
            for result, aval in zip(results, out_avals)
        ]

    interpret_pallas_call._pallasite_trims_outputs = True
    _tpu_interpret.interpret_pallas_call = interpret_pallas_call
