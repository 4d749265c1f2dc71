"""Run programs written for Helion, unchanged, on pallasite, and count how many are right.

Helion's example programs import `helion`, `helion.language` and
`helion._testing`. This harness runs each program file in a fresh Python
process whose `sys.modules` maps those names onto pallasite (`helion.kernel`
-> `pallasite.kernel`, `helion.language` -> `pallasite.language`, ...) and
onto small test stand-ins (`DEVICE = "cpu"`, a `run_example` that runs each
kernel and compares it with the torch baseline). Nothing outside that child
process sees the mapping. Each program is driven at small sizes: through its
`check(...)` function with the arguments in `SMALL_RUNS` below (our test
data), else through its `main()`.

    python benchmarks/helion_corpus.py --helion-dir /path/to/helion/examples \
        [--timeout 240] [--only add,softmax] [--out results.txt]

One row per program: its name and outcome (correct / wrong result / pallasite
error / other exception / timeout / not drivable and why), then the totals.
The program files are not part of this repository; bring your own copy.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# How each program is driven at small sizes: (function to call, its arguments).
# A program not listed runs its `main()` as written.
SMALL_RUNS: dict[str, tuple[str, tuple]] = {
    "add": ("check", (64, 128)),
    "exp": ("check", (1000,)),
    "sum": ("check", (64, 200)),
    "softmax": ("check", (64, 200)),
    "rms_norm": ("check", (64, 256)),
    "layer_norm": ("check", (32, 256)),
    "matmul": ("check", (64, 128, 256)),
    "bmm": ("check", (2, 64, 128, 128)),
    "long_sum": ("check", (4, 4096)),
    "geglu": ("check", (2, 64, 256)),
    "swiglu": ("check", (2, 64, 256)),
    "welford": ("check", (32, 256)),
    "jsd": ("check", (32, 512)),
    "kl_div": ("check", (32, 512)),
    "low_mem_dropout": ("check", (1024, 0.25)),
    "matmul_split_k": ("check", (64, 1024, 128)),
    "matmul_layernorm": ("check", (64, 128, 256)),
    "broadcast_matmul": ("check", (2, 64, 128, 128)),
    "batch_softmax": ("check", (2, 32, 128)),
    "squeeze_and_excitation_net": ("check", (64, 128, 32)),
    "split_k_barrier": ("check", (64, 1024, 128)),
    "fp8_gemm": ("check", (64, 128, 128)),
    "int4_gemm": ("check", (64, 256, 128)),
    "bf16xint16_gemm": ("check", (64, 128, 256)),
    "grouped_gemm": ("check", ()),
    "gather_gemv": ("check", (256,)),
}

# Names a program may import from `helion._testing` beyond the stand-ins below
# are a gap in this harness, not in pallasite: add them here when seen.
_CUDA_ONLY_PATTERNS = [
    (r"@triton\.jit|triton\.language|import triton\.language", "writes Triton kernels (CUDA/Triton only)"),
    (r"hl\.inline_triton|hl\.triton_kernel", "calls inline Triton (CUDA only)"),
    (r"torch\.distributed|symm_mem", "needs several GPUs (torch.distributed / symmetric memory)"),
    (r"from helion\.experimental|helion\.experimental", "uses Helion experimental APIs (ahead-of-time / CUDA only)"),
]
_SKIP_NAMES = [
    (r"(^|_)triton", "a Triton program (CUDA only)"),
    (r"^blackwell_|_b200_|sm100|sm90", "written for NVIDIA Blackwell/Hopper GPUs"),
    (r"^_?aot_", "ahead-of-time compilation demo (CUDA only)"),
]


def drivable(path: Path) -> str | None:
    """None when a TPU could run the program's kernel, else why not."""
    for pattern, why in _SKIP_NAMES:
        if re.search(pattern, path.stem):
            return why
    text = path.read_text()
    if "import helion" not in text:
        return "no Helion kernel in the file"
    for pattern, why in _CUDA_ONLY_PATTERNS:
        if re.search(pattern, text):
            return why
    return None


# ---------------------------------------------------------------- the parent


def run_one(path: Path, timeout: float) -> dict:
    env = dict(os.environ)
    env["PALLASITE_AUTOTUNE_EFFORT"] = "none"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    env.setdefault("JAX_PLATFORMS", "cpu")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(path)]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                              cwd=str(path.parent))
    except subprocess.TimeoutExpired:
        return {"outcome": "timeout", "detail": f"over {timeout:.0f} s", "seconds": timeout}
    seconds = time.monotonic() - start
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("HELION_CORPUS_RESULT "):
            result = json.loads(line[len("HELION_CORPUS_RESULT "):])
            result["seconds"] = seconds
            return result
    tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"outcome": "other exception", "detail": f"child died (rc {proc.returncode}): {tail}",
            "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--helion-dir", type=Path, help="folder of Helion example .py files")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per program")
    parser.add_argument("--only", default="", help="comma-separated program names")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.child)
    if not args.helion_dir:
        parser.error("--helion-dir is required")
    only = {n for n in args.only.split(",") if n}
    paths = sorted(p for p in args.helion_dir.glob("*.py") if not only or p.stem in only)
    rows: list[tuple[str, dict]] = []
    out = open(args.out, "w") if args.out else None

    def emit(text: str) -> None:
        print(text, flush=True)
        if out:
            out.write(text + "\n")
            out.flush()

    emit(f"{'program':<34} {'outcome':<18} {'s':>5}  detail")
    for path in paths:
        why = drivable(path)
        result = {"outcome": "not drivable", "detail": why, "seconds": 0.0} if why else run_one(path, args.timeout)
        rows.append((path.stem, result))
        emit(f"{path.stem:<34} {result['outcome']:<18} {result['seconds']:>5.0f}  {result.get('detail') or ''}")
    counts: dict[str, int] = {}
    for _, result in rows:
        counts[result["outcome"]] = counts.get(result["outcome"], 0) + 1
    total = len(rows) - counts.get("not drivable", 0)
    emit("")
    emit(f"drivable programs: {total}; correct: {counts.get('correct', 0)} of {total}")
    for outcome, n in sorted(counts.items()):
        emit(f"  {outcome}: {n}")
    if out:
        out.close()
    return 0


# ----------------------------------------------------------------- the child


def child_main(path: Path) -> int:
    import _helion_names  # beside this file: the child's sys.path[0]

    record = _helion_names.install()
    outcome, detail = "other exception", ""
    try:
        module = _helion_names.load_program(path)
        entry, call_args = SMALL_RUNS.get(path.stem, ("main", ()))
        fn = getattr(module, entry, None)
        if fn is None:
            outcome, detail = "not drivable", f"no {entry}() to call"
        else:
            with _helion_names.cuda_as_cpu():
                fn(*call_args)
            if record.compared == 0:
                outcome, detail = "other exception", "ran, but compared nothing with torch"
            else:
                outcome, detail = "correct", f"{record.compared} comparison(s)"
    except BaseException as error:  # noqa: BLE001 - every failure is a row in the table
        outcome, detail = _helion_names.classify(error)
    print("HELION_CORPUS_RESULT " + json.dumps({"outcome": outcome, "detail": detail}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
