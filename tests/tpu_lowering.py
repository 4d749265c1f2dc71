"""A pytest plugin: every kernel variant a test compiles is also lowered for TPU.

Interpret mode runs kernels Mosaic cannot compile, so after each test passes, each
variant it compiled (`CompiledKernel`, seen through `COMPILE_OBSERVERS`) is lowered for
TPU v5e, v6e and v7x with `jax.export` (`pallasite.testing.check_compiled_lowering`: each
chip's plan and module; a module already lowered in this process, or generated alike for a
chip with the same lowering facts, is not lowered again). A variant that does not lower, or
does not plan for one of the chips, fails the test that compiled it.

A test that compiles on purpose what a TPU cannot run says why:
`@pytest.mark.no_tpu_lowering(reason="...")`; the marker without a reason is a usage error.
tests/conftest.py imports the hooks; a subprocess test may pass `-p tpu_lowering`.
"""
from __future__ import annotations

import time

import pytest

from pallasite import testing
from pallasite.runtime.compiled import COMPILE_OBSERVERS
from pallasite.testing import check_compiled_lowering

_COMPILED: list = []  # variants compiled since the last test's call was checked
COMPILE_OBSERVERS.append(_COMPILED.append)

MARKER = "no_tpu_lowering"


def pytest_configure(config):
    config.addinivalue_line("markers", f"{MARKER}(reason): the test compiles kernels a TPU cannot run, on "
                                       "purpose; they are not lowered (the reason is required)")


def pytest_collection_modifyitems(config, items):
    unexplained = [item.nodeid for item in items for mark in item.iter_markers(MARKER)
                   if mark.args or not (isinstance(mark.kwargs.get("reason"), str) and mark.kwargs["reason"].strip())]
    if unexplained:
        raise pytest.UsageError(f"@pytest.mark.{MARKER} needs reason=\"...\" (why a TPU cannot run what the "
                                f"test compiles): {', '.join(unexplained)}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """After the test body: lower what it (and its fixtures' setup) compiled."""
    try:
        result = yield
    except BaseException:
        _COMPILED.clear()
        raise
    compiled, _COMPILED[:] = list(_COMPILED), []
    if item.get_closest_marker(MARKER) is None:
        start = time.perf_counter()
        try:
            for variant in compiled:
                check_compiled_lowering(variant)
        finally:
            _COST["variants"] += len(compiled)
            _COST["seconds"] += time.perf_counter() - start
    return result


# What the checks cost, said at the end of a run (summed over xdist's workers).
_COST = {"variants": 0, "seconds": 0.0, "modules": 0}


def pytest_sessionfinish(session):
    _COST["modules"] = len(testing._LOWERED)  # every module lowered, by these checks or a test's own
    if hasattr(session.config, "workeroutput"):  # an xdist worker: report to the controller
        session.config.workeroutput["tpu_lowering"] = dict(_COST)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    cost = getattr(node, "workeroutput", {}).get("tpu_lowering")
    if cost:
        _COST.setdefault("workers", []).append(cost)


def pytest_terminal_summary(terminalreporter):
    parts = _COST.get("workers") or [_COST]
    variants, modules = sum(p["variants"] for p in parts), sum(p["modules"] for p in parts)
    seconds = sum(p["seconds"] for p in parts)
    if variants:
        terminalreporter.write_line(f"TPU lowering checks: {variants} compiled variants, {modules} modules lowered "
                                    f"(v5e/v6e/v7x), {seconds:.1f}s of {len(parts)} process(es)")
