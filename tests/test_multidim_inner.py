"""Inner loops over several dims (`hl.tile([m, n])` nested in a device loop) and reshapes
that merge tile dims (issue #7 §5).

Every loop type runs a multi-dim inner loop: `unroll` as one Python `for` per dim (a
`fori_loop` when a bound is data-dependent), `fori_loop` as one `lax.fori_loop` over
every dim's tiles, `emit_pipeline` as one pipeline over a grid of them.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES, loop_types
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref



@pallasite.kernel
def scale_blocks(x):
    out = torch.empty_like(x)
    for tile_b in hl.tile(x.size(0)):
        for tile_m, tile_n in hl.tile([x.size(1), x.size(2)]):
            out[tile_b, tile_m, tile_n] = x[tile_b, tile_m, tile_n] * 2
    return out


@pallasite.kernel
def block_sums(x):
    out = torch.empty([x.size(0)], dtype=torch.float32, device=x.device)
    for tile_b in hl.tile(x.size(0)):
        acc = hl.zeros([tile_b], dtype=torch.float32)
        for tile_m, tile_n in hl.tile([x.size(1), x.size(2)]):
            acc = acc + x[tile_b, tile_m, tile_n].sum(-1).sum(-1)
        out[tile_b] = acc
    return out


@pallasite.kernel
def summed_bmm(x, y):
    """out = sum over b of x[b] @ y[b]: the inner loop tiles the batch and k."""
    nb, m, k = x.size()
    n = y.size(2)
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_b, tile_k in hl.tile([nb, k]):
            acc = acc + torch.bmm(x[tile_b, tile_m, tile_k], y[tile_b, tile_k, tile_n]).sum(0)
        out[tile_m, tile_n] = acc
    return out


@pallasite.kernel
def tile_attributes(x):
    """Every dim's begin, end and index inside a two-dim inner loop."""
    out = torch.empty_like(x)
    for tile_b in hl.tile(x.size(0)):
        for tile_m, tile_n in hl.tile([x.size(1), x.size(2)]):
            rows = tile_m.index.to(torch.float32)[None, :, None] * 1000.0
            cols = tile_n.index.to(torch.float32)[None, None, :]
            extent = (tile_m.end - tile_m.begin) * 10 + (tile_n.end - tile_n.begin)
            out[tile_b, tile_m, tile_n] = x[tile_b, tile_m, tile_n] + rows + cols + extent
    return out


@pallasite.kernel
def three_dim_inner(x):
    out = torch.empty_like(x)
    for g in hl.grid(x.size(0)):
        for tile_a, tile_m, tile_n in hl.tile([x.size(1), x.size(2), x.size(3)]):
            out[g, tile_a, tile_m, tile_n] = torch.sigmoid(x[g, tile_a, tile_m, tile_n])
    return out


@pallasite.kernel
def window_sums(x, offsets):
    """A two-dim inner loop whose first dim's bounds are read from a table: each window's
    total, in every lane of its output row."""
    out = torch.empty([offsets.size(0) - 1, 128], dtype=torch.float32, device=x.device)
    for g in hl.grid(offsets.size(0) - 1):
        start = offsets[g]
        end = offsets[g + 1]
        acc = hl.zeros([128], dtype=torch.float32)
        for tile_r, tile_c in hl.tile([start, 0], [end, x.size(1)]):
            acc = acc + x[tile_r, tile_c].sum(0).sum(0, keepdim=True)
        out[g, :] = acc
    return out


def _expected_attributes(x, blocks):
    _, bm, bn = blocks
    m, n = x.shape[1:]
    rows = torch.arange(m, dtype=torch.float32)[None, :, None] * 1000.0
    cols = torch.arange(n, dtype=torch.float32)[None, None, :]
    m_extent = torch.tensor([min(bm, m - (i // bm) * bm) for i in range(m)], dtype=torch.float32)
    n_extent = torch.tensor([min(bn, n - (j // bn) * bn) for j in range(n)], dtype=torch.float32)
    extent = m_extent[None, :, None] * 10 + n_extent[None, None, :]
    return x + rows + cols + extent


CASES = {
    # name: (kernel, inputs, block sizes, torch reference, tolerance)
    "pointwise": (scale_blocks, lambda: (torch.randn(5, 20, 300),), [2, 8, 128], lambda x: x * 2, 0),
    "carried_sum": (block_sums, lambda: (torch.randn(16, 20, 300),), [8, 8, 128],
                    lambda x: x.sum((1, 2)), 1e-3),
    "summed_bmm": (summed_bmm, lambda: (torch.randn(3, 16, 200) / 8, torch.randn(3, 200, 128) / 8),
                   [8, 128, 2, 128], lambda x, y: torch.bmm(x, y).sum(0), 1e-4),
    "tile_attributes": (tile_attributes, lambda: (torch.randn(4, 20, 300),), [2, 8, 128],
                        lambda x: _expected_attributes(x, [2, 8, 128]), 0),
    "three_dims": (three_dim_inner, lambda: (torch.randn(2, 3, 20, 200),), [2, 8, 128], torch.sigmoid, 1e-6),
}


def _check(name, loop_type, **config):
    kernel, inputs, blocks, reference, tol = CASES[name]
    args = inputs()
    _, out = code_and_output(kernel, args, block_sizes=blocks, pallas_loop_type=loop_type, **config)
    expected = reference(*args)
    torch.testing.assert_close(out, expected, rtol=tol, atol=tol)
    return args, out, expected


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("name", list(CASES))
def test_multi_dim_inner_loop_with_partial_tails(name, loop_type):
    _check(name, loop_type)


@pytest.mark.parametrize("name", list(CASES))
def test_reference_mode_agrees(name):
    kernel, inputs, blocks, reference, tol = CASES[name]
    args = inputs()
    out = run_ref(kernel, args, config={"block_sizes": blocks})
    torch.testing.assert_close(out, reference(*args), rtol=tol, atol=tol)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_data_dependent_bounds_on_a_multi_dim_inner_loop(loop_type):
    x = torch.randn(64, 200)
    offsets = torch.tensor([0, 5, 21, 40], dtype=torch.int32)
    expected = torch.stack([x[a:b].sum().expand(128) for a, b in zip(offsets[:-1], offsets[1:])])
    code, out = code_and_output(window_sums, (x, offsets), block_sizes=[8, 128], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    assert "jnp.maximum(" in code  # a dim that runs no tiles zeroes the product
    torch.testing.assert_close(run_ref(window_sums, (x, offsets), config={"block_sizes": [8, 128]}),
                               expected, rtol=1e-4, atol=1e-4)


def test_an_out_of_range_data_dependent_bound_is_reported():
    x = torch.randn(32, 128)
    offsets = torch.tensor([0, 8, 40], dtype=torch.int32)
    with pytest.raises(exc.ShapeMismatch):
        code_and_output(window_sums, (x, offsets), block_sizes=[8, 128], pallas_loop_type="fori_loop")


def test_fori_loop_walks_both_dims_in_one_loop_and_streams():
    x = torch.randn(16, 20, 300)
    plan = block_sums.bind((x,)).plan({"block_sizes": [8, 8, 128], "pallas_loop_type": "fori_loop"})
    (loop_plan,) = plan.calls[0].inner_loops.values()
    assert loop_plan.static_trips == (3, 3) and loop_plan.total_trips == 9
    assert [s.symbol.name for s in loop_plan.streams] == ["x"]
    code, _ = code_and_output(block_sums, (x,), block_sizes=[8, 8, 128], pallas_loop_type="fori_loop")
    assert "lax.fori_loop(0, tile_m_tile_n_trips" in code


def test_emit_pipeline_gets_a_two_dim_grid():
    x = torch.randn(16, 20, 300)
    code, _ = code_and_output(block_sums, (x,), block_sizes=[8, 8, 128], pallas_loop_type="emit_pipeline")
    assert "lambda j0, j1:" in code


@pytest.mark.parametrize("loop_type", loop_types(streams=True))
@pytest.mark.parametrize("order", [[0, 1], [1, 0]])
def test_whole_tiles_stream_the_input_and_the_output(loop_type, order):
    x = torch.randn(4, 16, 256)
    config = {"block_sizes": [2, 8, 128], "pallas_loop_type": loop_type, "loop_orders": [order]}
    plan = tile_attributes.bind((x,)).plan(config)
    (loop_plan,) = plan.calls[0].inner_loops.values()
    assert sorted(s.symbol.name for s in loop_plan.streams) == ["out", "x"]
    _, out = code_and_output(tile_attributes, (x,), **config)
    torch.testing.assert_close(out, _expected_attributes(x, [2, 8, 128]))
    check_tpu_lowering(tile_attributes, (x,), chips=("v7x",), **config)


def test_an_output_that_does_not_walk_every_dim_stays_resident():
    """Streamed windows are written back each step: one window per step, never shared."""
    @pallasite.kernel
    def row_max(x):
        out = torch.empty([x.size(0), x.size(1)], dtype=torch.float32, device=x.device)
        for tile_b in hl.tile(x.size(0)):
            for tile_m, tile_n in hl.tile([x.size(1), x.size(2)]):
                out[tile_b, tile_m] = x[tile_b, tile_m, tile_n].amax(-1)
        return out

    x = torch.randn(8, 16, 256)
    for loop_type in loop_types(streams=True):
        plan = row_max.bind((x,)).plan({"block_sizes": [8, 8, 128], "pallas_loop_type": loop_type})
        (loop_plan,) = plan.calls[0].inner_loops.values()
        assert [s.symbol.name for s in loop_plan.streams] == ["x"]
        _, out = code_and_output(row_max, (x,), block_sizes=[8, 8, 128], pallas_loop_type=loop_type)
        torch.testing.assert_close(out, x[:, :, 128:].amax(-1))  # the last n tile writes last


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_loop_orders_orders_an_inner_loop(loop_type):
    """`loop_orders` has an entry per multi-dim hl.tile loop, inner ones included, in order
    of appearance (as in Helion); the first dim of a permutation is the outermost."""
    config = {"loop_orders": [[1, 0], [1, 0]]}
    _check("summed_bmm", loop_type, **config)
    x, y = CASES["summed_bmm"][1]()
    plan = summed_bmm.bind((x, y)).plan(
        {"block_sizes": [8, 128, 2, 128], "pallas_loop_type": loop_type, **config})
    assert [axis.dim.name for axis in plan.calls[0].grid] == ["tile_n", "tile_m"]
    (loop_plan,) = plan.calls[0].inner_loops.values()
    assert loop_plan.order == (1, 0)
    _check("pointwise", loop_type, loop_orders=[[1, 0]])
    _check("tile_attributes", loop_type, loop_orders=[[1, 0]])


def test_loop_orders_counts_inner_loops():
    x, y = CASES["summed_bmm"][1]()
    with pytest.raises(exc.InvalidConfig, match="2 multi-dim hl.tile loop"):
        summed_bmm.bind((x, y)).resolve_config({"block_sizes": [8, 128, 2, 128], "loop_orders": [[1, 0]] * 3})
    # reference mode refuses the same configs (a trial saw 'Cannot unpack 1 values into 2 names')
    config = {"block_sizes": [8, 128, 2, 128]}
    with pytest.raises(exc.InvalidConfig, match="reached 2 multi-dim hl.tile loop"):
        run_ref(summed_bmm, (x, y), config={**config, "loop_orders": [[1, 0]] * 3})
    with pytest.raises(exc.InvalidConfig, match=r"\[0\] is not a permutation of this loop's 2 dims"):
        run_ref(summed_bmm, (x, y), config={**config, "loop_orders": [[0], [1, 0]]})


@pytest.mark.parametrize("name", list(CASES))
def test_multi_dim_inner_loops_lower_to_mosaic(name):
    kernel, inputs, blocks, _, _ = CASES[name]
    for loop_type in LOOP_TYPES:
        check_tpu_lowering(kernel, inputs(), block_sizes=blocks, pallas_loop_type=loop_type)


def test_data_dependent_multi_dim_loop_lowers_to_mosaic():
    args = (torch.randn(64, 200), torch.tensor([0, 5, 21, 40], dtype=torch.int32))
    for loop_type in LOOP_TYPES:
        check_tpu_lowering(window_sums, args, block_sizes=[8, 128], pallas_loop_type=loop_type)


# ------------------------------------------------ reshapes that merge tile dims --


@pallasite.kernel
def merged_heads_projection(x, w):
    b, h, d = x.size()
    out = torch.empty([b, h, w.size(1)], dtype=torch.float32, device=x.device)
    for tile_b, tile_h in hl.tile([b, h]):
        acc = x[tile_b, tile_h, :]
        rows = acc.reshape(tile_b.block_size * tile_h.block_size, d)
        y = rows @ w[:, :]
        out[tile_b, tile_h, :] = y.reshape(tile_b.block_size, tile_h.block_size, w.size(1))
    return out


@pallasite.kernel
def merged_heads_flatten(x, w):
    b, h, d = x.size()
    out = torch.empty([b, h, w.size(1)], dtype=torch.float32, device=x.device)
    for tile_b, tile_h in hl.tile([b, h]):
        rows = torch.flatten(x[tile_b, tile_h, :], 0, 1)
        y = torch.relu(rows @ w[:, :])
        out[tile_b, tile_h, :] = y.view(tile_b, tile_h, -1)
    return out


@pallasite.kernel
def merged_heads_list(x, w):
    b, h, d = x.size()
    out = torch.empty([b, h, w.size(1)], dtype=torch.float32, device=x.device)
    for tile_b, tile_h in hl.tile([b, h]):
        rows = x[tile_b, tile_h, :].reshape([tile_b.block_size * tile_h.block_size, d])
        y = (rows @ w[:, :]).reshape([tile_b.block_size, tile_h.block_size, -1])
        out[tile_b, tile_h, :] = y + 1.0
    return out


@pallasite.kernel
def merged_heads_inner(x, w):
    """The merge inside an inner loop over the heads."""
    b, h, d = x.size()
    out = torch.empty([b, h, w.size(1)], dtype=torch.float32, device=x.device)
    for tile_b in hl.tile(b):
        for tile_h in hl.tile(h):
            rows = x[tile_b, tile_h, :].reshape(tile_b.block_size * tile_h.block_size, d)
            y = rows @ w[:, :]
            out[tile_b, tile_h, :] = y.reshape(tile_b.block_size, tile_h.block_size, w.size(1))
    return out


MERGES = {
    "reshape": (merged_heads_projection, lambda x, w: torch.einsum("bhd,de->bhe", x, w)),
    "flatten": (merged_heads_flatten, lambda x, w: torch.relu(torch.einsum("bhd,de->bhe", x, w))),
    "reshape_list": (merged_heads_list, lambda x, w: torch.einsum("bhd,de->bhe", x, w) + 1.0),
}


@pytest.mark.parametrize("shape", [(4, 16), (5, 20), (3, 12)])
@pytest.mark.parametrize("name", list(MERGES))
def test_a_reshape_merging_tile_dims(name, shape):
    kernel, reference = MERGES[name]
    x, w = torch.randn(*shape, 128), torch.randn(128, 128) / 8
    _, out = code_and_output(kernel, (x, w), block_sizes=[2, 8])
    torch.testing.assert_close(out, reference(x, w), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(run_ref(kernel, (x, w), config={"block_sizes": [2, 8]}), reference(x, w),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_reshape_merging_tile_dims_in_an_inner_loop(loop_type):
    x, w = torch.randn(5, 20, 128), torch.randn(128, 128) / 8
    _, out = code_and_output(merged_heads_inner, (x, w), block_sizes=[2, 8], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, torch.einsum("bhd,de->bhe", x, w), rtol=1e-4, atol=1e-4)


def test_reducing_along_a_merged_partial_axis_is_rejected():
    @pallasite.kernel
    def merged_sum(x):
        b, h, d = x.size()
        out = torch.empty([d], dtype=torch.float32, device=x.device)
        for tile_d in hl.tile(d):
            acc = hl.zeros([tile_d], dtype=torch.float32)
            for tile_b, tile_h in hl.tile([b, h]):
                rows = x[tile_b, tile_h, tile_d].reshape(tile_b.block_size * tile_h.block_size, -1)
                acc = acc + rows.sum(0)
            out[tile_d] = acc
        return out

    with pytest.raises(exc.UnsupportedOperation, match="merged from the partially filled tile dims"):
        code_and_output(merged_sum, (torch.randn(5, 20, 128),), block_sizes=[128, 2, 8])
    # whole tiles have no padding to mask: the same kernel runs
    x = torch.randn(4, 16, 128)
    _, out = code_and_output(merged_sum, (x,), block_sizes=[128, 2, 8])
    torch.testing.assert_close(out, x.sum((0, 1)), rtol=1e-4, atol=1e-4)


def test_splitting_a_merged_axis_other_than_into_its_parts_is_rejected():
    @pallasite.kernel
    def regroup(x):
        b, h, d = x.size()
        out = torch.empty([b, h, d], dtype=torch.float32, device=x.device)
        for tile_b, tile_h in hl.tile([b, h]):
            rows = x[tile_b, tile_h, :].reshape(tile_b.block_size * tile_h.block_size, d)
            out[tile_b, tile_h, :] = rows.reshape(tile_h.block_size, tile_b.block_size, d).permute(1, 0, 2)
        return out

    with pytest.raises(exc.UnsupportedOperation, match=r"splits the merged partially filled tile dims "
                                                      r"'tile_b' x 'tile_h'") as info:
        code_and_output(regroup, (torch.randn(5, 20, 128),), block_sizes=[2, 8])
    assert "rows.reshape(tile_h.block_size" in str(info.value)


def test_merged_reshapes_lower_to_mosaic():
    x, w = torch.randn(5, 20, 128), torch.randn(128, 128)
    for kernel, _ in MERGES.values():
        check_tpu_lowering(kernel, (x, w), block_sizes=[2, 8])
    for loop_type in LOOP_TYPES:
        check_tpu_lowering(merged_heads_inner, (x, w), block_sizes=[2, 8], pallas_loop_type=loop_type)
