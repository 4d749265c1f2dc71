"""torch.sort / argsort / msort / topk and torch.cummax / cummin on tiles (Helion's Pallas backend
runs sort and an approximate top-k; here both are exact and lower for TPU): every dtype, ties in
position order (torch's stable=True), NaN above every number, -0.0 kept, a partial tile's padding
never ranked, along the last dim and along the tile's own axis, in both modes."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def orderings_of_rows(x):
    m, n = x.shape
    ints = torch.int32
    up, up_i = torch.empty_like(x), torch.empty([m, n], dtype=ints)
    down, down_i = torch.empty_like(x), torch.empty([m, n], dtype=ints)
    top, top_i = torch.empty([m, 3], dtype=x.dtype), torch.empty([m, 3], dtype=ints)
    low, low_i = torch.empty([m, 2], dtype=x.dtype), torch.empty([m, 2], dtype=ints)
    for t in hl.tile(m):
        v = x[t, :]
        s = torch.sort(v)
        up[t, :], up_i[t, :] = s.values, s.indices.to(ints)
        down[t, :] = v.sort(dim=1, descending=True)[0]
        down_i[t, :] = torch.argsort(v, dim=-1, descending=True).to(ints)
        top[t, :], top_i[t, :] = (r.to(ints) if r.dtype == torch.int64 else r for r in torch.topk(v, 3))
        values, indices = v.topk(2, largest=False)
        low[t, :], low_i[t, :] = values, indices.to(ints)
    return up, up_i, down, down_i, top, top_i, low, low_i


def _stable(x, dim=-1, descending=False):
    return torch.sort(x, dim=dim, descending=descending, stable=True)


def _expected_rows(x):
    up, down, low = _stable(x), _stable(x, descending=True), _stable(x)
    ints = torch.int32
    return (up.values, up.indices.to(ints), down.values, down.indices.to(ints), down.values[:, :3],
            down.indices[:, :3].to(ints), low.values[:, :2], low.indices[:, :2].to(ints))


def _rows(dtype, m=13, n=20):
    generator = torch.Generator().manual_seed(7)
    if dtype == torch.bool:
        return torch.randint(0, 2, (m, n), generator=generator).bool()
    x = torch.randint(-4, 5, (m, n), generator=generator).to(dtype)  # many ties
    if dtype.is_floating_point:
        x[3, 4], x[3, 9], x[5, 0], x[6, 2] = float("nan"), float("nan"), -0.0, float("-inf")
        x[7, :] = torch.randn(n, generator=generator).to(dtype)
    return x


_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def _assert_same(results, expected):
    """Bit for bit (the selected elements are copies: -0.0 stays), NaN where torch's is NaN
    (its payload may be made canonical)."""
    assert len(results) == len(expected)
    for got, want in zip(results, expected):
        assert got.dtype == want.dtype
        bits = _BITS.get(got.dtype)
        if bits is None:
            assert torch.equal(got, want)
            continue
        nan = torch.isnan(want)
        assert torch.equal(torch.isnan(got), nan)
        assert torch.equal(got.view(bits)[~nan], want.view(bits)[~nan])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int8])
def test_sort_argsort_and_topk_of_rows_are_torchs_stable_order(dtype):
    """13 rows in tiles of 8: a partial tile, whose padding rows never reach a valid row."""
    x = _rows(dtype)
    expected = _expected_rows(x)
    _, compiled = code_and_output(orderings_of_rows, (x,), block_sizes=[8])
    _assert_same(compiled, expected)
    _assert_same(run_ref(orderings_of_rows, (x,), block_sizes=[8]), expected)


@pallasite.kernel
def sorted_bools(x):
    out, order = torch.empty_like(x), torch.empty(x.shape, dtype=torch.int32)
    for t in hl.tile(x.size(0)):
        s = x[t, :].sort(descending=True)
        out[t, :], order[t, :] = s.values, s.indices.to(torch.int32)
    return out, order


def test_sorting_bools_keeps_their_dtype():
    x = _rows(torch.bool)
    want = _stable(x, descending=True)
    for result in (code_and_output(sorted_bools, (x,))[1], run_ref(sorted_bools, (x,))):
        assert torch.equal(result[0], want.values) and torch.equal(result[1], want.indices.int())


@pallasite.kernel(config=pallasite.Config(block_sizes=[16, 8]))
def sorted_along_the_tile(x):
    out, order = torch.empty_like(x), torch.empty(x.shape, dtype=torch.int32)
    for tile_n in hl.tile(x.size(1)):
        for tile_m in hl.tile(x.size(0)):
            s = torch.sort(x[tile_m, tile_n], dim=0)
            out[tile_m, tile_n], order[tile_m, tile_n] = s.values, s.indices.to(torch.int32) + tile_m.begin
            first = torch.msort(x[tile_m, tile_n])
            out[tile_m, tile_n] = torch.where(first == s.values, out[tile_m, tile_n], float("nan"))
    return out, order


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_sorting_along_a_padded_tile_axis_ranks_only_its_valid_rows(loop_type):
    """dim 0 is the inner tile's axis: 21 rows in tiles of 8 leave 5 valid rows in the last
    one; its 3 padding rows must neither take a rank nor be selected."""
    x = torch.randn(21, 20, generator=torch.Generator().manual_seed(3))
    x[2, 3] = x[5, 3]  # a tie inside the first tile
    chunks = [_stable(x[i:i + 8], dim=0) for i in range(0, 21, 8)]
    want = (torch.cat([c.values for c in chunks]),
            torch.cat([c.indices.int() + i for c, i in zip(chunks, range(0, 21, 8))]))
    for result in (code_and_output(sorted_along_the_tile, (x,), pallas_loop_type=loop_type)[1],
                   run_ref(sorted_along_the_tile, (x,), pallas_loop_type=loop_type)):
        assert torch.equal(result[0], want[0]) and torch.equal(result[1], want[1])


@pallasite.kernel
def running_extremes(x):
    m, n = x.shape
    hi, hi_i = torch.empty_like(x), torch.empty([m, n], dtype=torch.int32)
    lo, lo_i = torch.empty_like(x), torch.empty([m, n], dtype=torch.int32)
    for t in hl.tile(m):
        c = torch.cummax(x[t, :], dim=1)
        hi[t, :], hi_i[t, :] = c.values, c.indices.to(torch.int32)
        values, indices = x[t, :].cummin(1)
        lo[t, :], lo_i[t, :] = values, indices.to(torch.int32)
    return hi, hi_i, lo, lo_i


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
def test_cummax_and_cummin_take_the_latest_equal_and_keep_a_nan(dtype):
    x = _rows(dtype)
    if dtype.is_floating_point:
        x[8, :6] = torch.tensor([float("nan"), 1.0, float("nan"), 2.0, -0.0, 0.0])
    hi, lo = torch.cummax(x, 1), torch.cummin(x, 1)
    expected = (hi.values, hi.indices.int(), lo.values, lo.indices.int())
    _, compiled = code_and_output(running_extremes, (x,), block_sizes=[8])
    _assert_same(compiled, expected)
    _assert_same(run_ref(running_extremes, (x,), block_sizes=[8]), expected)


@pallasite.kernel
def top_experts(logits, k: int):
    m, e = logits.shape
    weights = torch.empty([m, k], dtype=torch.float32)
    experts = torch.empty([m, k], dtype=torch.int32)
    for t in hl.tile(m):
        probs = torch.softmax(logits[t, :].float(), dim=-1)
        top = torch.topk(probs, k, dim=-1)
        weights[t, :] = top.values / top.values.sum(-1, keepdim=True)
        experts[t, :] = top.indices.to(torch.int32)
    return weights, experts


def test_moe_routing_top_k_with_k_from_an_argument():
    """The routing step of a mixture of experts: softmax, top-k, renormalize (k an int argument)."""
    logits = torch.randn(50, 64, generator=torch.Generator().manual_seed(11))
    probs = torch.softmax(logits, -1)
    top = torch.topk(probs, 4)
    for weights, experts in (code_and_output(top_experts, (logits, 4))[1], run_ref(top_experts, (logits, 4))):
        assert torch.equal(experts, top.indices.int())
        torch.testing.assert_close(weights, top.values / top.values.sum(-1, keepdim=True))


@pallasite.kernel
def wide_positions(x):
    out = torch.empty([x.size(0), 2], dtype=torch.int32)
    for t in hl.tile(x.size(0)):
        out[t, :] = (torch.topk(x[t, :], 2).indices * 2**30).to(torch.int32)
    return out


def test_topk_positions_are_torchs_int64_numbers():
    """torch's indices are int64: `indices * 2**30` past int32 is torch's number wrapped by the
    int32 cast, in both modes (the positions are marked as torch's int64 values)."""
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    want = (torch.topk(x, 2).indices * 2**30).to(torch.int32)
    for result in (code_and_output(wide_positions, (x,))[1], run_ref(wide_positions, (x,))):
        assert torch.equal(result, want)


@pallasite.kernel
def top_twenty_one(x):
    out = torch.empty([x.size(0), 21], dtype=x.dtype)
    for t in hl.tile(x.size(0)):
        out[t, :] = torch.topk(x[t, :], 21).values
    return out


@pytest.mark.parametrize("dtype, error", [(torch.float32, exc.ShapeMismatch), (torch.bool, exc.UnsupportedDtype)])
def test_what_torchs_topk_refuses_is_refused_at_the_line(dtype, error):
    """k past the dim's 20 elements, and bools (torch's CPU topk refuses them)."""
    for run in (code_and_output, run_ref):
        with pytest.raises(error) as info:
            run(top_twenty_one, (torch.ones(8, 20, dtype=dtype),))
        assert "torch.topk(x[t, :], 21)" in str(info.value)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def top_of_each_chunk(x, k: int):
    m, n = x.shape
    values = torch.zeros([m, k], dtype=x.dtype)
    for tm in hl.tile(m):
        for tn in hl.tile(n):
            values[tm, :] = torch.topk(x[tm, tn], k, dim=1).values
    return values


def test_topk_of_more_than_a_partial_tile_holds_is_refused_as_torch_refuses_it():
    """A trial's finding: 300 columns in chunks of 128 leave 44 in the last; topk(50) of it
    returned -inf and index -1 past them compiled, where torch (reference mode) refuses."""
    x = torch.randn(8, 300)
    for run in (code_and_output, run_ref):
        with pytest.raises(exc.ShapeMismatch) as info:
            run(top_of_each_chunk, (x, 50))
        assert "torch.topk(x[tm, tn], k, dim=1)" in str(info.value)
    expected = torch.topk(x[:, 256:], 40, dim=1).values  # the last chunk's: within its 44
    for result in (code_and_output(top_of_each_chunk, (x, 40))[1], run_ref(top_of_each_chunk, (x, 40))):
        assert torch.equal(result, expected)


@pallasite.kernel
def routing_weights(logits):
    m, e = logits.shape
    out = torch.empty([m, 8], dtype=torch.float32)
    for tm in hl.tile(m):
        out[tm, :] = torch.topk(torch.softmax(logits[tm, :], -1), 8, dim=-1).values
    return out


def test_the_default_config_of_a_wide_topk_fits_vmem():
    """A trial's finding: topk over 2048 columns compares 2048 x 2048 per row; the default config
    stopped at 8 rows (161 MiB) though 2 rows fit."""
    logits = torch.empty(64, 2048, device="meta")
    bound = routing_weights.bind((logits,))
    bound.plan(bound.config_spec.default_config())  # it fits
