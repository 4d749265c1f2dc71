"""What a fuzz run prints and writes: the summary table and ready-to-paste regression tests."""
from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path

from .cases import Case
from .runner import Outcome, Result, normalized, tolerance


def summary(results: list[Result], seconds: float, kinds: tuple[str, ...]) -> str:
    """Counts per kind × outcome, wall time, and the distinct rejection messages."""
    outcomes = list(Outcome)
    counts = Counter((r.case.kind, r.outcome) for r in results)
    width = max([len(k) for k in kinds] + [5])
    head = f"{'kind':<{width}} " + " ".join(f"{o.value:>14}" for o in outcomes) + f" {'total':>6}"
    rows = [head, "-" * len(head)]
    for kind in (*kinds, "total"):
        cells = [sum(n for (k, o), n in counts.items() if o is outcome and kind in (k, "total"))
                 for outcome in outcomes]
        rows.append(f"{kind:<{width}} " + " ".join(f"{c:>14}" for c in cells) + f" {sum(cells):>6}")
    rows.append(f"{len(results)} cases in {seconds:.1f}s ({seconds / max(len(results), 1):.2f}s per case)")
    for title, outcome in (("rejections", Outcome.REJECTED), ("reference-mode errors", Outcome.REF_ERROR),
                           ("timeouts", Outcome.TIMEOUT)):
        grouped = Counter(normalized(r.detail.splitlines()[0]) for r in results if r.outcome is outcome)
        if grouped:
            rows.append(f"distinct {title}:")
            rows += [f"  {n:>4} × {message}" for message, n in grouped.most_common()]
    return "\n".join(rows)


def _assertion(case: Case, indent: str) -> str:
    if case.exact:
        return f"{indent}assert torch.equal(result, expected)"
    rtol, atol = tolerance(case)
    return (f"{indent}scale = max(1.0, float(expected.float().nan_to_num(posinf=0, neginf=0).abs().max()))\n"
            f"{indent}torch.testing.assert_close(result, expected, rtol={rtol!r}, atol={atol!r} * scale, "
            "equal_nan=True)")


def regression_test(case: Case, result: Result, original: Case | None = None) -> str:
    """A pytest module (kernel source, inputs, config, the comparison with `run_ref`) for `case`."""
    config = case.config()
    config_text = ", ".join(f"{k}={v!r}" for k, v in config.items())
    inputs = "\n".join("    " + line for line in case.input_lines())
    origin = f" (shrunk from {original.name})" if original is not None and original != case else ""
    detail = textwrap.indent(result.detail.strip(), "#   ")
    body = case.source().split("\n\n\n", 1)[1]
    imports = "\n".join(case.imports())
    # with constants: a first call with their first values, then the compared call
    first_call = (f"    code_and_output({case.name}, {case.name}_inputs(), **config)\n    rebind_constants()\n"
                  if case.constants else "")
    # a case that does not lower for some TPU: the test lowers it for v5e, v6e and v7x too
    lowers = (f"\n    check_tpu_lowering({case.name}, {case.name}_inputs(), **config)"
              if result.outcome is Outcome.NO_LOWER else "")
    return f'''"""Fuzzer finding: {result.outcome.value} in a {case.kind} kernel{origin}."""
# What happened:
{detail}
{imports}
from pallasite.testing import {"check_tpu_lowering, " if lowers else ""}code_and_output, run_ref


{body}

def {case.name}_inputs():
{inputs}
    return {case.call_arguments()}


def test_{case.name}():
    config = dict({config_text})
{first_call}    expected = run_ref({case.name}, {case.name}_inputs(), config=config)
    _, result = code_and_output({case.name}, {case.name}_inputs(), **config)
    assert result.dtype == expected.dtype and result.shape == expected.shape
{_assertion(case, "    ")}{lowers}
'''


def write_finding(folder: Path, case: Case, result: Result, original: Case | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"test_{case.name}.py"
    path.write_text(regression_test(case, result, original))
    return path


