"""One kernel's first call, timed, in a fresh process: pallasite's or Helion's.

`benchmarks/compile_latency.py --vs-helion PYTHON` starts this script with pallasite's
Python on an example file, and with PYTHON (Helion's) on the same example rewritten in
Helion's spelling:

    python _first_call.py MODULE_PATH KERNEL INPUTS_PATH OUTPUT_PATH [PREIMPORT_PATH]

It imports the module at MODULE_PATH (and with it pallasite or Helion), loads the
inputs (`torch.save`d by the caller), times the kernel's first call, reading one value
of each output back, saves the result to OUTPUT_PATH and prints the seconds. JAX and
Pallas are imported before the clock starts (pallasite imports them when it is
imported, Helion on its first call): each side's first call pays for its kernel, not
for importing JAX. The modules the first call imported anyway (the compiler's own
lazily imported parts, JAX's lowering) are written to OUTPUT_PATH + ".modules", one a
line; given PREIMPORT_PATH, such a list, they are imported before the clock starts too.
This file imports nothing from the repository, so Helion's environment needs no pallasite.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import time
from pathlib import Path

import torch

import jax  # noqa: F401  imported before timing (see the docstring)
import jax.numpy  # noqa: F401
from jax.experimental import pallas  # noqa: F401
from jax.experimental.pallas import tpu  # noqa: F401


def load_module(path: str):
    spec = importlib.util.spec_from_file_location("example_kernel", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # both compilers read the kernel's source through its module
    spec.loader.exec_module(module)
    return module


def preimport(list_path: str) -> None:
    for name in Path(list_path).read_text().split():
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001  a module that imports only in context is left to the call
            pass


def main(module_path: str, kernel_name: str, inputs_path: str, output_path: str, preimport_path: str = "") -> None:
    kernel = getattr(load_module(module_path), kernel_name)
    inputs = torch.load(inputs_path, weights_only=False)
    if preimport_path:
        preimport(preimport_path)
    imported = set(sys.modules)
    start = time.perf_counter()
    result = kernel(*inputs)
    for tensor in result if isinstance(result, (tuple, list)) else (result,):
        if isinstance(tensor, torch.Tensor) and tensor.numel():
            tensor.reshape(-1)[0].item()
    seconds = time.perf_counter() - start
    torch.save(result, output_path)
    # in import order, so that importing them in this order again works
    Path(output_path + ".modules").write_text("\n".join(name for name in sys.modules if name not in imported))
    print(seconds)


if __name__ == "__main__":
    main(*sys.argv[1:])
