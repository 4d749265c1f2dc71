"""A fuzz run: generate cases, run each both ways, shrink and write up the findings."""
from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence, TextIO

from ..runtime.chips import CHIP_ENV
from .cases import Case, unload_all
from .grammar import FUZZ_LOOP_TYPES, KINDS, generate
from .report import regression_test, summary, write_finding
from .runner import Outcome, Result, run_case
from .shrinker import shrink


@dataclass
class FuzzReport:
    results: list[Result] = field(default_factory=list)
    findings: list[tuple[Result, Path]] = field(default_factory=list)  # shrunk result, test file
    seconds: float = 0.0

    def count(self, outcome: Outcome) -> int:
        return sum(r.outcome is outcome for r in self.results)


def config_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"pallasite-fuzz-config:{seed}:{index}")


def run_fuzz(cases: int, seed: int = 0, *, kinds: Sequence[str] = tuple(KINDS),
             loop_types: Sequence[str] = FUZZ_LOOP_TYPES, out: Path | str = "fuzz_findings",
             timeout_per_case: float | None = 120.0, shrink_findings: bool = True,
             stream: TextIO = sys.stderr, lowering: bool = False) -> FuzzReport:
    """Run `cases` generated cases; a mismatch or internal error is shrunk and written to `out`.
    `lowering`: every case that runs is also lowered for TPU v5e, v6e and v7x, and one that
    does not lower is a finding too ("does not lower")."""
    os.environ.setdefault("PALLASITE_CODE_DIR", tempfile.mkdtemp(prefix="pallasite_fuzz_code_"))
    with _chip_for(lowering):
        return _run(cases, seed, tuple(kinds), tuple(loop_types), out, timeout_per_case, shrink_findings, stream,
                    lowering)


@contextlib.contextmanager
def _chip_for(lowering: bool) -> Iterator[None]:
    """With lowering, cases compile (and their configs are drawn) for v7x, the one of the three
    generations they are lowered for with the least VMEM (64 MiB): a config that plans there
    plans on v5e and v6e, where one drawn for a larger default chip that v7x cannot hold would
    be a finding about the draw, not the compiler. PALLASITE_TPU_CHIP, when set, wins."""
    if not lowering or os.environ.get(CHIP_ENV):
        yield
        return
    os.environ[CHIP_ENV] = "v7x"
    try:
        yield
    finally:
        del os.environ[CHIP_ENV]


def _run(cases: int, seed: int, kinds: tuple[str, ...], loop_types: tuple[str, ...], out: Path | str,
         timeout_per_case: float | None, shrink_findings: bool, stream: TextIO, lowering: bool) -> FuzzReport:
    report = FuzzReport()
    start = time.perf_counter()
    for index in range(cases):
        case = generate(seed, index, kinds, loop_types)
        result = run_case(case, timeout_per_case, config_rng(seed, index), lowering=lowering)
        report.results.append(result)
        note = f"  {result.detail.splitlines()[0][:100]}" if result.outcome is not Outcome.MATCH else ""
        loops = case.loop_type if isinstance(case.loop_type, str) else "+".join(case.loop_type or ("-",))
        print(f"[{index + 1:>4}/{cases}] {case.kind:<17} {loops:<15} {result.outcome.value:<14} "
              f"{result.seconds:5.1f}s{note}",
              file=stream, flush=True)
        if result.outcome.is_finding:
            report.findings.append(_write_up(result, out, timeout_per_case, shrink_findings, stream, lowering))
        if index % 25 == 24:
            unload_all()
    report.seconds = time.perf_counter() - start
    return report


def _write_up(result: Result, out: Path | str, timeout: float | None, shrink_it: bool,
              stream: TextIO, lowering: bool = False) -> tuple[Result, Path]:
    original = result.case
    final = result
    if shrink_it:
        def still_fails(candidate: Case) -> bool:
            nonlocal final
            attempt = run_case(candidate, timeout, lowering=lowering)
            if attempt.signature == result.signature:
                final = attempt
                return True
            return False

        smallest, attempts = shrink(original, still_fails)
        print(f"    shrunk in {attempts} attempts", file=stream, flush=True)
        if final.case != smallest:
            final = run_case(smallest, timeout, lowering=lowering)
    path = write_finding(Path(out), final.case, final, original)
    print(f"    regression test: {path}\n" + regression_test(final.case, final, original), file=stream, flush=True)
    return final, path


def _names(text: str, allowed: Sequence[str], what: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {what} {unknown}; choose from {', '.join(allowed)}")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pallasite.fuzz",
        description="Differential fuzzer: random kernels compiled (TPU interpret mode) vs reference mode.")
    parser.add_argument("--cases", type=int, default=100, help="how many kernels to generate")
    parser.add_argument("--seed", type=int, default=0, help="the run's seed (a seed fixes every case)")
    parser.add_argument("--kinds", type=lambda t: _names(t, tuple(KINDS), "kind"), default=tuple(KINDS),
                        help=f"comma-separated kinds of kernels (default all: {', '.join(KINDS)})")
    parser.add_argument("--loop-types", type=lambda t: _names(t, FUZZ_LOOP_TYPES, "loop type"),
                        default=FUZZ_LOOP_TYPES,
                        help="comma-separated pallas_loop_type values for kernels with inner loops "
                             f"(default all: {', '.join(FUZZ_LOOP_TYPES)}; outer_pipeline goes to loops that may fold)")
    parser.add_argument("--out", default="fuzz_findings", help="folder for the regression tests of findings")
    parser.add_argument("--timeout-per-case", type=float, default=120.0, help="seconds before a case times out")
    parser.add_argument("--no-shrink", action="store_true", help="write findings as generated, unshrunk")
    parser.add_argument("--lowering", action="store_true",
                        help="also lower every case that runs for TPU v5e, v6e and v7x (jax.export); one that "
                             "does not lower is a finding")
    args = parser.parse_args(argv)
    report = run_fuzz(args.cases, args.seed, kinds=args.kinds, loop_types=args.loop_types, out=args.out,
                      timeout_per_case=args.timeout_per_case, shrink_findings=not args.no_shrink,
                      lowering=args.lowering)
    print(summary(report.results, report.seconds, args.kinds))
    for result, path in report.findings:
        print(f"finding: {result.outcome.value} in {result.case.name}: {result.detail.splitlines()[0]}\n  -> {path}")
    return 1 if report.findings else 0
