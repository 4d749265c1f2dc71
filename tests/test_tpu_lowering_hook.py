"""The suite lowers every kernel variant a test compiles for TPU v5e, v6e and v7x
(tests/tpu_lowering.py): a variant some chip cannot run fails the test that compiled it,
unless the test says why with @pytest.mark.no_tpu_lowering(reason=...)."""
from __future__ import annotations

import os

import jax
import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc, testing
from pallasite.runtime.chips import chip_info, lowering_facts
from pallasite.testing import check_compiled_lowering, check_tpu_lowering

# An inner session's tests (pytester, in a subprocess: an in-process session's module
# snapshot would unload torch modules that register operators): each compiles a kernel without
# running it (meta tensors); blocks of 1024 rows (16 MiB, double-buffered, ~96 MiB in all)
# plan for v6e's 128 MiB of VMEM, not for v7x's 64 MiB.
INNER_TESTS = '''
import pytest
import torch

import pallasite
import pallasite.language as hl


@pallasite.kernel
def doubled(x):
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :] * 2
    return out


def compile_for_v6e(monkeypatch, block):
    monkeypatch.setenv("PALLASITE_TPU_CHIP", "v6e")
    x = torch.empty(8192, 4096, device="meta")
    doubled.bind((x,)).compile_config({"block_sizes": [block]})


def test_small_blocks(monkeypatch):
    compile_for_v6e(monkeypatch, 64)


def test_blocks_v7x_cannot_hold(monkeypatch):
    compile_for_v6e(monkeypatch, 1024)


@pytest.mark.no_tpu_lowering(reason="sized for v6e's VMEM on purpose")
def test_blocks_v7x_cannot_hold_said_why(monkeypatch):
    compile_for_v6e(monkeypatch, 1024)
'''


def test_a_variant_some_chip_cannot_run_fails_the_test_that_compiled_it(pytester, monkeypatch):
    tests = os.path.dirname(os.path.abspath(__file__))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([tests, os.path.dirname(tests), os.environ.get("PYTHONPATH", "")]))
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = pytester.runpytest_subprocess("-p", "tpu_lowering", "-p", "no:cacheprovider", timeout=300)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*FAILED test_inner.py::test_blocks_v7x_cannot_hold -*"])
    result.stdout.fnmatch_lines(["*doubled with * does not plan for TPU v7x: VmemOverflow*"])


def test_the_marker_needs_a_reason(pytester):  # refused when collecting: nothing is imported or run
    pytester.makepyfile(test_inner='''
import pytest

@pytest.mark.no_tpu_lowering
def test_unexplained():
    pass
''')
    result = pytester.runpytest_inprocess("-p", "tpu_lowering", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "needs reason=" in result.stderr.str() + result.stdout.str()


@pallasite.kernel
def bf16_sign(x):
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.sign(x[tile])
    return out


def test_chips_with_the_same_lowering_facts_lower_one_module_to_the_same_mosaic():
    # The lowering reads the chip's lane and sublane counts and whether its generation is
    # 4 or later (a bf16 sign, a rank-1 block); v5e, v6e and v7x agree, so a module
    # generated alike for them is lowered once, under any of them.
    assert lowering_facts("v5e") == lowering_facts("v6e") == lowering_facts("v7x")
    assert len({chip_info(chip).generation for chip in ("v5e", "v6e", "v7x")}) == 3
    mosaic: dict[str, list[str]] = {}
    x = torch.randn(2048).to(torch.bfloat16)
    check_tpu_lowering(bf16_sign, (x,), mosaic=mosaic)
    assert mosaic["v5e"] == mosaic["v6e"] == mosaic["v7x"] and len(mosaic["v5e"]) == 1


def test_a_module_is_lowered_once_per_signature_and_lowering_facts(monkeypatch):
    x = torch.randn(1024)
    compiled = bf16_sign.bind((x,)).compile_config()
    exports = []
    export = jax.export.export
    monkeypatch.setattr(jax.export, "export", lambda *a, **k: exports.append(a) or export(*a, **k))
    monkeypatch.setattr(testing, "_LOWERED", set())
    codes = check_compiled_lowering(compiled)
    assert set(codes) == {"v5e", "v6e", "v7x"} and len(exports) == 1  # planned per chip, lowered once
    check_compiled_lowering(compiled)
    assert len(exports) == 1
    check_tpu_lowering(bf16_sign, (torch.randn(2048),), chips=["v5e"])  # another signature
    assert len(exports) == 2


@pytest.mark.no_tpu_lowering(reason="compiles blocks v7x cannot hold, to see the check refuse them")
def test_a_plan_error_for_one_chip_is_a_lowering_failure(monkeypatch):
    monkeypatch.setenv("PALLASITE_TPU_CHIP", "v6e")
    # blocks of 2^22 float32 (16 MiB, ~96 MiB in all): v6e's 128 MiB of VMEM holds them
    compiled = bf16_sign.bind((torch.empty(2 ** 23, device="meta"),)).compile_config({"block_sizes": [2 ** 22]})
    with pytest.raises(exc.TpuLoweringFailed, match="does not plan for TPU v7x: VmemOverflow"):
        check_compiled_lowering(compiled)
