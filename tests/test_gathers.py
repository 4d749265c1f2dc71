"""Gathers (issue #7 §4): a loaded index vector picks rows (or columns) of a table.

`idx = indices[tile]; table[idx, :]` keeps the gathered axis of the table
whole in VMEM and lowers to what Mosaic runs: a one-hot matmul for float
tables, a select-and-sum for int32 ones. An index outside the table is an
error in interpret mode (only the valid lanes of a partial tile are checked),
never a silent 0.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.plan.plans import BlockKind, GatherMethod
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref

from plan_helpers import only_call



def _table(*shape, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.int32:
        return torch.randint(-1000, 1000, shape, generator=generator, dtype=torch.int32)
    return torch.randn(shape, generator=generator).to(dtype)


def _indices(n, rows, seed=1):
    return torch.randint(0, rows, (n,), generator=torch.Generator().manual_seed(seed), dtype=torch.int32)


@pallasite.kernel(config=pallasite.Config(block_sizes=[128]))
def gather_rows(table, indices):
    n = indices.size(0)
    out = torch.empty([n, *table.shape[1:]], dtype=table.dtype, device=table.device)
    for tile in hl.tile(n):
        idx = indices[tile]
        out[tile] = table[idx]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_rows_of_a_2d_table(dtype):
    table = _table(64, 256, dtype=dtype)
    indices = _indices(200, 64)  # a partial last tile: its padded lanes hold no valid index
    _, out = code_and_output(gather_rows, (table, indices))
    assert torch.equal(out, table[indices.long()])
    call = only_call(gather_rows, (table, indices))
    (table_operand,) = [op for op in call.inputs if op.symbol.name == "table"]
    assert table_operand.axes[0].kind is BlockKind.FULL
    (gather,) = [a.gather for a in call.accesses.values() if a.gather is not None]
    expected = GatherMethod.SELECT_SUM if dtype == torch.int32 else GatherMethod.ONE_HOT_MATMUL
    assert gather.method is expected and gather.rows == 64


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_rows_of_a_3d_table(dtype):
    table = _table(16, 8, 128, dtype=dtype)
    indices = _indices(130, 16)
    _, out = code_and_output(gather_rows, (table, indices))
    assert torch.equal(out, table[indices.long()])


@pallasite.kernel(config=pallasite.Config(block_sizes=[64, 128]))
def gather_on_one_dim_tile_on_another(values, indices):
    m = indices.size(0)
    n = values.size(1)
    out = torch.empty([m, n], dtype=values.dtype, device=values.device)
    for tile_m, tile_n in hl.tile([m, n]):
        out[tile_m, tile_n] = values[indices[tile_m], tile_n] * 2
    return out


def test_gather_on_one_dim_and_tile_on_another():
    values = _table(50, 384)
    indices = _indices(100, 50)
    _, out = code_and_output(gather_on_one_dim_tile_on_another, (values, indices))
    assert torch.equal(out, values[indices.long()] * 2)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def gather_columns(table, columns):
    m = table.size(0)
    k = columns.size(0)
    out = torch.empty([m, k], dtype=table.dtype, device=table.device)
    for tile_m, tile_k in hl.tile([m, k]):
        out[tile_m, tile_k] = table[tile_m, columns[tile_k]]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_gather_along_the_last_dim(dtype):
    table = _table(20, 96, dtype=dtype)
    columns = _indices(150, 96)
    _, out = code_and_output(gather_columns, (table, columns))
    assert torch.equal(out, table[:, columns.long()])


@pallasite.kernel(config=pallasite.Config(block_sizes=[32]))
def bag_sums(table, indices):
    bags, bag_size = indices.size()
    dim = table.size(1)
    out = torch.empty([bags, dim], dtype=torch.float32, device=table.device)
    for g in hl.grid(bags):
        acc = hl.zeros([dim], dtype=torch.float32)
        for tile in hl.tile(bag_size):
            idx = indices[g, tile]
            acc = acc + table[idx, :].to(torch.float32).sum(0)
        out[g, :] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_gather_in_an_inner_loop_sums_only_the_valid_lanes(loop_type):
    table = _table(40, 128, dtype=torch.bfloat16)
    indices = _indices(3 * 70, 40).reshape(3, 70)  # 70 = 2 tiles of 32 + a partial one
    _, out = code_and_output(bag_sums, (table, indices), pallas_loop_type=loop_type)
    expected = table.float()[indices.long()].sum(1)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-4)
    check_tpu_lowering(bag_sums, (table, indices), pallas_loop_type=loop_type)


@pytest.mark.parametrize("kernel, args", [
    (gather_rows, (_table(64, 256, dtype=torch.bfloat16), _indices(200, 64))),
    (gather_rows, (_table(64, 256, dtype=torch.int32), _indices(200, 64))),
    (gather_rows, (_table(16, 8, 128), _indices(130, 16))),
    (gather_on_one_dim_tile_on_another, (_table(50, 384), _indices(100, 50))),
    (gather_columns, (_table(20, 96), _indices(150, 96))),
    (gather_columns, (_table(20, 96, dtype=torch.int32), _indices(150, 96))),
])
def test_every_form_lowers_to_mosaic(kernel, args):
    check_tpu_lowering(kernel, args)


@pytest.mark.parametrize("bad", [64, -1, 1000])
def test_an_index_outside_the_table_is_an_error(bad):
    table = _table(64, 128)
    indices = _indices(200, 64)
    indices[150] = bad
    with pytest.raises(exc.ShapeMismatch) as info:
        code_and_output(gather_rows, (table, indices))
    message = str(info.value)
    assert f"is {bad}" in message and "table.size(0) is 64" in message
    assert "out[tile] = table[idx]" in message and "test_gathers.py" in message
    with pytest.raises(exc.ShapeMismatch, match=f"{bad}"):
        run_ref(gather_rows, (table, indices))


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_an_index_outside_the_table_in_an_inner_loop_is_an_error(loop_type):
    table = _table(40, 128)
    indices = _indices(2 * 70, 40).reshape(2, 70)
    indices[1, 69] = 40
    with pytest.raises(exc.ShapeMismatch, match=r"is 40 but table.size\(0\) is 40"):
        code_and_output(bag_sums, (table, indices), pallas_loop_type=loop_type)


@pallasite.kernel
def two_index_vectors(table, indices):
    out = torch.empty([indices.size(0)], dtype=table.dtype, device=table.device)
    for tile in hl.tile(indices.size(0)):
        idx = indices[tile]
        out[tile] = table[idx, idx]
    return out


def test_two_index_vectors_in_one_subscript_pair_up_as_in_torch():
    # torch's advanced indexing: table[idx[i], idx[i]], not the (8, 8) block
    # (tests/test_paired_indices.py covers the forms)
    table, indices = _table(16, 16), _indices(8, 16)
    _, out = code_and_output(two_index_vectors, (table, indices))
    assert torch.equal(out, table[indices.long(), indices.long()])


def test_a_table_too_large_for_vmem_is_gathered_by_dma_or_rejected_when_forced_resident():
    table = torch.empty(160_000, 128)  # 78 MiB: past a quarter of any chip's VMEM
    bound = gather_rows.bind((table, _indices(128, 10)))
    (gather,) = [a.gather for a in bound.plan().calls[0].accesses.values() if a.gather is not None]
    assert gather.method is GatherMethod.ROW_DMA  # tests/test_gathers_dma.py runs this lowering
    with pytest.raises(exc.VmemOverflow, match="exceeds the .* VMEM threshold") as info:
        bound.to_code({"pallas_indirect_access_mode": "resident"})
    assert "'dma'" in str(info.value)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_the_embedding_bag_example_under_each_loop_type(loop_type):
    from examples import embedding_bag as example

    inputs = example.example_inputs()
    _, out = code_and_output(example.embedding_bag, inputs, block_sizes=[32], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, example.reference(*inputs), rtol=1e-5, atol=1e-4)
    check_tpu_lowering(example.embedding_bag, inputs, block_sizes=[32], pallas_loop_type=loop_type)


@pallasite.kernel(config=pallasite.Config(block_sizes=[128]))
def shift_left(x):
    out = torch.zeros_like(x)
    for tile in hl.tile(x.size(0) - 1):
        out[tile] = x[(tile.index + 1) % x.size(0)]  # computed (tile.index + 1 alone is a shifted tile)
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[128]))
def gather_middle_axis(table, indices):
    a, _, c = table.size()
    n = indices.size(0)
    out = torch.empty([a, n, c], dtype=table.dtype, device=table.device)
    for tile in hl.tile(n):
        out[:, tile, :] = table[:, indices[tile], :]
    return out


def test_a_computed_index_vector_gathers_a_1d_table():
    x = _table(300)
    _, out = code_and_output(shift_left, (x,))
    assert torch.equal(out, torch.cat([x[1:], torch.zeros(1)]))
    check_tpu_lowering(shift_left, (x,))


def test_a_gather_along_a_middle_axis():
    table = _table(8, 24, 128)
    indices = _indices(200, 24)
    _, out = code_and_output(gather_middle_axis, (table, indices))
    assert torch.equal(out, table[:, indices.long(), :])
    check_tpu_lowering(gather_middle_axis, (table, indices))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_non_finite_table_entries_stay_in_their_rows(dtype):
    table = _table(64, 128, dtype=dtype)
    table[3, 5], table[7, 9], table[11, 0] = float("inf"), float("-inf"), float("nan")
    indices = _indices(200, 64)
    indices[:3] = torch.tensor([3, 7, 11], dtype=torch.int32)
    _, out = code_and_output(gather_rows, (table, indices))
    torch.testing.assert_close(out, table[indices.long()], rtol=0, atol=0, equal_nan=True)
    check_tpu_lowering(gather_rows, (table, indices))


# A 2-D index tile (issue #7 §4): `table[idx, :]` with idx of shape [bm, bn] gathers through
# the tile's flat vector and reshapes back, so the index's dims replace the gathered axis.

def _index_tile(*shape, rows, seed=2):
    return torch.randint(0, rows, shape, generator=torch.Generator().manual_seed(seed), dtype=torch.int32)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def gather_through_index_tile(table, indices):
    m, n = indices.size()
    out = torch.empty([m, n, *table.shape[1:]], dtype=table.dtype, device=table.device)
    for tm, tn in hl.tile([m, n]):
        idx = indices[tm, tn]
        out[tm, tn, :] = table[idx, :]
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def index_tiles_in_an_inner_loop(table, indices):
    b, m, n = indices.size()
    out = torch.empty([b, m, n, table.size(1)], dtype=table.dtype, device=table.device)
    for g in hl.grid(b):
        for tm, tn in hl.tile([m, n]):
            out[g, tm, tn, :] = table[indices[g, tm, tn], :]
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def index_tile_sums(table, indices):
    b, m, n = indices.size()
    d = table.size(1)
    out = torch.empty([b, d], dtype=torch.float32, device=table.device)
    for g in hl.grid(b):
        acc = hl.zeros([d], dtype=torch.float32)
        for tm, tn in hl.tile([m, n]):
            idx = indices[g, tm, tn]
            acc = acc + table[idx, :].to(torch.float32).sum(0).sum(0)
        out[g, :] = acc
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
# Tables small enough that an int32 select-and-sum over 1024 lanes (lanes x rows x 128
# int32, sublanes padded to 8: 12 MiB at 24 rows) stays under the resident threshold of v7x; larger ones are
# gathered by DMA (test_a_2d_index_tile_gathers_by_dma), a thousand interpret-mode copies a step.
@pytest.mark.parametrize("table_shape", [(24, 128), (3, 8, 128)])
def test_a_2d_index_tile_gathers_rows(dtype, table_shape):
    table = _table(*table_shape, dtype=dtype)
    indices = _index_tile(16, 256, rows=table_shape[0])  # the block sizes divide the dims
    _, out = code_and_output(gather_through_index_tile, (table, indices))
    expected = table[indices.long()]
    assert out.shape == expected.shape and torch.equal(out, expected)
    assert torch.equal(run_ref(gather_through_index_tile, (table, indices)), expected)
    check_tpu_lowering(gather_through_index_tile, (table, indices))


def test_a_2d_index_tile_gathers_by_dma():
    """Per-row DMA reads lane i of the flat index vector at [tm.begin + i // bn, tn.begin + i % bn]."""
    table = _table(40, 128)
    indices = _index_tile(16, 16, rows=40)  # small: interpret mode runs each row's DMA
    config = {"pallas_indirect_access_mode": "dma", "block_sizes": [8, 16]}
    _, out = code_and_output(gather_through_index_tile, (table, indices), **config)
    assert torch.equal(out, table[indices.long()])
    call = only_call(gather_through_index_tile, (table, indices), **config)
    (gather,) = [a.gather for a in call.accesses.values() if a.gather is not None]
    assert gather.method is GatherMethod.ROW_DMA
    check_tpu_lowering(gather_through_index_tile, (table, indices), **config)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_2d_index_tile_in_an_inner_loop_gathers_by_dma(loop_type):
    table = _table(40, 128, dtype=torch.int32)
    indices = _index_tile(2, 4, 8, rows=40)  # small: interpret mode runs each row's DMA
    config = {"pallas_indirect_access_mode": "dma", "pallas_loop_type": loop_type, "block_sizes": [2, 8]}
    _, out = code_and_output(index_tiles_in_an_inner_loop, (table, indices), **config)
    assert torch.equal(out, table[indices.long()])
    check_tpu_lowering(index_tiles_in_an_inner_loop, (table, indices), **config)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_a_2d_index_tile_in_an_inner_loop(loop_type, dtype):
    table = _table(24, 128, dtype=dtype)  # resident: see test_a_2d_index_tile_gathers_rows
    indices = _index_tile(2, 16, 256, rows=24)
    _, out = code_and_output(index_tiles_in_an_inner_loop, (table, indices), pallas_loop_type=loop_type)
    expected = table[indices.long()]
    assert torch.equal(out, expected)
    assert torch.equal(run_ref(index_tiles_in_an_inner_loop, (table, indices), pallas_loop_type=loop_type),
                       expected)
    check_tpu_lowering(index_tiles_in_an_inner_loop, (table, indices), pallas_loop_type=loop_type)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_2d_index_tile_gather_reduced_in_an_inner_loop(loop_type):
    table = _table(40, 128)
    indices = _index_tile(2, 16, 256, rows=40)
    _, out = code_and_output(index_tile_sums, (table, indices), pallas_loop_type=loop_type)
    expected = table[indices.long()].sum((1, 2))
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(run_ref(index_tile_sums, (table, indices), pallas_loop_type=loop_type),
                               expected, rtol=1e-5, atol=1e-3)
    check_tpu_lowering(index_tile_sums, (table, indices), pallas_loop_type=loop_type)


@pytest.mark.parametrize("shape", [(20, 200), (20, 256), (16, 200)])
def test_a_2d_index_tile_with_partial_tiles_gathers_rows(shape):
    """Flattened, the valid lanes of a partial index tile are a rectangle (not a prefix); the
    index checks skip the padding lanes' garbage indices (more in test_gathers_nd_partial.py)."""
    table = _table(40, 128)
    indices = _index_tile(*shape, rows=40)
    _, out = code_and_output(gather_through_index_tile, (table, indices))
    assert torch.equal(out, table[indices.long()])
    assert torch.equal(run_ref(gather_through_index_tile, (table, indices)), table[indices.long()])


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_an_index_outside_the_table_in_an_index_tile_is_an_error(loop_type):
    table = _table(40, 128)
    indices = _index_tile(2, 16, 256, rows=40)
    indices[1, 9, 200] = 40
    with pytest.raises(exc.ShapeMismatch, match=r"is 40 but table.size\(0\) is 40") as info:
        code_and_output(index_tiles_in_an_inner_loop, (table, indices), pallas_loop_type=loop_type)
    assert "out[g, tm, tn, :] = table[indices[g, tm, tn], :]" in str(info.value)
    with pytest.raises(exc.ShapeMismatch, match="40"):
        run_ref(index_tiles_in_an_inner_loop, (table, indices), pallas_loop_type=loop_type)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def scatter_through_index_tile(values, indices, out):
    m, n = indices.size()
    for tm, tn in hl.tile([m, n]):
        idx = indices[tm, tn]
        out[idx, :] = values[tm, tn, :]
    return out


def test_a_scatter_through_a_2d_index_tile_is_rejected_quoting_its_shape():
    indices = _index_tile(16, 256, rows=40)
    args = (_table(16, 256, 128), indices, torch.zeros(40, 128))
    with pytest.raises(exc.IndexingError, match=r"2-D tile of shape \[8, 128\]") as info:
        code_and_output(scatter_through_index_tile, args)
    assert "out[idx, :] = values[tm, tn, :]" in str(info.value)
    with pytest.raises(exc.IndexingError, match=r"2-D tile of shape \[8, 128\]"):
        run_ref(scatter_through_index_tile, args)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def gather_columns_through_index_tile(table, indices):
    m, n = indices.size()
    out = torch.empty([table.size(0), m, n], dtype=table.dtype, device=table.device)
    for tm, tn in hl.tile([m, n]):
        out[:, tm, tn] = table[:, indices[tm, tn]] + 1
    return out


def test_a_2d_index_tile_gathers_along_the_last_dim():
    table = _table(4, 40)
    indices = _index_tile(16, 128, rows=40)
    _, out = code_and_output(gather_columns_through_index_tile, (table, indices))
    expected = table[:, indices.long()] + 1
    assert out.shape == expected.shape and torch.equal(out, expected)
    assert torch.equal(run_ref(gather_columns_through_index_tile, (table, indices)), expected)
    check_tpu_lowering(gather_columns_through_index_tile, (table, indices))
