"""Test setup: TPU interpret mode with race detection, generated code in a temp dir."""
from __future__ import annotations

import os

os.environ.setdefault("PALLASITE_INTERPRET_DETECT_RACES", "1")
# Interpret mode compiles one XLA CPU program per kernel call, and that compile is most
# of the suite's time (~60% of a test, profiled); these small programs run as fast without
# LLVM's optimizations and XLA's fusion emitters, and compile 2-3x faster. Subprocess
# tests inherit the flags (they append their device count).
_FAST_CPU_COMPILE = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")
os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""),
                                    *(f for f in _FAST_CPU_COMPILE if f not in os.environ.get("XLA_FLAGS", ""))]).strip()
os.environ.setdefault("PALLASITE_CODE_DIR", os.path.join(os.path.dirname(__file__), "..", ".pallasite_code", "tests"))
# The suite compiles hundreds of kernels: each runs its default config, not an autotuning
# search (tests of the tuner pass autotune_effort explicitly), and any tuned config is
# cached in a throwaway directory rather than the user's ~/.cache/pallasite.
os.environ.setdefault("PALLASITE_AUTOTUNE_EFFORT", "none")
os.environ.setdefault("PALLASITE_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".pallasite_code",
                                                          "autotune_cache"))


# Every kernel a test compiles is also lowered for TPU v5e, v6e and v7x (tests/tpu_lowering.py).
from tpu_lowering import (  # noqa: E402,F401 - pytest finds the hooks in this module's namespace
    pytest_collection_modifyitems, pytest_configure, pytest_runtest_call, pytest_sessionfinish,
    pytest_terminal_summary, pytest_testnodedown,
)

pytest_plugins = ["pytester"]


# A worker frees its compiled programs once it holds this many memory mappings (Linux
# kills a process past vm.max_map_count, 65530 by default; each XLA CPU program holds ~40).
_MAPPINGS_BEFORE_RELEASE = 40000


def _mappings() -> int:
    try:
        with open("/proc/self/maps", "rb") as maps:
            return maps.read().count(b"\n")
    except OSError:  # not Linux: no such cap to stay under
        return 0


def pytest_runtest_teardown(item, nextitem):
    """After a test module's last test, if this worker's compiled programs come near Linux's
    cap on memory mappings (vm.max_map_count), free them (`pallasite.release_compiled_code`):
    a worker keeping every program of the suite is killed. Only then, since a full garbage
    collection of a worker's heap costs ~0.5 s and the next module may reuse a kernel."""
    if (nextitem is None or nextitem.module is not item.module) and _mappings() > _MAPPINGS_BEFORE_RELEASE:
        import gc

        import pallasite

        pallasite.release_compiled_code()
        gc.collect()
