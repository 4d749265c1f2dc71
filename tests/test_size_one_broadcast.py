"""A tile indexing a size-1 tensor axis reads it as torch broadcasts a size-1 dim
(`bias[tile_m, tile_n]` with `bias.size(0) == 1`, as Helion does): index 0 at every
position, the axis kept with size 1."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def add_bias(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in hl.tile([m, n]):
        out[tm, tn] = x[tm, tn] + bias[tm, tn]
    return out


@pytest.mark.parametrize("bias_shape", [(1, 256), (48, 1), (1, 1)])
def test_a_size_one_axis_broadcasts_like_torch(bias_shape):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(48, 256, generator=gen)
    bias = torch.randn(*bias_shape, generator=gen)
    config = dict(block_sizes=[16, 128])
    code, result = code_and_output(add_bias, (x, bias), **config)
    torch.testing.assert_close(result, x + bias)
    torch.testing.assert_close(run_ref(add_bias, (x, bias), **config), x + bias)


def test_a_broadcast_axis_and_a_full_one_are_different_variants():
    x = torch.randn(48, 256)
    add_bias(x, torch.randn(1, 256))
    before = add_bias.cache_size
    full = torch.randn(48, 256)
    torch.testing.assert_close(add_bias(x, full), x + full)
    assert add_bias.cache_size == before + 1


@pallasite.kernel(static_shapes=False)
def add_bias_dynamic(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in hl.tile([m, n]):
        out[tm, tn] = x[tm, tn] + bias[tm, tn]
    return out


def test_dynamic_shapes_keep_a_size_one_axis_apart():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(40, 256, generator=gen)
    for rows in (1, 40, 1):  # size 1 is its own bucket, so a dim of 1 never reads a full-size variant
        bias = torch.randn(rows, 256, generator=gen)
        torch.testing.assert_close(add_bias_dynamic(x, bias), x + bias)
    assert add_bias_dynamic.cache_size == 2


@pallasite.kernel
def row_scaled_sums(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """scale is [1, k]: its row broadcasts over every row tile, inside the inner loop."""
    m, k = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tk in hl.tile(k):
            acc = acc + (x[tm, tk] * scale[tm, tk]).sum(-1)
        out[tm] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("scale_shape", [(1, 384), (32, 1)])  # broadcast along the outer or the inner tile
def test_broadcast_inside_an_inner_loop(loop_type, scale_shape):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(32, 384, generator=gen)
    scale = torch.randn(*scale_shape, generator=gen)
    config = dict(block_sizes=[8, 128], pallas_loop_type=loop_type)
    expected = (x * scale).sum(-1)
    _, result = code_and_output(row_scaled_sums, (x, scale), **config)
    torch.testing.assert_close(result, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(run_ref(row_scaled_sums, (x, scale), **config), expected, atol=1e-4, rtol=1e-4)


@pallasite.kernel
def batch_of_one(x: torch.Tensor) -> torch.Tensor:
    """A loop over the size-1 axis itself tiles it (a store through it is fine)."""
    out = torch.empty_like(x)
    for tb, tn in hl.tile([x.size(0), x.size(1)]):
        out[tb, tn] = x[tb, tn] * 2.0
    return out


def test_a_loop_over_the_size_one_axis_still_tiles_it():
    x = torch.randn(1, 256)
    _, result = code_and_output(batch_of_one, (x,), block_sizes=[1, 128])
    torch.testing.assert_close(result, x * 2.0)


@pallasite.kernel
def store_through_broadcast(x: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    for tm, tn in hl.tile([m, n]):
        row[tm, tn] = x[tm, tn]
    return row


def test_a_store_through_a_broadcast_axis_is_an_error():
    x, row = torch.randn(32, 128), torch.zeros(1, 128)
    for run in (lambda: code_and_output(store_through_broadcast, (x, row), block_sizes=[8, 128]),
                lambda: run_ref(store_through_broadcast, (x, row), block_sizes=[8, 128])):
        with pytest.raises(exc.IndexingError) as info:
            run()
        assert "size 1" in info.value.message and "tm" in info.value.message
        assert "row[tm, tn] = x[tm, tn]" in str(info.value)


@pallasite.kernel
def per_head_limit(x: torch.Tensor, limits: torch.Tensor) -> torch.Tensor:
    """Helion's flex attention reads its block mask so: limits may hold one head for all."""
    b, h, n = x.shape
    out = torch.empty_like(x)
    for tb, th, tn in hl.tile([b, h, n], block_size=[1, 1, 128]):
        limit = limits[tb.begin, th.begin]
        out[tb, th, tn] = torch.where(tn.index[None, None, :] < limit, x[tb, th, tn], 0.0)
    return out


@pytest.mark.parametrize("heads_in_limits", [1, 4])
def test_a_tile_begin_on_a_size_one_axis_reads_index_0(heads_in_limits):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 4, 256, generator=gen)
    limits = torch.randint(0, 256, (2, heads_in_limits), generator=gen, dtype=torch.int32)
    expected = torch.where(torch.arange(256)[None, None, :] < limits.expand(2, 4)[:, :, None], x, 0.0)
    torch.testing.assert_close(per_head_limit(x, limits), expected)
    torch.testing.assert_close(run_ref(per_head_limit, (x, limits)), expected)


@pallasite.kernel
def store_at_tile_begin(x: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
    for tm in hl.tile(x.size(0), block_size=8):
        first[tm.begin] = x[tm.begin]
    return first


def test_a_store_at_a_tile_begin_on_a_size_one_axis_is_an_error():
    x = torch.randn(32)
    with pytest.raises(exc.IndexingError, match="size 1"):
        store_at_tile_begin(x, torch.zeros(1))
    with pytest.raises(exc.IndexingError, match="size 1"):
        run_ref(store_at_tile_begin, (x, torch.zeros(1)))


@pallasite.kernel
def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention whose key loop ends at min(kv, tq.end): with one key row the loop
    provably stays within [0, 1), so k[tk, :] and v[tk, :] tile that row as torch reads it."""
    s, d = q.size()
    kv = k.size(0)
    out = torch.empty_like(q)
    for tq in hl.tile(s):
        qb = q[tq, :]
        m_i = hl.full([tq], float("-inf"), dtype=torch.float32)
        l_i = hl.zeros([tq], dtype=torch.float32)
        acc = hl.zeros([tq, d], dtype=torch.float32)
        for tk in hl.tile(0, min(kv, tq.end)):
            scores = hl.dot(qb, k[tk, :].T)
            scores = torch.where(tq.index[:, None] >= tk.index[None, :], scores, float("-inf"))
            m_new = torch.maximum(m_i, torch.amax(scores, -1))
            p = torch.exp(scores - m_new[:, None])
            alpha = torch.exp(m_i - m_new)
            l_i = l_i * alpha + torch.sum(p, -1)
            acc = acc * alpha[:, None] + hl.dot(p, v[tk, :])
            m_i = m_new
        out[tq, :] = acc / l_i[:, None]
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_loop_bounded_by_one_tiles_a_size_one_axis(loop_type):
    """Fuzz seed 30682 case 60: the size-1 rule read v[tk, :] as a [1, d] broadcast (the
    loop's end is a device scalar) and hl.dot(p, v[tk, :]) was refused; torch reads row 0."""
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(rows, 8, generator=gen) for rows in (24, 1, 1))
    expected = torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=False)[0]
    config = dict(block_sizes=[8, 8], pallas_loop_type=loop_type)
    _, result = code_and_output(causal_attention, (q, k, v), **config)
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(run_ref(causal_attention, (q, k, v), **config), result, atol=1e-6, rtol=1e-6)


@pallasite.kernel
def rows_up_to_count(x: torch.Tensor, bias: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """A loop whose end is read from data may pass 1: a size-1 axis it indexes broadcasts."""
    out = torch.zeros_like(x)
    for _ in hl.grid(1):
        for tr in hl.tile(0, count[0]):
            out[tr, :] = x[tr, :] + bias[tr, :]
    return out


def test_a_loop_read_from_data_still_broadcasts_a_size_one_axis():
    gen = torch.Generator().manual_seed(4)
    x, bias = torch.randn(20, 128, generator=gen), torch.randn(1, 128, generator=gen)
    count = torch.tensor([13], dtype=torch.int32)
    expected = torch.zeros_like(x)
    expected[:13] = x[:13] + bias
    _, result = code_and_output(rows_up_to_count, (x, bias, count), block_sizes=[8])
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(rows_up_to_count, (x, bias, count), block_sizes=[8]), expected)


@pallasite.kernel
def segment_scale(x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for g in hl.grid(offsets.size(0) - 1):
        for t in hl.tile(offsets[g], offsets[g + 1]):
            out[t, :] = x[t, :] * 2
    return out


@pytest.mark.parametrize("rows", [1, 2])
def test_a_store_through_a_loop_read_from_data_tiles_a_size_one_axis(rows):
    """Trial GG: a jagged kernel given one row in all (offsets [0, 1]) refused its store as a
    store through a broadcast axis. A range read from data is checked when it runs: within
    [0, 1) it tiles the one row, as torch writes it; past it, the range check names it."""
    gen = torch.Generator().manual_seed(5)
    x, offsets = torch.randn(rows, 8, generator=gen), torch.tensor([0, rows])
    for run in (lambda: code_and_output(segment_scale, (x, offsets), block_sizes=[8])[1],
                lambda: run_ref(segment_scale, (x, offsets), block_sizes=[8])):
        torch.testing.assert_close(run(), x * 2)
    y = torch.randn(1, 8, generator=gen)
    for run in (lambda: segment_scale(y, torch.tensor([0, 3])), lambda: run_ref(segment_scale, (y, torch.tensor([0, 3])))):
        with pytest.raises(exc.ShapeMismatch, match="past"):
            run()
