"""Run one case both ways — compiled (TPU interpret mode) and in reference mode — and classify it."""
from __future__ import annotations

import contextlib
import enum
import random
import re
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from .. import exc
from ..config import Config
from ..testing import check_compiled_lowering, run_ref
from .cases import Case, load_kernel


class Outcome(str, enum.Enum):
    MATCH = "match"
    MISMATCH = "mismatch"  # a silent wrong result: the finding that matters most
    INTERNAL = "internal error"  # an exception that is not a clean pallasite error
    REJECTED = "rejected"  # a pallasite error naming an unsupported form or config
    REF_ERROR = "ref-mode error"  # compiled fine, reference mode raised (as torch would: a program it refuses)
    # compiling refused it as a shape error eager PyTorch would raise (ShapeMismatch), yet
    # reference mode runs it
    FALSE_REFUSAL = "false refusal"
    NO_LOWER = "does not lower"  # ran in interpret mode, but Mosaic cannot compile it for some TPU (--lowering)
    TIMEOUT = "timeout"

    @property
    def is_finding(self) -> bool:
        return self in (Outcome.MISMATCH, Outcome.INTERNAL, Outcome.NO_LOWER, Outcome.REF_ERROR,
                        Outcome.FALSE_REFUSAL)


@dataclass(frozen=True)
class Result:
    case: Case  # with the config that ran
    outcome: Outcome
    detail: str  # the error message, or what differed
    signature: tuple  # "fails the same way" for the shrinker
    seconds: float


# A pallasite error whose text shows the compiler tripped over itself, not over the user's kernel.
_INTERNAL_TEXT = re.compile(r"internal|traceback|assertionerror|keyerror|attributeerror|nonetype|"
                            r"unexpected|please report|\bbug\b", re.IGNORECASE)


class CaseTimeout(BaseException):
    """Raised in the main thread when a case runs past its budget (a BaseException, so a
    compiler's `except Exception` cannot swallow it)."""


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise CaseTimeout(f"case ran past {seconds:g}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def message_of(error: BaseException) -> str:
    text = error.message if isinstance(error, exc.PallasiteError) else str(error)
    return f"{type(error).__name__}: {text.strip().splitlines()[0] if text.strip() else ''}"


def normalized(message: str) -> str:
    """A message with numbers and quoted names blurred, to group and compare failures."""
    message = re.sub(r"\d+", "N", message)
    return re.sub(r"'[^']*'", "'…'", message)[:200]


def choose_config(case: Case, kernel: Any, args: tuple, rng: random.Random) -> Case:
    """Fill in the tunable block sizes from the kernel's config space (legal TPU sizes only)."""
    if case.block_sizes is not None:
        return case
    spec = kernel.bind(args).config_spec
    sizes = []
    for block in spec.block_sizes:
        candidates = block.candidates() or [block.default()]
        small = [c for c in candidates if c <= max(block.extent, candidates[0])]
        sizes.append(rng.choice(small if small and rng.random() < 0.85 else candidates))
    loop_type = case.loop_type if spec.loop_types else None
    # the kind's own knobs (a VMEM budget) stay; the drawn ones join them
    return case.with_(block_sizes=tuple(sizes), loop_type=loop_type, knobs=case.knobs + _draw_knobs(spec, rng))


def _draw_knobs(spec, rng: random.Random) -> tuple:
    """Sometimes deeper stream buffers (per inner loop too), pre-broadcasting, and chunked whole-dim reductions
    (drawn after the block sizes, so a seed's block sizes do not change)."""
    knobs = []
    if rng.random() < 0.3:  # several inner loops: sometimes one depth each (None: the default)
        count = 3 if spec.inner_loop_count < 2 or rng.random() < 0.5 else \
            tuple(rng.choice((None, 2, 3)) for _ in range(spec.inner_loop_count))
        knobs.append(("pallas_load_buffer_count", count))
    if rng.random() < 0.3:
        knobs.append(("pallas_pre_broadcast", True))
    if spec.reduction_dims and rng.random() < 0.6:
        chunks = [dim.candidates() for dim in spec.reduction_dims]
        knobs.append(("reduction_loops", tuple(rng.choice(c) if c and rng.random() < 0.8 else None for c in chunks)))
    return tuple(knobs)


def _clone(args: tuple | list) -> tuple | list:
    return type(args)(a.clone() if isinstance(a, torch.Tensor) else _clone(a) if isinstance(a, (list, tuple))
                      else a for a in args)


def tolerance(case: Case) -> tuple[float, float]:
    """(rtol, atol per unit of the result's magnitude): a few bf16 ulps when bf16 is anywhere
    in the case (XLA keeps f32 intermediates, eager torch rounds every op), two float16 ulps
    when float16 is (a float32 sum in another order rounds to the other side of a float16
    value: a mean of f16 rows differed by one ulp), else f32 sums in another order."""
    if "bfloat16" in case.source() or any(s.dtype == torch.bfloat16 for s in case.inputs):
        return 2.0 ** -6, 2.0 ** -6
    if "float16" in case.source() or any(s.dtype == torch.float16 for s in case.inputs):
        return 2.0 ** -9, 2.0 ** -9
    return 1e-4, 1e-4


def compare(result: Any, expected: Any, case: Case) -> str | None:
    """None if they agree, else what differs (tuples and lists element by element)."""
    if isinstance(result, (tuple, list)) and type(result) is type(expected) and len(result) == len(expected):
        for position, (r, e) in enumerate(zip(result, expected)):
            differs = compare(r, e, case)
            if differs is not None:
                return f"output {position}: {differs}"
        return None
    if not isinstance(result, torch.Tensor) or not isinstance(expected, torch.Tensor):
        return None if type(result) is type(expected) else f"result types differ: {type(result)} vs {type(expected)}"
    if result.shape != expected.shape or result.dtype != expected.dtype:
        return f"compiled {tuple(result.shape)} {result.dtype} vs reference {tuple(expected.shape)} {expected.dtype}"
    if result.numel() == 0:
        return None
    if case.exact or not expected.dtype.is_floating_point:
        bad = result != expected
    else:
        rtol, atol = tolerance(case)
        r, e = result.double(), expected.double()
        finite = e[torch.isfinite(e)]
        scale = max(1.0, float(finite.abs().max())) if finite.numel() else 1.0
        bad = ~torch.isclose(r, e, rtol=rtol, atol=atol * scale, equal_nan=True)
    if not bool(bad.any()):
        return None
    index = tuple(int(i) for i in bad.nonzero()[0])
    return (f"{int(bad.sum())} of {bad.numel()} elements differ; first at {list(index)}: "
            f"compiled {result[index].item()!r}, reference {expected[index].item()!r}")


def run_case(case: Case, timeout: float | None = None, config_rng: random.Random | None = None,
             lowering: bool = False) -> Result:
    """Compile and run `case`, run it in reference mode, compare; never raises (but Ctrl-C).
    `lowering`: also lower the variant that ran for TPU v5e, v6e and v7x (`jax.export`); one
    that does not is `Outcome.NO_LOWER` (a wrong result still counts first)."""
    start = time.perf_counter()

    def done(outcome: Outcome, detail: str, signature: tuple, ran: Case) -> Result:
        return Result(ran, outcome, detail, signature, time.perf_counter() - start)

    ran = case
    try:
        with deadline(timeout):
            kernel = load_kernel(case)
            args = case.make_inputs()
            lowered = None  # what lowering said, if it failed
            try:
                ran = choose_config(case, kernel, args, config_rng or random.Random(0))
                config = ran.config()

                def run_once():
                    bound = kernel.bind(args)  # after constants change: the variant they key
                    variant = bound.compile_config(Config(**config) if config else None, bound.sizes_of(args))
                    return variant, variant(*_clone(args))

                variant, compiled = run_once()
                if case.constants:  # a second call after the constants it read have changed
                    sys.modules[kernel.fn.__module__].rebind_constants()
                    variant, compiled = run_once()
            except exc.PallasiteError as error:
                message = message_of(error)
                if _INTERNAL_TEXT.search(str(error)):
                    return done(Outcome.INTERNAL, message, ("internal", normalized(message)), ran)
                if isinstance(error, exc.ShapeMismatch) and _reference_runs(kernel, args, ran):
                    return done(Outcome.FALSE_REFUSAL, f"{message}\n(reference mode runs it)",
                                ("false refusal", normalized(message)), ran)
                return done(Outcome.REJECTED, message, ("rejected", normalized(message)), ran)
            except CaseTimeout:
                raise
            except Exception as error:  # noqa: BLE001 - anything else is the compiler's fault
                message = message_of(error)
                detail = message + "\n" + "".join(traceback.format_exception(error)[-6:])
                return done(Outcome.INTERNAL, detail, ("internal", normalized(message)), ran)
            if lowering:
                try:
                    check_compiled_lowering(variant)
                except exc.TpuLoweringFailed as error:
                    lowered = message_of(error)
            try:
                expected = run_ref(kernel, _clone(args), config=ran.config())
            except CaseTimeout:
                raise
            except Exception as error:  # noqa: BLE001
                if lowered is not None:
                    return _no_lower(done, lowered, ran)
                message = message_of(error)
                return done(Outcome.REF_ERROR, message, ("ref", normalized(message)), ran)
    except CaseTimeout as error:
        return done(Outcome.TIMEOUT, str(error), ("timeout",), ran)
    difference = compare(compiled, expected, ran)
    if difference is not None:
        return done(Outcome.MISMATCH, difference, ("mismatch",), ran)
    if lowered is not None:
        return _no_lower(done, lowered, ran)
    return done(Outcome.MATCH, "", ("match",), ran)


def _reference_runs(kernel, args: tuple, ran: Case) -> bool:
    """Whether reference mode runs the case (compiling refused it as a shape error)."""
    try:
        run_ref(kernel, _clone(args), config=ran.config())
    except CaseTimeout:
        raise
    except Exception:  # noqa: BLE001 - it refuses too (any error): the refusal stands
        return False
    return True


def _no_lower(done, message: str, ran: Case) -> Result:
    # the chip and Mosaic's reason, without the kernel's name (the shrinker renames nothing,
    # but a smaller case must fail for the same reason)
    reason = message.split(": ", 2)[-1]
    return done(Outcome.NO_LOWER, message, ("no-lower", normalized(reason)), ran)
