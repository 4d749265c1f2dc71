"""Runtime scalars, shapes and dtypes, in-place updates, and host code around loops.

Kernels with torch references; where the schedule matters, assertions on the
plan (inputs, pure outputs, aliased in-place updates).
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import check_tpu_lowering, code_and_output
from plan_helpers import names, only_call, randn
from test_indexing_and_memory import shift_1d, tunable_2d


# ---------------------------------------------------------- scalar arguments --


@pallasite.kernel
def affine(x: torch.Tensor, alpha: float, shift: int) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([m, n]):
        out[tile_m, tile_n] = x[tile_m, tile_n] * alpha + shift
    return out


def test_changing_scalar_values_does_not_recompile():
    x = randn(16, 256, seed=21)
    affine.reset()
    torch.testing.assert_close(affine(x, 2.0, 3), x * 2.0 + 3)
    torch.testing.assert_close(affine(x, -0.5, 7), x * -0.5 + 7)
    bound = affine.bind((x, 2.0, 3))
    assert bound is affine.bind((x, -0.5, 7))
    assert len(bound._compiled) == 1
    call = only_call(affine, (x, 2.0, 3))
    assert [(op.symbol.name, op.memory) for op in call.scalar_inputs] == [("alpha", "smem"), ("shift", "smem")]


@pallasite.kernel
def int_scalar_stays_int(x: torch.Tensor, k: int) -> torch.Tensor:
    (n,) = x.size()
    out = torch.empty_like(x)
    for tile in hl.tile(n, block_size=128):
        out[tile] = x[tile] * k + k // 2
    return out


def test_int_scalar_keeps_int32_arithmetic():
    x = torch.arange(-64, 64, dtype=torch.int32)
    torch.testing.assert_close(int_scalar_stays_int(x, 5), x * 5 + 2)
    torch.testing.assert_close(int_scalar_stays_int(x, -3), x * -3 - 2)


# ------------------------------------------------------ shapes and dtypes --


@pallasite.kernel
def bf16_blend(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m, n = a.size()
    out = torch.empty_like(a)
    for tile_m, tile_n in hl.tile([m, n], block_size=[32, 256]):
        out[tile_m, tile_n] = (a[tile_m, tile_n].float() * 0.25 + b[tile_m, tile_n]).to(torch.bfloat16)
    return out


def test_bf16_with_blocks_larger_than_the_tensor():
    a, b = randn(20, 200, seed=22, dtype=torch.bfloat16), randn(20, 200, seed=23)
    torch.testing.assert_close(bf16_blend(a, b), (a.float() * 0.25 + b).to(torch.bfloat16))
    assert [axis.num_blocks for axis in only_call(bf16_blend, (a, b)).grid] == [1, 1]


def test_a_row_block_of_4_keeps_the_rows_resident():
    x = randn(24, 256)
    call = only_call(tunable_2d, (x,), block_sizes=[4])
    assert "multiple of 8" in call.inputs[0].axes[0].reason
    torch.testing.assert_close(tunable_2d.bind((x,)).compile_config({"block_sizes": [4]})(x), x * 2)


@pallasite.kernel
def split_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m, n = x.size()
    positive = torch.empty_like(x)
    negative = torch.empty_like(x)
    row_max = torch.empty([m, 1], dtype=x.dtype)
    for tile_m in hl.tile(m, block_size=8):
        row = x[tile_m, :]
        positive[tile_m, :] = torch.relu(row)
        negative[tile_m, :] = torch.relu(-row)
        row_max[tile_m, :] = row.amax(1, keepdim=True)
    return positive, negative, row_max


def test_several_outputs_are_pure_outputs():
    x = randn(16, 256, seed=24)
    positive, negative, row_max = split_stats(x)
    torch.testing.assert_close(positive, x.clamp(min=0))
    torch.testing.assert_close(negative, (-x).clamp(min=0))
    torch.testing.assert_close(row_max, x.amax(1, keepdim=True))
    call = only_call(split_stats, (x,))
    assert names(call.inputs) == ["x"]
    assert names(call.outputs) == ["positive", "negative", "row_max"]
    assert call.aliases == {}
    assert [axis.semantics for axis in call.grid] == ["parallel"]


# ------------------------------------------------------- in-place updates --


@pallasite.kernel
def add_into(x: torch.Tensor, y: torch.Tensor) -> None:
    m, n = x.size()
    for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
        x[tile_m, tile_n] += y[tile_m, tile_n]


def test_in_place_update_mutates_the_callers_tensor():
    # 12 x 200 with blocks of 8 x 128: the aliased tensor's last blocks are partial.
    x, y = randn(12, 200, seed=25), randn(12, 200, seed=26)
    original = x.clone()
    assert add_into(x, y) is None
    torch.testing.assert_close(x, original + y)
    torch.testing.assert_close(y, randn(12, 200, seed=26))


def test_in_place_update_is_aliased_and_read_only_inputs_are_not():
    x, y = randn(12, 200), randn(12, 200)
    call = only_call(add_into, (x, y))
    assert names(call.inputs) == ["x", "y"]
    assert names(call.outputs) == ["x"]
    assert call.aliases == {0: 0}
    assert [update.symbol.name for update in call.updates] == ["x"]
    assert [axis.semantics for axis in call.grid] == ["parallel", "parallel"]


def test_in_place_update_lowers_to_mosaic():
    check_tpu_lowering(add_into, (randn(12, 200), randn(12, 200)))


@pallasite.kernel
def scale_tail_in_place(x: torch.Tensor, factor: float) -> torch.Tensor:
    (n,) = x.size()
    for tile in hl.tile(256, n, block_size=128):
        x[tile] = x[tile] * factor
    return x


def test_in_place_update_of_part_of_a_tensor_keeps_the_rest():
    x = randn(500, seed=27)
    original = x.clone()
    result = scale_tail_in_place(x, 3.0)
    expected = original.clone()
    expected[256:] *= 3.0
    torch.testing.assert_close(x, expected)
    torch.testing.assert_close(result, expected)


@pallasite.kernel
def zero_filled_output(x: torch.Tensor) -> torch.Tensor:
    (n,) = x.size()
    out = torch.zeros([n + 100], dtype=x.dtype)
    for tile in hl.tile(n, block_size=128):
        out[tile] = x[tile] - 1
    return out


def test_zero_filled_allocation_keeps_its_unwritten_tail():
    x = randn(300, seed=28)
    expected = torch.zeros(400)
    expected[:300] = x - 1
    torch.testing.assert_close(zero_filled_output(x), expected)
    call = only_call(zero_filled_output, (x,))
    assert names(call.outputs) == ["out"]
    assert call.aliases == {1: 0}  # the zeros are the output's starting contents


def test_empty_allocation_is_a_pure_output_not_an_input():
    x = randn(300)
    call = only_call(shift_1d, (x,))
    assert names(call.inputs) == ["x"]
    assert names(call.outputs) == ["out"]
    assert call.aliases == {} and call.updates == ()


# --------------------------------------------------- host code around loops --


@pallasite.kernel
def prologue_and_epilogue(x: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
    x = x * 2
    y = flat.reshape(16, 256)
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([16, 256], block_size=[8, 128]):
        out[tile_m, tile_n] = x[tile_m, tile_n] + y[tile_m, tile_n]
    return out.reshape(4, 4, 256) + 1


def test_host_torch_ops_before_and_after_the_loop():
    x, flat = randn(16, 256, seed=29), randn(4096, seed=30)
    expected = (x * 2 + flat.reshape(16, 256)).reshape(4, 4, 256) + 1
    torch.testing.assert_close(prologue_and_epilogue(x, flat), expected)
    torch.testing.assert_close(flat, randn(4096, seed=30))  # a reshaped input is only read
    call = only_call(prologue_and_epilogue, (x, flat))
    assert call.aliases == {}


@pallasite.kernel
def write_through_view(x: torch.Tensor) -> torch.Tensor:
    (n,) = x.size()
    out = torch.empty([n], dtype=x.dtype)
    grid_view = out.view(n // 128, 128)
    rows = x.view(n // 128, 128)
    for tile_r in hl.tile(n // 128, block_size=8):
        grid_view[tile_r, :] = rows[tile_r, :] * 3
    return out


def test_store_into_a_host_view_writes_its_base():
    x = randn(2048, seed=31)
    torch.testing.assert_close(write_through_view(x), x * 3)


@pallasite.kernel
def two_passes(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    tripled = torch.empty_like(x)
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
        tripled[tile_m, tile_n] = x[tile_m, tile_n] * 3
    for tile_m in hl.tile(m, block_size=8):
        row = tripled[tile_m, :]
        out[tile_m, :] = row - row.amax(1, keepdim=True)
    return out


def test_second_loop_reads_what_the_first_wrote():
    x = randn(16, 256, seed=32)
    torch.testing.assert_close(two_passes(x), x * 3 - (x * 3).amax(1, keepdim=True))
    first, second = two_passes.bind((x,)).plan().calls
    assert names(first.outputs) == ["tripled"] and names(second.inputs) == ["tripled"]
    assert first.aliases == {} and second.aliases == {}


def test_two_passes_lower_to_mosaic():
    check_tpu_lowering(two_passes, (randn(16, 256),))
