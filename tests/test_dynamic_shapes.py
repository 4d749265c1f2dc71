"""`static_shapes=False` (issue #7 §6): one compiled variant serves every size of a bucket
(0, 1, or 2 and more per dimension); sizes are read by the generated code at run time."""
from __future__ import annotations

import warnings

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref



@pallasite.kernel(static_shapes=False)
def add(x, y):
    out = torch.empty_like(x)
    for tm, tn in hl.tile(out.size()):
        out[tm, tn] = x[tm, tn] + y[tm, tn]
    return out


@pallasite.kernel(static_shapes=False)
def row_sums(x):
    m, n = x.size()
    out = torch.empty([m], dtype=x.dtype)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tn in hl.tile(n):
            acc = acc + x[tm, tn].sum(-1)
        out[tm] = acc
    return out


@pallasite.kernel(static_shapes=False)
def row_max(x):
    m, n = x.size()
    out = torch.empty([m], dtype=x.dtype)
    for tm in hl.tile(m):
        best = hl.full([tm], float("-inf"), dtype=torch.float32)
        for tn in hl.tile(n):
            best = torch.maximum(best, x[tm, tn].amax(-1))
        out[tm] = best
    return out


@pallasite.kernel(static_shapes=False)
def matmul(x, y):
    m, k = x.size()
    _, n = y.size()
    out = torch.empty([m, n], dtype=x.dtype)
    for tm, tn in hl.tile([m, n]):
        acc = hl.zeros([tm, tn], dtype=torch.float32)
        for tk in hl.tile(k):
            acc = torch.addmm(acc, x[tm, tk], y[tk, tn])
        out[tm, tn] = acc
    return out


@pallasite.kernel(static_shapes=False)
def softmax_rows(x):
    out = torch.empty_like(x)
    for tm in hl.tile(x.size(0)):
        out[tm, :] = torch.softmax(x[tm, :], dim=-1)
    return out


def test_two_sizes_in_one_bucket_share_one_variant_and_are_both_right():
    add.reset()
    config = {"block_sizes": [8, 128]}
    for shape in [(20, 300), (37, 200), (64, 256)]:  # partial tails and whole blocks alike
        x, y = torch.randn(shape), torch.randn(shape)
        _, out = code_and_output(add, (x, y), **config)
        torch.testing.assert_close(out, x + y)
        assert add.cache_size == 1
    for shape in [(9, 130), (3, 1000)]:  # plain calls too (the resolved config)
        x, y = torch.randn(shape), torch.randn(shape)
        torch.testing.assert_close(add(x, y), x + y)
    assert len(add._bound) == 1  # one binding: both dims in the bucket "2 or more"


def test_sizes_in_other_buckets_compile_separately():
    add.reset()
    config = {"block_sizes": [8, 128]}
    for shape, expected in [((20, 300), 1), ((30, 200), 1), ((1, 300), 2), ((1, 129), 2), ((20, 1), 3),
                            ((0, 300), 4)]:
        x, y = torch.randn(shape), torch.randn(shape)
        _, out = code_and_output(add, (x, y), **config)
        torch.testing.assert_close(out, x + y)
        assert add.cache_size == expected, shape


def test_rank_and_dtype_still_key_the_variant():
    add.reset()
    x = torch.randn(16, 256)
    add(x, x)
    add(x.to(torch.bfloat16), x.to(torch.bfloat16))
    assert add.cache_size == 2


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("kernel, reference", [(row_sums, lambda x: x.sum(-1)), (row_max, lambda x: x.amax(-1))])
def test_a_reduction_loop_serves_every_size(kernel, reference, loop_type):
    kernel.reset()
    config = {"block_sizes": [8, 128], "pallas_loop_type": loop_type}
    for shape in [(20, 300), (9, 1000), (64, 256)]:
        x = torch.randn(shape)
        code, out = code_and_output(kernel, (x,), **config)
        torch.testing.assert_close(out, reference(x), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(run_ref(kernel, (x,), config=config), reference(x), rtol=1e-4, atol=1e-4)
    assert kernel.cache_size == 1
    assert "x_size1 = x.shape[1]" in code and "300" not in code
    check_tpu_lowering(kernel, (torch.randn(40, 200),), chips=("v5e", "v6e", "v7x"), **config)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_matmul_k_loop_serves_every_size(loop_type):
    matmul.reset()
    config = {"block_sizes": [8, 128, 128], "pallas_loop_type": loop_type}
    for m, k, n in [(20, 300, 130), (33, 200, 260), (64, 256, 128)]:
        x, y = torch.randn(m, k), torch.randn(k, n)
        _, out = code_and_output(matmul, (x, y), **config)
        torch.testing.assert_close(out, x @ y, rtol=1e-4, atol=1e-4)
    assert matmul.cache_size == 1
    check_tpu_lowering(matmul, (torch.randn(24, 200), torch.randn(200, 136)), chips=("v5e", "v6e", "v7x"),
                       **config)


def test_pointwise_lowers_at_another_size_of_the_bucket():
    add.reset()
    config = {"block_sizes": [8, 128]}
    add(torch.randn(16, 256), torch.randn(16, 256))
    x = torch.randn(19, 333)
    check_tpu_lowering(add, (x, x), **config)


def test_a_whole_row_block_follows_the_size():
    """`x[tm, :]` makes a block as long as the row; its shape is the row's symbolic size."""
    softmax_rows.reset()
    config = {"block_sizes": [8]}
    for shape in [(16, 128), (24, 256), (20, 384)]:
        x = torch.randn(shape)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no size is pinned
            _, out = code_and_output(softmax_rows, (x,), **config)
        torch.testing.assert_close(out, torch.softmax(x, -1), rtol=1e-5, atol=1e-5)
    assert softmax_rows.cache_size == 1
    check_tpu_lowering(softmax_rows, (torch.randn(24, 256),), chips=("v7x",), **config)


@pallasite.kernel(static_shapes=False)
def doubled_plus_one(x):
    y = x * 2  # a host op: its result keeps x's symbolic sizes
    out = torch.empty_like(y)
    for tm, tn in hl.tile(y.size()):
        out[tm, tn] = y[tm, tn] + 1
    return out


@pallasite.kernel(static_shapes=False)
def times_row_length(x):
    m, n = x.size()
    out = torch.empty_like(x)
    for tm, tn in hl.tile([m, n]):
        out[tm, tn] = x[tm, tn] * n + tm.end  # a size and a tile end as runtime values
    return out


@pallasite.kernel(static_shapes=False)
def flattened_triple(x):
    m, n = x.size()
    flat = x.reshape(m * n)
    out = torch.empty_like(flat)
    for tile in hl.tile(m * n, block_size=1024):
        out[tile] = flat[tile] * 3
    return out.view(m, n)


def test_host_ops_and_sizes_used_as_values_keep_one_variant():
    doubled_plus_one.reset()
    times_row_length.reset()
    for shape in [(20, 300), (30, 200)]:
        x = torch.randn(shape)
        torch.testing.assert_close(code_and_output(doubled_plus_one, (x,), block_sizes=[8, 128])[1], x * 2 + 1)
        m, n = shape
        tile_ends = torch.clamp((torch.arange(m) // 8 + 1) * 8, max=m).to(x.dtype)
        _, out = code_and_output(times_row_length, (x,), block_sizes=[8, 128])
        torch.testing.assert_close(out, x * n + tile_ends[:, None])
    assert doubled_plus_one.cache_size == 1
    assert times_row_length.cache_size == 1


def test_the_default_config_serves_the_bucket():
    matmul.reset()
    for m, k, n in [(64, 256, 128), (40, 300, 200)]:
        x, y = torch.randn(m, k), torch.randn(k, n)
        torch.testing.assert_close(matmul(x, y), x @ y, rtol=1e-4, atol=1e-4)
    assert matmul.cache_size == 1


def test_a_reshape_to_computed_sizes_keeps_one_variant():
    flattened_triple.reset()
    for shape in [(16, 128), (24, 256)]:
        x = torch.randn(shape)
        torch.testing.assert_close(code_and_output(flattened_triple, (x,))[1], x * 3)
    assert flattened_triple.cache_size == 1


@pallasite.kernel(static_shapes=False)
def segment_sums(x, offsets):
    segments = offsets.size(0) - 1
    out = torch.zeros([segments, x.size(1)], dtype=x.dtype)
    for g in hl.grid(segments):
        for tn in hl.tile(x.size(1)):
            acc = hl.zeros([tn], dtype=torch.float32)
            for tr in hl.tile(offsets[g], offsets[g + 1], block_size=8):
                acc = acc + x[tr, tn].sum(0)
            out[g, tn] = acc
    return out


def _segment_reference(x, offsets):
    return torch.stack([x[offsets[i]:offsets[i + 1]].sum(0) for i in range(len(offsets) - 1)])


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_data_dependent_range_is_checked_against_each_calls_size(loop_type):
    """The range check's limit is the size variable (`limit=x_size0` where the loop starts),
    not a number from the first call: one variant serves the bucket, and a range past the
    current x raises even when it lay inside the first call's x."""
    segment_sums.reset()
    config = {"block_sizes": [128], "pallas_loop_type": loop_type}
    cases = [(torch.randn(40, 256), torch.tensor([0, 5, 20, 40], dtype=torch.int32)),
             (torch.randn(50, 384), torch.tensor([0, 13, 50], dtype=torch.int32))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no size is pinned
        for x, offsets in cases:
            code, out = code_and_output(segment_sums, (x, offsets), **config)
            torch.testing.assert_close(out, _segment_reference(x, offsets), rtol=1e-4, atol=1e-4)
    assert segment_sums.cache_size == 1
    assert "limit=x_size0" in code
    with pytest.raises(exc.ShapeMismatch, match=r"covers \[13, 50\) but x.size\(0\) is 40"):
        code_and_output(segment_sums, (torch.randn(40, 256), torch.tensor([0, 13, 50], dtype=torch.int32)),
                        **config)
    assert segment_sums.cache_size == 1


@pallasite.kernel(static_shapes=False)
def times_width_squared(x):
    m, n = x.size()
    out = torch.empty_like(x)
    for tm, tn in hl.tile([m, n]):
        out[tm, tn] = x[tm, tn] * (n ** 2)  # a power has no size formula: the width is pinned
    return out


def test_a_size_the_code_must_know_pins_the_variant_with_a_warning():
    """A value computed from a size without a formula is right for that size only: the
    variant serves that width only (never a wrong result), and the user is told which
    guard ties it."""
    times_width_squared.reset()
    for shape in [(16, 256), (16, 384)]:
        x = torch.randn(shape)
        with pytest.warns(UserWarning, match="static_shapes=False.*x_size1 == "):
            _, out = code_and_output(times_width_squared, (x,), block_sizes=[8, 128])
        torch.testing.assert_close(out, x * shape[1] ** 2)
    assert times_width_squared.cache_size == 2
    x = torch.randn(24, 256)  # the first variant's width again, other rows: reused
    torch.testing.assert_close(code_and_output(times_width_squared, (x,), block_sizes=[8, 128])[1], x * 256 ** 2)
    assert times_width_squared.cache_size == 2


def test_a_compiled_variant_refuses_sizes_it_was_not_built_for():
    times_width_squared.reset()
    x = torch.randn(16, 256)
    with pytest.warns(UserWarning):
        bound = times_width_squared.bind((x,))
        compiled = bound.compile_config({"block_sizes": [8, 128]}, bound.sizes_of((x,)))
    with pytest.raises(pallasite.exc.KernelArgumentError, match="other sizes"):
        compiled(torch.randn(16, 384))


def test_jax_fn_inside_jit_serves_two_sizes_with_one_variant():
    import jax
    import numpy as np
    add.reset()
    double_sum = jax.jit(lambda a, b: add.jax_fn(a, b) * 2)
    for shape in [(20, 300), (37, 200)]:
        a, b = (jax.numpy.asarray(np.random.randn(*shape), jax.numpy.float32) for _ in range(2))
        np.testing.assert_allclose(np.asarray(double_sum(a, b)), np.asarray((a + b) * 2), rtol=1e-5)
    assert add.cache_size == 1


@pallasite.kernel(static_shapes=False)
def scale_by_specialized_width(x):
    m, n = x.size()
    width = hl.specialize(n)  # asked for: a constant of each variant, no warning
    out = torch.empty_like(x)
    for tm, tn in hl.tile([m, n]):
        out[tm, tn] = x[tm, tn] * width
    return out


def test_hl_specialize_of_a_size_compiles_per_value_quietly():
    scale_by_specialized_width.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for shape in [(16, 128), (24, 128), (16, 256)]:
            x = torch.randn(shape)
            _, out = code_and_output(scale_by_specialized_width, (x,), block_sizes=[8, 128])
            torch.testing.assert_close(out, x * shape[1])
    assert scale_by_specialized_width.cache_size == 2  # one per width; rows stay dynamic


def _chunked_row_sum():
    @pallasite.kernel(static_shapes=False, config=pallasite.Config(reduction_loops=[100]))
    def chunked_row_sum(x):
        m, n = x.size()
        out = torch.empty([m], dtype=torch.float32, device=x.device)
        for tm in hl.tile(m):
            out[tm] = x[tm, :].sum(-1)
        return out
    return chunked_row_sum


@pytest.mark.parametrize("order", [(37, 300), (300, 37)])
def test_a_config_is_checked_at_the_sizes_it_runs_at_whatever_came_first(order):
    # A chunk of 100 is one block for 37 columns and no legal chunk for 300. The config was
    # checked at the bucket's first sizes only: 300 then 37 raised, 37 then 300 ran.
    kernel = _chunked_row_sum()
    for n in order:
        x = torch.randn(20, n)
        if n == 300:
            with pytest.raises(exc.InvalidConfig, match="not a legal chunk"):
                kernel(x)
        else:
            torch.testing.assert_close(kernel(x), x.sum(-1))


def test_a_raised_vmem_limit_is_not_baked_from_one_size():
    """Over the chip's scoped default (32 MiB from v6e) the plan raises the limit; with
    dynamic shapes the limit is the chip's VMEM, not this call's estimate (which would
    tie the code to one size)."""
    softmax_rows.reset()
    config = {"block_sizes": [128]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (16384, 20000):  # meta tensors: planned and generated, never run
            x = torch.empty(256, n, device="meta")
            bound = softmax_rows.bind((x,))
            code = bound.compile_config(config, bound.sizes_of((x,))).code
            plan = bound.plan(config, specs=None)
            assert plan.calls[0].vmem_bytes > 32 * 2**20
            assert plan.calls[0].vmem_limit_bytes is not None
            assert f"vmem_limit_bytes={plan.calls[0].vmem_limit_bytes}" in code
    assert softmax_rows.cache_size == 1
    check_tpu_lowering(softmax_rows, (torch.empty(256, 18000, device="meta"),), chips=("v6e",),
                       **config)


def test_jagged_attention_serves_every_row_count_with_one_variant():
    """Row counts vary, D is pinned (`1 / sqrt(head_dim)` computes with it), and k's and v's
    dims are asserted equal to q's: they stay pinned with it, so the variant is checked at
    other row counts (not at a D of its own for k) and serves them all; the one warning is
    about D (another head dim compiles another variant)."""
    import itertools as _itertools
    from examples.jagged_attention import jagged_attention, reference
    kernel = pallasite.kernel(jagged_attention.fn, static_shapes=False,
                              config=pallasite.Config(block_sizes=[8, 8], pallas_loop_type="fori_loop"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for lengths in ([13, 0, 5, 30, 1], [13, 0, 5, 31, 1], [7, 9, 2, 30, 11]):
            offsets = torch.tensor([0, *_itertools.accumulate(lengths)], dtype=torch.int32)
            q, k, v = (torch.randn(sum(lengths), 64) for _ in range(3))
            torch.testing.assert_close(kernel(q, k, v, offsets), reference(q, k, v, offsets), atol=1e-4, rtol=1e-4)
    assert kernel.cache_size == 1
    messages = [str(w.message) for w in caught if "static_shapes=False" in str(w.message)]
    assert len(messages) == 1 and "q_size1 == 64" in messages[0] and "k_size1" not in messages[0], messages


@pallasite.kernel(static_shapes=False, config=pallasite.Config(block_sizes=[8, 8]))
def scaled_scores(q, k):
    m, d = q.size()
    n = k.size(0)
    scale = 1.0 / d ** 0.5  # pins q's d; nothing says k's d equals it
    out = torch.empty([m, n], dtype=torch.float32, device=q.device)
    for tile_m, tile_n in hl.tile([m, n]):
        out[tile_m, tile_n] = hl.dot(q[tile_m, :], k[tile_n, :].T) * scale
    return out


def test_a_variant_that_cannot_be_generated_at_other_sizes_says_so():
    """k's head dim moves while q's stays pinned, so the check at other sizes fails: the
    variant serves only these sizes, and a warning says why and how to tie the sizes."""
    q, k = torch.randn(24, 128), torch.randn(40, 128)
    with pytest.warns(UserWarning, match=r"could not be generated with other sizes \(.*k_size1=1159.*hl.dot.*assert") as caught:
        out = scaled_scores(q, k)
    assert caught[0].filename == __file__  # attributed to the user's call, not pallasite's internals
    torch.testing.assert_close(out, q @ k.T / 128 ** 0.5, atol=1e-4, rtol=1e-4)
