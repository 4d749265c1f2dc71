"""Helion language calls its example programs make (issue #22): the creation functions'
`device=` argument, `hl.barrier()` between top-level device loops (their order already),
and the rest of this file's forms."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel
def matmul_plus_row_index(x, y):
    m, k = x.size()
    n = y.size(1)
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32, device=x.device)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        ones = hl.full([tile_m, tile_n], 1.0, dtype=torch.float32, device=x.device)
        rows = hl.arange(tile_m.block_size, dtype=torch.int32, device=x.device) + tile_m.begin
        out[tile_m, tile_n] = acc + ones * rows[:, None].to(torch.float32)
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_creation_functions_take_helions_device_argument(loop_type):
    x, y = torch.randn(16, 256), torch.randn(256, 128)
    config = {"block_sizes": [8, 128, 128], "pallas_loop_type": loop_type}
    expected = x @ y + torch.arange(16, dtype=torch.float32)[:, None]
    _, out = code_and_output(matmul_plus_row_index, (x, y), **config)
    torch.testing.assert_close(out, expected, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(run_ref(matmul_plus_row_index, (x, y), **config), expected, atol=1e-3, rtol=1e-3)
    check_tpu_lowering(matmul_plus_row_index, (x, y), **config)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 8]))
def split_sum_with_barrier(x):
    m, n = x.size()
    parts = torch.empty([m, 2], dtype=torch.float32, device=x.device)
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tile_m, half in hl.tile([m, 2], block_size=[None, 1]):
        parts[tile_m, half] = x[tile_m, half.begin * 128 + hl.arange(128)].sum(-1, keepdim=True)
    hl.barrier()  # every partial is written before the second loop reads it
    for tile_m in hl.tile(m):
        out[tile_m] = parts[tile_m, :].sum(-1)
    return out


def test_a_barrier_between_top_level_loops_is_their_order():
    x = torch.randn(16, 256)
    _, out = code_and_output(split_sum_with_barrier, (x,))
    torch.testing.assert_close(out, x.sum(-1), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(run_ref(split_sum_with_barrier, (x,)), out, atol=1e-4, rtol=1e-4)
    assert len(split_sum_with_barrier.bind((x,)).plan().calls) == 2  # two pallas_calls, in order
    check_tpu_lowering(split_sum_with_barrier, (x,))


# ------------------------------------------------- hl.register_reduction_dim --


@pallasite.kernel
def matmul_layer_norm(x, y, weight):
    m, k = x.size()
    n = hl.register_reduction_dim(y.size(1))  # each program holds whole rows of the product
    assert weight.size(0) == n
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        acc = hl.zeros([tile_m, n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = acc + torch.matmul(x[tile_m, tile_k], y[tile_k, :])
        var, mean = torch.var_mean(acc, dim=-1, keepdim=True, correction=0)
        out[tile_m, :] = (acc - mean) * torch.rsqrt(var + 1e-5) * weight[:]
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_register_reduction_dim_is_the_whole_dimension(loop_type):
    x, y, weight = torch.randn(16, 256), torch.randn(256, 200), torch.randn(200)
    config = {"block_sizes": [8, 128], "pallas_loop_type": loop_type}
    expected = torch.nn.functional.layer_norm(x @ y, (200,), weight, eps=1e-5)
    _, out = code_and_output(matmul_layer_norm, (x, y, weight), **config)
    torch.testing.assert_close(out, expected, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(run_ref(matmul_layer_norm, (x, y, weight), **config), expected, atol=1e-3, rtol=1e-3)
    check_tpu_lowering(matmul_layer_norm, (x, y, weight), **config)


# ------------------------------------ hl.register_block_size(min(c, argument)) --


@pallasite.kernel
def scale_rows(x, block_limit: int):
    m, n = x.size()
    block_m = hl.register_block_size(min(16, block_limit))  # an int argument: a constant of the variant
    out = torch.empty_like(x)
    for tile_m in hl.tile(m, block_size=block_m):
        out[tile_m, :] = x[tile_m, :] * 2.0
    return out


def test_a_block_size_bounded_by_min_of_an_int_argument():
    x = torch.randn(32, 128)
    for limit in (8, 64):
        torch.testing.assert_close(scale_rows(x, limit), x * 2.0)
        torch.testing.assert_close(run_ref(scale_rows, (x, limit)), x * 2.0)
        space = scale_rows.bind((x, limit)).config_spec
        assert max(space.block_sizes[0].candidates()) == min(16, limit)
    assert len(scale_rows._bound) == 2  # one variant per value of the argument


@pallasite.kernel
def runtime_min(x, limit: int):
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0), block_size=hl.register_block_size(min(16, limit * 2))):
        out[tile, :] = x[tile, :]
    return out


def test_min_of_a_value_computed_from_an_argument_still_asks_for_specialize():
    with pytest.raises(exc.UnsupportedSyntax, match="hl.specialize"):
        runtime_min(torch.randn(16, 128), 4)


# ---------------------------------------------------------------- hl.randint --


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def draw_ints(x, seed: int):
    m, n = x.size()
    out = torch.empty([m, n], dtype=torch.int32, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        out[tile_m, tile_n] = hl.randint([tile_m, tile_n], -3, 5, seed)
    return out


def test_randint_draws_every_integer_of_its_range_and_only_those():
    x = torch.empty(16, 256)
    _, first = code_and_output(draw_ints, (x, 7))
    assert first.dtype == torch.int32
    assert set(first.unique().tolist()) == set(range(-3, 5))
    assert torch.equal(draw_ints(x, 7), first)  # the same seed: the same numbers
    assert not torch.equal(draw_ints(x, 8), first)
    assert torch.equal(run_ref(draw_ints, (x, 7)), first)
    counts = torch.bincount((first + 3).flatten().long(), minlength=8).float()
    assert counts.min() > 0.7 * counts.mean()  # roughly uniform over 4096 draws
    check_tpu_lowering(draw_ints, (x, 7))


@pytest.mark.parametrize("low, high", [(5, 5), (0, 2**25), (0.5, 3)])
def test_randint_refuses_an_empty_too_wide_or_float_range(low, high):
    @pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
    def bad_range(x):
        out = torch.empty([16, 128], dtype=torch.int32, device=x.device)
        for tile_m, tile_n in hl.tile([16, 128]):
            out[tile_m, tile_n] = hl.randint([tile_m, tile_n], low, high, 1)
        return out

    with pytest.raises(exc.UnsupportedOperation, match="hl.randint"):
        bad_range(torch.empty(16, 128))


def test_dot_scaled_says_why_a_tpu_has_none_and_what_to_write():
    with pytest.raises(exc.UnsupportedOperation, match="MXU has no block-scaled matmul.*hl.dot"):
        hl.dot_scaled(None, None, "e4m3", None, None, "e4m3")


# ----------------------------------------------------------- hl.device_print --


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def printed_rows(x):
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([m, n]):
        rows = x[tile_m, tile_n]
        hl.device_print("tile", tile_m.begin, tile_n.begin, 7)  # int32 scalars: one line
        hl.device_print("row sums", rows.sum(-1), 0.5)  # a vector, then a float: a line each
        out[tile_m, tile_n] = rows * 2.0
    return out


def test_device_print_prints_each_program_in_interpret_mode(capfd):
    x = torch.ones(16, 128)
    code, out = code_and_output(printed_rows, (x,))
    torch.testing.assert_close(out, x * 2.0)
    assert "pl.debug_print('tile {} {} {}'" in code
    printed = capfd.readouterr().out
    assert "tile 0 0 7" in printed and "tile 8 0 7" in printed
    assert printed.count("row sums") == 4 and "128." in printed and "0.5" in printed
    torch.testing.assert_close(run_ref(printed_rows, (x,)), x * 2.0)
    assert "row sums" in capfd.readouterr().out
    check_tpu_lowering(printed_rows, (x,))


def test_device_print_outside_a_device_loop_says_where_it_belongs():
    @pallasite.kernel
    def host_print(x):
        hl.device_print("x", 1)
        return x

    with pytest.raises(exc.UnsupportedSyntax, match="inside a device loop"):
        host_print(torch.ones(8, 128))
