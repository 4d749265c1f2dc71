"""Run every example kernel against its PyTorch reference and save its code.

For each example this prints PASS or FAIL with the largest absolute error
against the reference, and the file the generated Pallas code was written to
(under ``$PALLASITE_CODE_DIR``, default ``.pallasite_code``). Exits non-zero if
any example fails.

Run from the repository root: ``python examples/run_all.py`` (or
``python -m examples.run_all``). Each example module defines a kernel with the
module's own name, ``example_inputs()`` and ``check()``. A mesh example (one
that copies between devices) also defines ``DEVICES``, the JAX devices its
``check()`` needs, and ``shard_inputs()``, one device's arguments: its check
runs in a subprocess started with that many CPU devices (JAX fixes the count
when it starts), and its code is generated for ``shard_inputs()``.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import traceback
from pathlib import Path

if not __package__:  # run as a script: make `examples` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pallasite.testing  # noqa: E402
from pallasite.runtime.cpu_devices import cpu_mesh_flags  # noqa: E402

EXAMPLES = [
    "add", "softmax", "layer_norm", "geglu", "swiglu", "argmax",
    "matmul", "bmm", "attention", "jagged_sum", "centering", "softmax_dropout",
    "embedding_bag", "routing_scatter", "sliding_window_attention", "jagged_attention", "short_conv", "gdn",
    "ring_all_gather", "ring_attention", "ring_attention_bidirectional", "tp_all_reduce",
]
ROOT = Path(__file__).resolve().parent.parent


def check_on_devices(name: str, devices: int) -> float:
    """`examples.<name>.check()` in a Python started with `devices` CPU devices."""
    env = dict(os.environ, XLA_FLAGS=cpu_mesh_flags(devices, os.environ.get("XLA_FLAGS", "")),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", f"import examples.{name} as m; print(repr(m.check()))"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"check() failed on {devices} devices:\n{done.stderr[-2000:]}")
    if "RACE DETECTED" in done.stdout:
        raise RuntimeError("the race detector reported a race:\n" + done.stdout[-2000:])
    return float(done.stdout.strip().splitlines()[-1])


def code_dir() -> Path:
    return Path(os.environ.get("PALLASITE_CODE_DIR", ".pallasite_code")) / "generated"


def run_example(name: str) -> bool:
    """Check one example, write its generated code, print one line; True on PASS."""
    try:
        module = importlib.import_module(f"examples.{name}")
        kernel = getattr(module, name)
        if hasattr(module, "DEVICES"):  # a mesh example: its own devices, one device's code
            error = check_on_devices(name, module.DEVICES)
            code = kernel.bind(module.shard_inputs()).to_code()
        else:
            error = module.check()
            # The runtime will expose the code it cached; until then, regenerate it
            # with the config the example's kernel declares (default config if none).
            code, _ = pallasite.testing.code_and_output(
                kernel, module.example_inputs(), **(kernel.config or {})
            )
    except Exception as exception:  # report and go on to the next example
        first_line = (str(exception).strip().splitlines() or [""])[0]
        print(f"{name:<24} FAIL  {type(exception).__name__}: {first_line}")
        if os.environ.get("PALLASITE_VERBOSE"):
            traceback.print_exc()
        return False
    path = code_dir() / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(code)
    print(f"{name:<24} PASS  max abs error {error:.2e}  code: {path.resolve()}")
    return True


def main() -> int:
    passed = sum(run_example(name) for name in EXAMPLES)
    print(f"{passed} passed, {len(EXAMPLES) - passed} failed")
    return 0 if passed == len(EXAMPLES) else 1


if __name__ == "__main__":
    sys.exit(main())
