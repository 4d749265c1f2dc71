"""Every example kernel matches its torch reference and lowers to Mosaic."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

from pallasite.testing import check_tpu_lowering
from pallasite.runtime.cpu_devices import cpu_mesh_flags

EXAMPLES = [
    "add", "softmax", "layer_norm", "geglu", "swiglu", "argmax",
    "matmul", "bmm", "attention", "jagged_sum", "centering", "softmax_dropout",
    "embedding_bag", "routing_scatter", "sliding_window_attention", "jagged_attention", "short_conv",
    "gdn",
]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_matches_torch(name):
    module = importlib.import_module(f"examples.{name}")
    getattr(module, name).reset()
    module.check()


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_lowers_to_mosaic(name):
    module = importlib.import_module(f"examples.{name}")
    kernel = getattr(module, name)
    # Lower the config the example runs with (the kernel's own, else the default).
    codes = check_tpu_lowering(kernel, module.example_inputs(), **(kernel.config or {}))
    assert set(codes) == {"v5e", "v6e", "v7x"}


# Mesh examples (remote copies between devices): JAX fixes its device count when it
# starts, so each runs in a Python started with the devices it needs (race detector
# on, as conftest.py sets it), once per seed of MESH_SEEDS, each a seeded interleaving
# of the devices (pallasite/interleavings.py: whether a race is seen is a function of
# the seed, not of the machine's load), then lowers as every device of its mesh runs it.
MESH_EXAMPLES = ["ring_all_gather", "ring_attention", "ring_attention_bidirectional", "tp_all_reduce"]
MESH_SEEDS = (0, 1, 2)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# examples/ring_attention.py's check() runs five meshes x dtypes x masks; the suite runs
# three that cover 4 and 8 devices, the 2x2 ring, f32 and bf16, causal and not (the mesh
# group of tests/test_remote_dma.py adds 2x2 f32 causal).
CASES = {"ring_attention": "m.CASES[1:3] + m.CASES[4:]"}
_MESH_CHECK = """
from pallasite.interleavings import install, race_free_under_seeds
install()  # before any kernel is traced
import examples.{name} as m
from pallasite.testing import check_tpu_lowering
race_free_under_seeds(lambda: m.check({cases}), {seeds})
codes = check_tpu_lowering(m.{name}, m.shard_inputs(), mesh_shape=m.MESH_SHAPE)
assert set(codes) == {{"v5e", "v6e", "v7x"}}, set(codes)
print("MESH EXAMPLE OK")
"""


@pytest.mark.parametrize("name", MESH_EXAMPLES)
def test_mesh_example_matches_reference_and_lowers(name):
    module = importlib.import_module(f"examples.{name}")
    env = dict(os.environ, XLA_FLAGS=cpu_mesh_flags(module.DEVICES, os.environ.get("XLA_FLAGS", "")),
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", _MESH_CHECK.format(name=name, cases=CASES.get(name, ""), seeds=MESH_SEEDS)],
                          cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "MESH EXAMPLE OK" in done.stdout and "RACE DETECTED" not in done.stdout, done.stdout[-3000:]
