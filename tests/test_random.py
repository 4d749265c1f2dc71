"""Random numbers in device code: `hl.rand(shape, seed)` and `torch.rand_like(x)` (issue #7 §5).

Values come from a counter-based hash of (seed, the element's coordinates), so
they are checked statistically and for determinism, not against fixed
numbers: uniform in [0, 1), the same seed reproduces them, another seed or
another tile gives different ones. `hl.rand` over tile-shaped axes does not
depend on block sizes or loop strategy, and reference mode draws the same
numbers.
"""
from __future__ import annotations

import jax
import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES, loop_types
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref



@pallasite.kernel
def uniform(x, seed: int):
    m, n = x.size()
    out = torch.empty([m, n], dtype=torch.float32)
    for tile_m, tile_n in hl.tile([m, n]):
        out[tile_m, tile_n] = hl.rand([tile_m, tile_n], seed=seed)
    return out


@pallasite.kernel
def uniform_inner(x, seed: int):
    m, n = x.size()
    out = torch.empty([m, n], dtype=torch.float32)
    for tile_m in hl.tile(m):
        for tile_n in hl.tile(n):
            out[tile_m, tile_n] = hl.rand([tile_m, tile_n], seed=seed)
    return out


def assert_uniform(values: torch.Tensor) -> None:
    """Mean and variance of U[0, 1) within ~5 sigma, every value in [0, 1), no repeats to speak of."""
    flat = values.flatten().double()
    n = flat.numel()
    assert flat.min() >= 0 and flat.max() < 1
    assert abs(flat.mean().item() - 0.5) < 5 * (1 / 12 / n) ** 0.5
    assert abs(flat.var().item() - 1 / 12) < 5 * (1 / 180 / n) ** 0.5
    histogram = torch.histc(flat.float(), bins=10, min=0, max=1)
    assert (histogram - n / 10).abs().max() < 5 * (n / 10) ** 0.5
    assert flat.unique().numel() > 0.99 * n


def test_hl_rand_is_uniform_deterministic_and_differs_per_seed_and_tile():
    x = torch.empty(200, 300)
    config = dict(block_sizes=[64, 128])
    _, first = code_and_output(uniform, (x, 7), **config)
    assert_uniform(first)
    _, again = code_and_output(uniform, (x, 7), **config)
    assert torch.equal(first, again)
    _, other = code_and_output(uniform, (x, 8), **config)
    assert (first == other).float().mean() < 0.01
    tiles = first[:64, :128], first[64:128, :128], first[:64, 128:256]
    assert not torch.equal(tiles[0], tiles[1]) and not torch.equal(tiles[0], tiles[2])
    assert abs(torch.corrcoef(torch.stack([tiles[0].flatten(), tiles[1].flatten()]))[0, 1]) < 0.05


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_hl_rand_does_not_depend_on_blocks_or_loop_strategy(loop_type):
    """An element's number depends on its coordinates, not on the tile that made it."""
    x = torch.empty(72, 300)
    _, whole = code_and_output(uniform, (x, 3), block_sizes=[72, 384])
    _, inner = code_and_output(uniform_inner, (x, 3), block_sizes=[8, 128], pallas_loop_type=loop_type)
    assert torch.equal(whole, inner)
    check_tpu_lowering(uniform_inner, (x, 3), block_sizes=[8, 128], pallas_loop_type=loop_type, chips=("v6e",))


def test_reference_mode_draws_the_same_numbers():
    x = torch.empty(40, 200)
    _, compiled = code_and_output(uniform_inner, (x, 11), block_sizes=[16, 128])
    assert torch.equal(run_ref(uniform_inner, (x, 11), block_sizes=[16, 128]), compiled)


@pallasite.kernel
def rand_then_index(x, seed: int):
    m, n = x.size()
    out = torch.empty([m], dtype=torch.float32)
    for tile_m in hl.tile(m, block_size=m):
        acc = hl.zeros([tile_m], dtype=torch.float32)
        for tile_n in hl.tile(n, block_size=128):
            acc = acc + hl.rand([tile_m, tile_n], seed).sum(1)
        out[tile_m] = acc + tile_m.index  # tile_m.index was first read in the inner loop
    return out


# a loop whose steps run at run time has a body function, whose values do not outlive it
@pytest.mark.parametrize("loop_type", loop_types(steps_at_run_time=True))
def test_a_tile_index_first_read_in_an_inner_loop_is_read_again_after_it(loop_type):
    x = torch.empty(32, 256)
    _, result = code_and_output(rand_then_index, (x, 1), pallas_loop_type=loop_type)
    expected = torch.arange(32) + code_and_output(uniform, (x, 1), block_sizes=[32, 256])[1].sum(1)
    torch.testing.assert_close(result, expected.float(), atol=1e-4, rtol=1e-5)


@pallasite.kernel
def rand_with_int_axes(x, seed: int):
    b, n = x.size()
    out = torch.empty([b, 2, n], dtype=torch.float32)
    for g in hl.grid(b):
        for tile_n in hl.tile(n, block_size=128):
            out[g, :, tile_n] = hl.rand([2, tile_n], seed)
    return out


def test_int_axes_and_enclosing_loops_fold_into_the_counter():
    """`hl.rand([2, tile_n])` inside `hl.grid(b)`: each program gets its own numbers."""
    x = torch.empty(3, 256)
    _, result = code_and_output(rand_with_int_axes, (x, 5))
    assert_uniform(result)
    assert not torch.equal(result[0], result[1]) and not torch.equal(result[:, 0], result[:, 1])
    assert torch.equal(run_ref(rand_with_int_axes, (x, 5)), result)


@pallasite.kernel
def dropout_like(x):
    m, n = x.size()
    out = torch.empty([2, m, n], dtype=x.dtype)
    for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
        v = x[tile_m, tile_n]
        out[0, tile_m, tile_n] = torch.rand_like(v)
        out[1, tile_m, tile_n] = torch.rand_like(v)
    return out


def test_rand_like_draws_its_seed_from_torch_per_call():
    x = torch.empty(64, 256)
    torch.manual_seed(0)
    _, first = code_and_output(dropout_like, (x,))
    assert_uniform(first)
    assert (first[0] == first[1]).float().mean() < 0.01  # two calls, two streams
    second = dropout_like(x)
    assert (first == second).float().mean() < 0.01  # each call draws a new seed
    torch.manual_seed(0)
    assert torch.equal(dropout_like(x), first)  # torch.manual_seed reproduces it
    torch.manual_seed(0)
    assert torch.equal(run_ref(dropout_like, (x,)), first)


def test_rand_like_low_precision_stays_below_one_and_lowers():
    x = torch.empty(64, 256, dtype=torch.bfloat16)
    _, result = code_and_output(dropout_like, (x,))
    assert result.dtype == torch.bfloat16
    assert result.min() >= 0 and result.max() < 1
    assert abs(result.float().mean().item() - 0.5) < 0.01
    check_tpu_lowering(dropout_like, (x,))


def test_rand_like_inside_a_users_jit_is_rejected():
    x = jax.numpy.zeros((64, 256), jax.numpy.float32)
    with pytest.raises(exc.UnsupportedOperation, match="hl.rand"):
        jax.jit(dropout_like.jax_fn)(x)
    assert dropout_like.jax_fn(x).shape == (2, 64, 256)  # outside a jit each call draws a seed


def _one_statement_kernel(statement):
    @pallasite.kernel
    def kernel(x, seed: int):
        out = torch.empty_like(x)
        for tile_m, tile_n in hl.tile(x.size(), block_size=[8, 128]):
            out[tile_m, tile_n] = statement(x[tile_m, tile_n], tile_m, tile_n, seed)
        return out

    return kernel


@pytest.mark.parametrize("statement, error, message", [
    (lambda v, tm, tn, s: hl.rand([tm, tn], seed=0.5), exc.UnsupportedOperation, "int seed"),
    (lambda v, tm, tn, s: torch.rand([8, 128]), exc.UnsupportedOperation, r"hl\.rand\(\[tile_m, tile_n\], seed"),
    (lambda v, tm, tn, s: torch.randn_like(v), exc.UnsupportedOperation, "rand_like"),
    (lambda v, tm, tn, s: torch.nn.functional.dropout(v, 0.5), exc.UnsupportedOperation, "torch.where"),
    (lambda v, tm, tn, s: torch.rand_like(v.int()), exc.UnsupportedDtype, "float dtype"),
])
def test_unsupported_random_forms_say_what_to_write(statement, error, message):
    with pytest.raises(error, match=rf"(?s){message}.*at .*test_random.py"):
        code_and_output(_one_statement_kernel(statement), (torch.randn(8, 128), 1))


def test_hl_rand_in_host_code_is_rejected():
    @pallasite.kernel
    def host(x):
        noise = hl.rand([8, 128], seed=0)
        return x + noise

    with pytest.raises(exc.UnsupportedSyntax, match="device"):
        host(torch.randn(8, 128))


@pallasite.kernel
def noise_per_group(x, offsets):
    out = torch.zeros_like(x)
    for g in hl.grid(offsets.size(0) - 1):
        start = offsets[g]
        for t, tc in hl.tile([offsets[g + 1] - start, x.size(1)], block_size=[8, 128]):
            out[start + t.index, tc] = x[start + t.index, tc] + hl.rand([t, tc], seed=7)
    return out


@pytest.mark.parametrize("loop_type", ["unroll", "fori_loop"])
def test_a_draw_in_a_range_read_from_int64_offsets_is_the_int32_offsets_draw(loop_type):
    """hl.rand's counter (coordinates in mixed radix, here with a range from offsets) is only
    hashed: with int64 offsets it was refused as int64 data converted. A moved tile's draw uses
    its own coordinates, as reference mode does, and keeps its windows."""
    x = torch.zeros(100, 128)
    wide, narrow = torch.tensor([0, 20, 20, 57, 100]), torch.tensor([0, 20, 20, 57, 100], dtype=torch.int32)
    code, result = code_and_output(noise_per_group, (x, wide), pallas_loop_type=loop_type)
    assert torch.equal(result, code_and_output(noise_per_group, (x, narrow), pallas_loop_type=loop_type)[1])
    assert torch.equal(result, run_ref(noise_per_group, (x, wide), pallas_loop_type=loop_type))
    assert 0.4 < result.mean() < 0.6 and "index_hot" not in code
