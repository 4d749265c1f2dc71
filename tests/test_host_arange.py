"""`torch.arange` in host code (Helion's MoE: `row_ids = torch.arange(T_max, dtype=torch.int32)`).

Its bounds are compile-time numbers (sizes, constants), so it is an allocation of a
ramp, built at each call like `torch.zeros`, that device loops read as they read an
argument. A runtime bound, a fractional step and int64 (torch's default for ints,
which a TPU cannot hold in vectors) are clear errors."""
from __future__ import annotations

import importlib.util

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel(config=pallasite.Config(block_sizes=[32, 128]))
def scaled_by_ramps(x):
    n, m = x.size()
    rows = torch.arange(n, device=x.device, dtype=torch.int32)
    cols = torch.arange(3, 3 + 2 * m, 2, dtype=torch.float32)
    out = torch.empty_like(x)
    for tn, tm in hl.tile([n, m]):
        out[tn, tm] = x[tn, tm] * rows[tn][:, None].to(torch.float32) + cols[tm][None, :]
    return out


def _scaled_by_ramps(x):
    n, m = x.shape
    return x * torch.arange(n)[:, None] + torch.arange(3, 3 + 2 * m, 2).float()[None, :]


@pallasite.kernel(config=pallasite.Config(block_sizes=[16, 128]))
def gathered_by_a_ramp(x, offset: int):
    offset = hl.specialize(offset)
    n, m = x.size()
    ids = torch.arange(offset, offset + n, dtype=torch.int32)
    out = torch.empty_like(x)
    for tn in hl.tile(n):
        idx = ids[tn] % n
        for tm in hl.tile(m):
            out[tn, tm] = x[idx, tm]
    return out


@pytest.mark.parametrize("shape", [(64, 256), (50, 300)])
def test_ramps_built_in_host_code_are_read_by_the_device_loop(shape):
    x = torch.randn(shape)
    code, out = code_and_output(scaled_by_ramps, (x,))
    torch.testing.assert_close(out, _scaled_by_ramps(x))
    torch.testing.assert_close(run_ref(scaled_by_ramps, (x,)), _scaled_by_ramps(x))
    assert f"jnp.arange({shape[0]}, dtype=jnp.int32)" in code
    check_tpu_lowering(scaled_by_ramps, (x,))


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_ramp_of_a_specialized_start_indexes_a_gather_in_an_inner_loop(loop_type):
    x = torch.randn(40, 256)
    for offset in (0, 7):  # a specialized scalar: each value its own variant
        expected = x[(torch.arange(offset, offset + 40) % 40)]
        _, out = code_and_output(gathered_by_a_ramp, (x, offset), pallas_loop_type=loop_type)
        assert torch.equal(out, expected)
        assert torch.equal(run_ref(gathered_by_a_ramp, (x, offset), pallas_loop_type=loop_type), expected)
    check_tpu_lowering(gathered_by_a_ramp, (x, 7), pallas_loop_type=loop_type)


def test_a_dynamic_size_ramp():
    @pallasite.kernel(static_shapes=False)
    def row_ids(x):
        n = x.size(0)
        ids = torch.arange(n, dtype=torch.int32)
        out = torch.empty([n], dtype=torch.int32, device=x.device)
        for t in hl.tile(n):
            out[t] = ids[t] * 2
        return out

    for n in (100, 300):
        assert torch.equal(row_ids(torch.randn(n, 8)), torch.arange(n, dtype=torch.int32) * 2)


_BAD = """
import torch
import pallasite
import pallasite.language as hl


@pallasite.kernel
def bad(x, s: int):
    n = x.size(0)
    ids = {line}
    out = torch.empty_like(x)
    for t in hl.tile(n):
        out[t] = x[t] + ids[t].to(x.dtype)
    return out
"""


def _kernel_with(path, line: str):
    path.write_text(_BAD.format(line=line))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.bad


@pytest.mark.parametrize("line, error, text", [
    ("torch.arange(n)", exc.UnsupportedDtype, "dtype=torch.int32"),
    ("torch.arange(s, s + n, dtype=torch.int32)", exc.UnsupportedOperation, "runtime value. hl.specialize"),
    ("torch.arange(0.5, n, dtype=torch.float32)", exc.UnsupportedOperation, "fractional start or step"),
    ("torch.arange(0, n * 2**31, 2**31, dtype=torch.int32)", exc.UnsupportedOperation, "past int32"),
    ("torch.arange(n, dtype=torch.bfloat16)", exc.UnsupportedDtype, "rounds a 16-bit ramp its own way"),
])
def test_what_a_host_ramp_cannot_be_is_an_error_at_its_line(tmp_path, line, error, text):
    with pytest.raises(error, match=text) as info:
        _kernel_with(tmp_path / "bad_ramp.py", line)(torch.randn(64), 3)
    assert "ids = " in str(info.value)


def test_torch_arange_in_device_code_points_at_hl_arange(tmp_path):
    path = tmp_path / "device_ramp.py"
    path.write_text(_BAD.replace("    ids = {line}\n", "").replace(
        "ids[t].to(x.dtype)", "torch.arange(8, dtype=torch.int32).sum().to(x.dtype)"))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(exc.UnsupportedOperation, match="not supported in device code. In device code write hl.arange"):
        module.bad(torch.randn(64), 3)
