"""Empty and degenerate inputs give torch's results (issue #11 item 2)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import loop_types
from pallasite.testing import check_tpu_lowering
from plan_helpers import matmul


@pallasite.kernel
def row_sums(x):
    m, n = x.size()
    out = torch.empty([m], dtype=x.dtype)
    for tile_m in hl.tile(m):
        out[tile_m] = x[tile_m, :].sum(-1)
    return out


@pallasite.kernel
def row_sums_by_tiles(x):
    m, n = x.size()
    out = torch.empty([m], dtype=x.dtype)
    for tile_m in hl.tile(m):
        acc = hl.zeros([tile_m], dtype=torch.float32)
        for tile_n in hl.tile(n):
            acc += x[tile_m, tile_n].sum(-1)
        out[tile_m] = acc
    return out


@pytest.mark.parametrize("kernel", [row_sums, row_sums_by_tiles], ids=["whole_row", "inner_loop"])
@pytest.mark.parametrize("shape", [(5, 0), (0, 5), (0, 0), (1, 1), (1, 300), (7, 1)])
def test_reductions_over_empty_and_unit_dims(kernel, shape):
    x = torch.randn(*shape)
    result = kernel(x)
    assert result.shape == (shape[0],)
    torch.testing.assert_close(result, x.sum(-1), atol=1e-5, rtol=1e-5)


@pallasite.kernel
def empty_row_stats(x):
    m, n = x.size()
    out = torch.empty([4, m], dtype=x.dtype)
    for tile_m in hl.tile(m):
        row = x[tile_m, :]
        out[0, tile_m] = row.sum(-1)
        out[1, tile_m] = row.mean(-1)
        out[2, tile_m] = (row * 2).prod(-1)
        out[3, tile_m] = torch.logsumexp(row, -1)
    return out


def test_an_empty_value_is_never_built_in_the_kernel():
    # Mosaic has no zero-sized vectors: a reduction over an empty axis is its identity
    # (0, NaN for a mean, 1, -inf), and the empty block is never loaded or computed.
    x = torch.randn(5, 0)
    expected = torch.stack([x.sum(-1), x.mean(-1), (x * 2).prod(-1), torch.logsumexp(x, -1)])
    torch.testing.assert_close(empty_row_stats(x), expected, equal_nan=True)
    codes = check_tpu_lowering(empty_row_stats, (x,))
    assert "(5, 0)" not in codes["v7x"].split("def empty_row_stats(")[0]


@pytest.mark.parametrize("loop_type", loop_types(streams=True))
@pytest.mark.parametrize("shape", [(5, 0), (0, 5), (0, 0)])
def test_streaming_loop_types_over_empty_dims(loop_type, shape):
    """A tensor with an empty dim is not streamed (no window to copy): it stays resident."""
    x = torch.randn(*shape)
    result = row_sums_by_tiles.bind((x,)).compile_config({"pallas_loop_type": loop_type})(x)
    torch.testing.assert_close(result, x.sum(-1))
    a, b = torch.randn(8, 0), torch.randn(0, 128)
    product = matmul.bind((a, b)).compile_config({"pallas_loop_type": loop_type})(a, b)
    torch.testing.assert_close(product, a @ b)


@pallasite.kernel
def sums_over_rows_and_columns(x):
    """A 2-D inner loop whose first dim's end comes from the outer tile and whose second is
    empty (a trial's crash: emit_pipeline's grid of (a traced count, 0) is not positive)."""
    b, m, n = x.shape
    out = torch.empty([b], dtype=torch.float32)
    for tb in hl.tile(b):
        acc = hl.zeros([tb], dtype=torch.float32)
        for tr, tc in hl.tile([0, 0], [min(m, tb.end), n]):
            acc = acc + x[tb, tr, tc].sum([1, 2])
        out[tb] = acc
    return out


@pytest.mark.parametrize("loop_type", loop_types())
def test_a_two_dim_inner_loop_with_an_empty_dim_runs_no_tile(loop_type):
    x = torch.randn(3, 4, 0)
    result = sums_over_rows_and_columns.bind((x,)).compile_config(
        {"block_sizes": [1, 8, 128], "pallas_loop_type": loop_type})(x)
    torch.testing.assert_close(result, torch.zeros(3))


@pallasite.kernel
def sums_from_column_32(x):
    """A range from a constant begin past the tensor's columns (empty at these sizes): the
    streamed window at that begin crashed fori_loop/emit_pipeline ("Out of bound slice")."""
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.full([tm], 1.0, dtype=torch.float32)
        for tn in hl.tile(32, min(n, tm.end)):
            acc = acc + x[tm, tn].sum(-1)
        out[tm] = acc
    return out


@pytest.mark.parametrize("loop_type", [*loop_types(), "outer_pipeline"])
def test_a_range_starting_past_the_tensor_runs_no_tile(loop_type):
    x = torch.randn(64, 20)
    result = sums_from_column_32.bind((x,)).compile_config({"block_sizes": [16, 32], "pallas_loop_type": loop_type})(x)
    torch.testing.assert_close(result, torch.ones(64))


@pallasite.kernel(config=pallasite.Config(block_sizes=[8]))
def gather_or_zero(table, indices, lengths):
    """Sums of `lengths[i]` rows of `table` from `indices[i]`: with every length 0 the loop
    runs no step and the table may be empty (fuzz finding: the one-hot over an empty
    table's rows did not lower)."""
    n = indices.size(0)
    out = torch.empty([n], dtype=table.dtype, device=table.device)
    for tile in hl.tile(n):
        acc = hl.zeros([tile], dtype=table.dtype)
        for tile_k in hl.tile(0, lengths[tile].amax(), block_size=1):
            acc = acc + table[indices[tile] + tile_k.begin]
        out[tile] = acc
    return out


@pytest.mark.parametrize("mode", ["auto", "resident"])  # dma refuses an empty table by name
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_a_gather_from_an_empty_table_lowers_and_reads_nothing(dtype, mode):
    table = torch.zeros(0, dtype=dtype)
    indices, lengths = torch.zeros(5, dtype=torch.int32), torch.zeros(5, dtype=torch.int32)
    args, config = (table, indices, lengths), {"pallas_indirect_access_mode": mode}
    result = pallasite.testing.code_and_output(gather_or_zero, args, **config)[1]
    assert torch.equal(result, torch.zeros(5, dtype=dtype))
    check_tpu_lowering(gather_or_zero, args, **config)
