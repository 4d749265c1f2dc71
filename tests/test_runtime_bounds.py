"""Data-dependent ranges are checked at run time in interpret mode (issue #11 §1).

A range read from data (a jagged loop's offsets, a kernel scalar bounding a
loop, an index loaded from a table) cannot be checked when the kernel is
planned. In interpret mode the kernel checks it where it is used and the
call raises `exc.ShapeMismatch` with the user's line and the values, never
JAX's padded shapes, and never a silently wrong result.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref



@pallasite.kernel
def segment_sums(x, offsets):
    n = offsets.size(0) - 1
    out = torch.zeros([n, x.size(1)], dtype=torch.float32, device=x.device)
    for g in hl.grid(n):
        acc = hl.zeros([x.size(1)], dtype=torch.float32)
        for tile in hl.tile(offsets[g], offsets[g + 1], block_size=64):
            acc = acc + x[tile, :].sum(0)
        out[g, :] = acc
    return out


@pallasite.kernel
def leading_rows_sum(x, n: int):
    out = torch.zeros([8, x.size(1)], dtype=torch.float32, device=x.device)
    for g in hl.grid(8):
        acc = hl.zeros([x.size(1)], dtype=torch.float32)
        for tile in hl.tile(n, block_size=64):
            acc = acc + x[tile, :].sum(0)
        out[g, :] = acc
    return out


@pallasite.kernel
def gather_rows(x, idx):
    out = torch.empty([idx.size(0), x.size(1)], dtype=x.dtype, device=x.device)
    for g in hl.grid(idx.size(0)):
        row = idx[g]
        out[g, :] = x[row, :] * 2.0
    return out


@pallasite.kernel
def scatter_rows(x, idx, out):
    for g in hl.grid(idx.size(0)):
        out[idx[g], :] = x[g, :]
    return out


def _offsets(values):
    return torch.tensor(values, dtype=torch.int32)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("offsets, shown", [
    ([0, 100, 200, 310], "[200, 310)"),  # past the end, inside JAX's padding: was silently wrong
    ([0, 100, 200, 400], "[200, 400)"),
    ([-8, 100, 200, 300], "[-8, 100)"),
])
def test_jagged_offsets_past_the_tensor_name_the_access_and_the_range(loop_type, offsets, shown):
    x = torch.randn(300, 128)
    with pytest.raises(exc.ShapeMismatch) as info:
        code_and_output(segment_sums, (x, _offsets(offsets)), pallas_loop_type=loop_type)
    message = str(info.value)
    assert "x[tile, :]" in message and f"tile covers {shown}" in message
    assert "x.size(0) is 300" in message
    assert "test_runtime_bounds.py" in message and "acc = acc + x[tile, :].sum(0)" in message
    assert "368" not in message and "Out-of-bounds" not in message  # no padded shapes


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_jagged_offsets_inside_the_tensor_still_run(loop_type):
    x = torch.randn(300, 128)
    offsets = _offsets([0, 100, 100, 300])
    _, result = code_and_output(segment_sums, (x, offsets), pallas_loop_type=loop_type)
    expected = torch.stack([x[0:100].sum(0), torch.zeros(128), x[100:300].sum(0)])
    torch.testing.assert_close(result, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_kernel_scalar_loop_end_past_the_tensor_is_an_error(loop_type):
    x = torch.randn(300, 128)
    with pytest.raises(exc.ShapeMismatch, match=r"tile covers \[0, 310\) but x.size\(0\) is 300"):
        code_and_output(leading_rows_sum, (x, 310), pallas_loop_type=loop_type)
    _, result = code_and_output(leading_rows_sum, (x, 300), pallas_loop_type=loop_type)
    torch.testing.assert_close(result, x.sum(0).expand(8, -1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bad", [400, 300, -1])
def test_a_loaded_row_index_outside_the_tensor_is_an_error(bad):
    x = torch.randn(300, 128)
    with pytest.raises(exc.ShapeMismatch) as info:
        gather_rows(x, _offsets([1, bad, 3]))
    message = str(info.value)
    assert f"row is {bad}" in message and "x.size(0) is 300" in message
    assert "out[g, :] = x[row, :] * 2.0" in message
    result = gather_rows(x, _offsets([1, 299, 3]))
    torch.testing.assert_close(result, x[[1, 299, 3]] * 2.0)


def test_a_loaded_store_index_outside_the_tensor_is_an_error():
    x = torch.randn(3, 128)
    with pytest.raises(exc.ShapeMismatch, match=r"out\[idx\[g\], :\].*is 16 but out.size\(0\) is 16"):
        scatter_rows(x, _offsets([0, 16, 2]), torch.zeros(16, 128))
    out = torch.zeros(16, 128)
    scatter_rows(x, _offsets([0, 15, 2]), out)
    assert torch.equal(out[[0, 15, 2]], x)


def test_the_checks_are_in_the_generated_code_and_only_run_in_interpret_mode():
    x = torch.randn(300, 128)
    code = segment_sums.bind((x, _offsets([0, 300]))).to_code()
    assert "if INTERPRET is not None:" in code and "CHECKS.loop_range(" in code
    # A TPU compile has no callbacks: the checked kernel still lowers to Mosaic.
    check_tpu_lowering(segment_sums, (x, _offsets([0, 100, 300])))
    check_tpu_lowering(gather_rows, (x, _offsets([1, 2, 3])))


def test_a_violation_inside_a_users_jit_warns_with_the_message():
    import jax
    import jax.numpy as jnp

    x = jnp.ones((300, 128), jnp.float32)
    with pytest.warns(UserWarning, match=r"x\[row, :\].*row is 400"):
        jax.block_until_ready(jax.jit(gather_rows.jax_fn)(x, jnp.array([1, 400], jnp.int32)))


@pallasite.kernel(config=pallasite.Config(block_sizes=[128]))
def gather_in_inner_loop(x, idx):
    n = idx.size(0)
    out = torch.empty([n, x.size(1)], dtype=x.dtype, device=x.device)
    for g in hl.grid(n):
        for tc in hl.tile(x.size(1)):
            out[g, tc] = x[idx[g], tc] + 1
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[128]))
def gather_hoisted_index(x, idx):
    n = idx.size(0)
    out = torch.empty([n, x.size(1)], dtype=x.dtype, device=x.device)
    for g in hl.grid(n):
        row = idx[g]
        for tc in hl.tile(x.size(1)):
            out[g, tc] = x[row, tc] + 1
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("kernel", [gather_in_inner_loop, gather_hoisted_index])
def test_a_gathered_row_read_in_an_inner_loop(kernel, loop_type):
    x = torch.randn(10, 300)
    _, out = code_and_output(kernel, (x, _offsets([0, 9, 4])), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, x[[0, 9, 4]] + 1)
    with pytest.raises(exc.ShapeMismatch, match="is 10 but x.size.0. is 10"):
        code_and_output(kernel, (x, _offsets([0, 10, 4])), pallas_loop_type=loop_type)


def test_an_out_of_range_scatter_row_prints_nothing_from_jax(capfd, caplog):
    x = torch.randn(3, 128)
    with pytest.raises(exc.ShapeMismatch):
        scatter_rows(x, _offsets([0, 16, 2]), torch.zeros(16, 128))
    with pytest.raises(exc.ShapeMismatch):
        scatter_rows(x, _offsets([0, -1, 2]), torch.zeros(16, 128))
    captured = capfd.readouterr().err + caplog.text
    assert "io_callback failed" not in captured and "Out-of-bounds" not in captured


@pytest.mark.parametrize("kernel, args", [
    (segment_sums, (torch.randn(300, 128), _offsets([0, 100, 200, 310]))),
    (segment_sums, (torch.randn(300, 128), _offsets([-8, 100, 200, 300]))),
    (leading_rows_sum, (torch.randn(300, 128), 310)),
    (gather_rows, (torch.randn(300, 128), _offsets([1, 400]))),
    (gather_rows, (torch.randn(300, 128), _offsets([1, -1]))),
])
def test_reference_mode_raises_the_same_error(kernel, args):
    from pallasite.testing import run_ref

    with pytest.raises(exc.ShapeMismatch):
        run_ref(kernel, args)


def test_a_scatter_by_table_rows_is_sequential_and_the_last_writer_wins(monkeypatch):
    """Duplicate rows: two programs would write one block, so the axis is arbitrary."""
    from pallasite.plan import Semantics
    from pallasite.runtime import interpret

    monkeypatch.setenv(interpret.CORES_ENV, "2")
    x, idx = torch.randn(4, 128), _offsets([5, 1, 5, 2])
    plan = scatter_rows.bind((x, idx, torch.zeros(16, 128))).plan()
    assert plan.calls[0].grid[0].semantics is Semantics.ARBITRARY
    assert "'idx' chooses which block" in plan.calls[0].grid[0].reason
    out = torch.zeros(16, 128)
    scatter_rows(x, idx, out)  # no DataRace on two simulated cores
    assert torch.equal(out[5], x[2]) and torch.equal(out[1], x[1]) and torch.equal(out[2], x[3])


@pallasite.kernel(static_shapes=True)
def previous_row(x):
    n, d = x.shape
    out = torch.zeros_like(x)
    for g in hl.grid(n):
        out[g, :] = x[g - 1, :]
    return out


@pallasite.kernel(static_shapes=True)
def row_before_tile(x):
    n, d = x.shape
    out = torch.zeros([(n + 7) // 8, d], dtype=x.dtype, device=x.device)
    for t in hl.tile(n, block_size=8):
        out[t.id, :] = x[t.begin - 1, :]
    return out


@pytest.mark.parametrize("kernel", [previous_row, row_before_tile])
def test_a_runtime_index_below_zero_does_not_wrap_in_either_mode(kernel):
    """A grid index or a tile's begin is a runtime value: the compiled kernel refuses one that
    reaches -1 (it does not count from the end, as a Python int would), and so does reference
    mode, which used to wrap x[g - 1] to the last row."""
    x = torch.arange(48.0).reshape(16, 3)
    with pytest.raises(exc.ShapeMismatch):
        code_and_output(kernel, (x,))
    with pytest.raises(exc.ShapeMismatch, match="does not wrap"):
        run_ref(kernel, (x,))
