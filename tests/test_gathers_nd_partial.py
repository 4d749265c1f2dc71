"""Gathers through partially filled N-D index tiles (issue #7 §4).

`table[indices[tm, tn], :]` gathers through the tile's flat vector; when a block size does
not divide its dim, the last tiles' padding lanes are no prefix of that vector but lie
outside a rectangle (lane r * bn + c is valid iff r and c lie in their tiles' ranges). The
plan records that region once (a `MergedPadding` of the tiles' ranges) and every consumer
honours it: index checks look only at valid lanes, per-row DMA copies only valid lanes, and
the stores never write the padding's gathered garbage.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.plan.masks import MergedPadding
from pallasite.plan.plans import GatherMethod
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref

from plan_helpers import only_call

DTYPES = (torch.float32, torch.bfloat16, torch.int32)
DMA = {"pallas_indirect_access_mode": "dma"}
# every loop type with f32, and the other dtypes under one loop type each (the full product is slow)
LOOPS_AND_DTYPES = [*((loop, torch.float32) for loop in LOOP_TYPES),
                    ("fori_loop", torch.bfloat16), ("emit_pipeline", torch.int32)]


def _table(*shape, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.int32:
        return torch.randint(-1000, 1000, shape, generator=generator, dtype=torch.int32)
    return torch.randn(shape, generator=generator).to(dtype)


def _indices(*shape, rows, seed=2):
    return torch.randint(0, rows, shape, generator=torch.Generator().manual_seed(seed), dtype=torch.int32)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 4]))
def gather_rows(table, indices):
    m, n = indices.size()
    out = torch.empty([m, n, table.size(1)], dtype=table.dtype, device=table.device)
    for tm, tn in hl.tile([m, n]):
        idx = indices[tm, tn]
        out[tm, tn, :] = table[idx, :]
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 4]))
def gather_rows_inner(table, indices):
    m, n = indices.size()
    out = torch.empty([m, n, table.size(1)], dtype=table.dtype, device=table.device)
    for tm in hl.tile(m):
        for tn in hl.tile(n):
            out[tm, tn, :] = table[indices[tm, tn], :]
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 4]))
def gather_middle_dim(table, indices):
    m, n = indices.size()
    out = torch.empty([table.size(0), m, n, table.size(2)], dtype=table.dtype, device=table.device)
    for tm in hl.tile(m):
        for tn in hl.tile(n):
            out[:, tm, tn, :] = table[:, indices[tm, tn], :]
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 4]))
def gather_sums(table, indices):
    m, n = indices.size()
    out = torch.empty([m, table.size(1)], dtype=torch.float32, device=table.device)
    for tm in hl.tile(m):
        acc = hl.zeros([tm, table.size(1)], dtype=torch.float32)
        for tn in hl.tile(n):
            acc = acc + table[indices[tm, tn], :].to(torch.float32).sum(1)
        out[tm, :] = acc
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 4]))
def gather_first_rows(table, indices, out):
    """Walks only out's [m, n]: the index tensor's rows and columns past them are padding."""
    m, n, _ = out.size()
    for tm in hl.tile(m):
        for tn in hl.tile(n):
            out[tm, tn, :] = table[indices[tm, tn], :]
    return out


def _merged_lanes(call):
    (gather,) = [a.gather for a in call.accesses.values() if a.gather is not None]
    (check,) = [c for c in call.range_checks if c.valid_lanes is not None]
    return gather, check.valid_lanes


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_partial_index_tile_gathers_rows(dtype):
    table = _table(40, 128, dtype=dtype)
    indices = _indices(10, 7, rows=40)
    _, out = code_and_output(gather_rows, (table, indices))
    expected = table[indices.long()]
    assert out.shape == expected.shape and torch.equal(out, expected)
    assert torch.equal(run_ref(gather_rows, (table, indices)), expected)
    gather, lanes = _merged_lanes(only_call(gather_rows, (table, indices)))
    assert gather.method is not GatherMethod.ROW_DMA
    assert isinstance(lanes, MergedPadding) and lanes.sizes == (8, 4)
    assert [rng.dim.name for _, rng in lanes.parts] == ["tm", "tn"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_partial_index_tile_gathers_rows_by_dma(dtype):
    table = _table(40, 128, dtype=dtype)
    indices = _indices(10, 7, rows=40)
    _, out = code_and_output(gather_rows, (table, indices), **DMA)
    assert torch.equal(out, table[indices.long()])
    gather, lanes = _merged_lanes(only_call(gather_rows, (table, indices), **DMA))
    assert gather.method is GatherMethod.ROW_DMA and gather.row_copy.lanes == lanes


@pytest.mark.parametrize("shape", [(10, 8), (8, 7)])
def test_an_index_tile_partial_along_one_dim(shape):
    table = _table(40, 128)
    indices = _indices(*shape, rows=40)
    for config in ({}, DMA):
        _, out = code_and_output(gather_rows, (table, indices), **config)
        assert torch.equal(out, table[indices.long()])


@pytest.mark.parametrize("loop_type, dtype", LOOPS_AND_DTYPES)
def test_a_partial_index_tile_in_an_inner_loop(loop_type, dtype):
    table = _table(40, 128, dtype=dtype)
    indices = _indices(10, 7, rows=40)
    _, out = code_and_output(gather_rows_inner, (table, indices), pallas_loop_type=loop_type)
    expected = table[indices.long()]
    assert torch.equal(out, expected)
    assert torch.equal(run_ref(gather_rows_inner, (table, indices), pallas_loop_type=loop_type), expected)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_a_partial_index_tile_in_an_inner_loop_by_dma(loop_type, dtype):
    table = _table(40, 128, dtype=dtype)
    indices = _indices(10, 7, rows=40)
    config = {**DMA, "pallas_loop_type": loop_type}
    _, out = code_and_output(gather_rows_inner, (table, indices), **config)
    assert torch.equal(out, table[indices.long()])
    gather, _ = _merged_lanes(only_call(gather_rows_inner, (table, indices), **config))
    assert gather.method is GatherMethod.ROW_DMA


@pytest.mark.parametrize("loop_type, dtype", LOOPS_AND_DTYPES)
def test_a_partial_index_tile_gathers_along_a_middle_dim(loop_type, dtype):
    table = _table(3, 40, 128, dtype=dtype)
    indices = _indices(10, 7, rows=40)
    _, out = code_and_output(gather_middle_dim, (table, indices), pallas_loop_type=loop_type)
    expected = table[:, indices.long(), :]
    assert out.shape == expected.shape and torch.equal(out, expected)
    assert torch.equal(run_ref(gather_middle_dim, (table, indices), pallas_loop_type=loop_type), expected)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_partial_index_tile_gather_reduced_in_an_inner_loop(loop_type):
    """The padding lanes' gathered rows are masked before the sum (split back to tm, tn)."""
    table = _table(40, 128)
    indices = _indices(10, 7, rows=40)
    _, out = code_and_output(gather_sums, (table, indices), pallas_loop_type=loop_type)
    expected = table[indices.long()].sum(1)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(run_ref(gather_sums, (table, indices), pallas_loop_type=loop_type),
                               expected, rtol=1e-5, atol=1e-4)


def _out_of_range_padding(rows):
    """Indices [16, 8] whose part past [10, 7] (a tile's padding when the loop walks only
    [10, 7]) is out of the table: negative and past its end."""
    indices = _indices(16, 8, rows=rows)
    indices[10:, :] = -7
    indices[:, 7:] = rows + 100
    return indices


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("mode", [{}, DMA])
def test_out_of_range_indices_in_the_padding_are_no_error(loop_type, mode):
    table = _table(40, 128)
    indices = _out_of_range_padding(40)
    args = (table, indices, torch.zeros(10, 7, 128))
    config = {**mode, "pallas_loop_type": loop_type}
    _, out = code_and_output(gather_first_rows, args, **config)
    expected = table[indices[:10, :7].long()]
    assert torch.equal(out, expected)
    ref_args = (table, indices, torch.zeros(10, 7, 128))
    assert torch.equal(run_ref(gather_first_rows, ref_args, pallas_loop_type=loop_type), expected)


@pytest.mark.parametrize("loop_type, mode, bad", [
    *((loop, mode, 40) for loop in LOOP_TYPES for mode in ({}, DMA)), ("unroll", {}, -1), ("fori_loop", DMA, -1)])
def test_an_out_of_range_index_in_a_valid_lane_is_an_error(loop_type, mode, bad):
    table = _table(40, 128)
    indices = _out_of_range_padding(40)
    indices[9, 6] = bad  # the last valid lane of the last (partial) tile
    config = {**mode, "pallas_loop_type": loop_type}
    with pytest.raises(exc.ShapeMismatch, match=rf"is {bad} but table.size\(0\) is 40") as info:
        code_and_output(gather_first_rows, (table, indices, torch.zeros(10, 7, 128)), **config)
    assert "out[tm, tn, :] = table[indices[tm, tn], :]" in str(info.value)
    assert "test_gathers_nd_partial.py" in str(info.value)
    with pytest.raises(exc.ShapeMismatch, match=rf"index vector is {bad} but axis 0 has size 40"):
        run_ref(gather_first_rows, (table, indices, torch.zeros(10, 7, 128)), pallas_loop_type=loop_type)


@pytest.mark.parametrize("kernel, table_shape, config", [
    (gather_rows, (40, 128), {}),
    (gather_rows, (40, 128), DMA),
    (gather_rows_inner, (40, 128), {"pallas_loop_type": "fori_loop"}),
    (gather_rows_inner, (40, 128), {**DMA, "pallas_loop_type": "emit_pipeline"}),
    (gather_middle_dim, (3, 40, 128), {"pallas_loop_type": "unroll"}),
    (gather_sums, (40, 128), {"pallas_loop_type": "emit_pipeline"}),
])
def test_partial_index_tiles_lower_to_mosaic(kernel, table_shape, config):
    table = _table(*table_shape)
    indices = _indices(10, 7, rows=40)
    check_tpu_lowering(kernel, (table, indices), **config)


def test_partial_index_tile_with_out_of_range_padding_lowers_to_mosaic():
    args = (_table(40, 128, dtype=torch.int32), _out_of_range_padding(40), torch.zeros(10, 7, 128, dtype=torch.int32))
    check_tpu_lowering(gather_first_rows, args, **DMA, pallas_loop_type="fori_loop")


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 4]))
def scatter_through_flat_view(values, indices, out):
    """What the error for a scatter through an index tile advises: scatter its flat vector."""
    m, n = indices.size()
    for tm, tn in hl.tile([m, n]):
        idx = indices[tm, tn].reshape(-1)
        out[idx, :] = values[tm, tn, :].reshape(-1, values.size(2))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_a_scatter_through_a_partial_index_tiles_flat_vector(dtype):
    """The padding lanes of the flat vector write nothing (their rows keep their contents)."""
    indices = torch.randperm(80, generator=torch.Generator().manual_seed(3))[:70].to(torch.int32).reshape(10, 7)
    values = _table(10, 7, 128, dtype=dtype)
    out = _table(80, 128, dtype=dtype, seed=5)
    expected = out.clone()
    expected[indices.reshape(-1).long()] = values.reshape(70, 128)
    _, result = code_and_output(scatter_through_flat_view, (values, indices, out.clone()))
    assert torch.equal(result, expected)
    assert torch.equal(run_ref(scatter_through_flat_view, (values, indices, out.clone())), expected)
    call = only_call(scatter_through_flat_view, (values, indices, out))
    (scatter,) = [a.scatter for a in call.accesses.values() if a.scatter is not None]
    assert isinstance(scatter.valid_lanes, MergedPadding)
    check_tpu_lowering(scatter_through_flat_view, (values, indices, out))


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 4]))
def sum_of_flat_gather(table, indices):
    m, n = indices.size()
    out = torch.empty([m, n, table.size(1)], dtype=torch.float32, device=table.device)
    for tm, tn in hl.tile([m, n]):
        total = table[indices[tm, tn].reshape(-1), :].sum(0)
        out[tm, tn, :] = hl.zeros([tm, tn, table.size(1)], dtype=torch.float32) + total
    return out


def test_a_reduction_along_the_merged_lanes_is_rejected():
    """Masks know one tile range per axis: a sum over the flat lanes must reshape back first."""
    table = _table(40, 128)
    indices = _indices(10, 7, rows=40)
    with pytest.raises(exc.UnsupportedOperation, match="merged from the partially filled tile dims 'tm' x 'tn'"):
        code_and_output(sum_of_flat_gather, (table, indices))


@pallasite.kernel(config=pallasite.Config(block_sizes=[2, 8, 4]))
def gather_through_3d_tile(table, indices):
    b, m, n = indices.size()
    out = torch.empty([b, m, n, table.size(1)], dtype=table.dtype, device=table.device)
    for tb, tm, tn in hl.tile([b, m, n]):
        out[tb, tm, tn, :] = table[indices[tb, tm, tn], :]
    return out


@pytest.mark.parametrize("mode", [{}, DMA])
def test_a_partial_3d_index_tile(mode):
    """Three partial tiles: lane l = (b * 8 + r) * 4 + c is valid iff b, r and c all are."""
    table = _table(40, 128, dtype=torch.int32)
    indices = _indices(3, 10, 7, rows=40)
    _, out = code_and_output(gather_through_3d_tile, (table, indices), **mode)
    assert torch.equal(out, table[indices.long()])
    check_tpu_lowering(gather_through_3d_tile, (table, indices), **mode)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 4]))
def gather_into_larger_out(table, indices, out):
    """out is larger than the index tensor: the padding lanes' rows would land on real data."""
    m, n = indices.size()
    for tm in hl.tile(m):
        for tn in hl.tile(n):
            out[tm, tn, :] = table[indices[tm, tn], :]
    return out


@pytest.mark.parametrize("mode", [{"pallas_loop_type": "fori_loop"}, {**DMA, "pallas_loop_type": "unroll"}])
def test_the_padding_lanes_gathered_rows_are_never_stored(mode):
    table = _table(40, 128)
    indices = _indices(10, 7, rows=40)
    out = torch.full((16, 8, 128), -3.0)
    expected = out.clone()
    expected[:10, :7] = table[indices.long()]
    _, result = code_and_output(gather_into_larger_out, (table, indices, out.clone()), **mode)
    assert torch.equal(result, expected)
    assert torch.equal(run_ref(gather_into_larger_out, (table, indices, out.clone()), **mode), expected)
