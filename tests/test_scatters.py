"""Scatters (issue #7 §4): a store through an index vector, `out[idx, ...] = v`.

The scattered axis of the output stays whole in VMEM; each scatter rewrites
that window, every row taking the value of the last lane that names it (lanes
in increasing order, programs in grid order), other rows keeping their
contents. `hl.atomic_add` with tile indices is a read-modify-write in the
owning program; through an index tensor, lanes naming one row all add up
(tests/test_atomic_scatter.py).
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.plan.plans import BlockKind, GatherMethod, Semantics
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref

from plan_helpers import only_call



def _values(*shape, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.int32:
        return torch.randint(-1000, 1000, shape, generator=generator, dtype=torch.int32)
    return torch.randn(shape, generator=generator).to(dtype)


def _indices(n, rows, seed=1):
    return torch.randint(0, rows, (n,), generator=torch.Generator().manual_seed(seed), dtype=torch.int32)


def _scattered(out, dest, values, axis=0):
    """`out` with `values` written at `dest` along `axis`, one lane after another: the
    last lane naming a row wins."""
    expected = out.clone()
    for lane, row in enumerate(dest.tolist()):
        expected.select(axis, row).copy_(values.select(axis, lane))
    return expected


@pallasite.kernel(config=pallasite.Config(block_sizes=[32]))
def scatter_rows(out, x, dest):
    n = x.size(0)
    for tile in hl.tile(n):
        out[dest[tile], :] = x[tile, :] * 2
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int32])
def test_rows_of_a_2d_destination_with_duplicates(dtype):
    out = _values(64, 128, dtype=dtype, seed=3)
    x = _values(70, 128, dtype=dtype)  # two whole tiles of 32 and a partial one
    dest = _indices(70, 64)  # many duplicates, within a tile and across programs
    assert len(set(dest.tolist())) < 70
    expected = _scattered(out, dest, x * 2)
    _, result = code_and_output(scatter_rows, (out.clone(), x, dest))
    assert torch.equal(result, expected)
    assert torch.equal(run_ref(scatter_rows, (out.clone(), x, dest)), expected)
    call = only_call(scatter_rows, (out, x, dest))
    (out_operand,) = call.outputs
    assert out_operand.axes[0].kind is BlockKind.FULL
    (scatter,) = [a.scatter for a in call.accesses.values() if a.scatter is not None]
    assert scatter.method is (GatherMethod.SELECT_SUM if dtype == torch.int32 else GatherMethod.ONE_HOT_MATMUL)
    assert scatter.rows == 64 and scatter.valid_lanes is not None
    (axis,) = call.grid
    assert axis.semantics is Semantics.ARBITRARY and "scatter" in axis.reason


def test_the_caller_sees_the_rows_written_in_place_and_keeps_the_others():
    out = _values(64, 128, seed=3)
    x = _values(40, 128)
    dest = torch.randperm(64, generator=torch.Generator().manual_seed(2))[:40].to(torch.int32)
    expected = _scattered(out, dest, x * 2)
    target = out.clone()
    scatter_rows(target, x, dest)
    assert torch.equal(target, expected)
    untouched = sorted(set(range(64)) - set(dest.tolist()))
    assert torch.equal(target[untouched], out[untouched])


def test_non_finite_values_and_negative_zero_arrive_bit_for_bit():
    out = torch.zeros(16, 128)
    x = _values(8, 128)
    x[0, :4] = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0])
    dest = torch.tensor([3, 5, 3, 7, 9, 11, 13, 15], dtype=torch.int32)
    _, result = code_and_output(scatter_rows, (out, x, dest), block_sizes=[8])
    expected = _scattered(out, dest, x * 2)
    assert torch.equal(result.view(torch.int32), expected.view(torch.int32))


@pallasite.kernel(config=pallasite.Config(block_sizes=[128]))
def scatter_1d(out, x, dest):
    n = x.size(0)
    for tile in hl.tile(n):
        out[dest[tile]] = x[tile] + 1
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_a_1d_destination(dtype):
    out = _values(200, dtype=dtype, seed=4)
    x = _values(300, dtype=dtype)
    dest = _indices(300, 200)
    _, result = code_and_output(scatter_1d, (out.clone(), x, dest))
    assert torch.equal(result, _scattered(out, dest, x + 1))


@pallasite.kernel(config=pallasite.Config(block_sizes=[64]))
def scatter_constant(out, dest):
    for tile in hl.tile(dest.size(0)):
        out[dest[tile], :] = 7
    return out


def test_a_constant_is_broadcast_over_the_lanes():
    out = torch.zeros(32, 128, dtype=torch.int32)
    dest = _indices(100, 32)
    _, result = code_and_output(scatter_constant, (out.clone(), dest))
    expected = out.clone()
    expected[dest.long()] = 7
    assert torch.equal(result, expected)


@pallasite.kernel(config=pallasite.Config(block_sizes=[64]))
def scatter_computed_index(out, x):
    for tile in hl.tile(x.size(0)):
        out[tile.index * 2, :] = x[tile, :]
    return out


def test_a_computed_index_vector():
    out = torch.zeros(200, 128)
    x = _values(100, 128)
    _, result = code_and_output(scatter_computed_index, (out.clone(), x))
    expected = out.clone()
    expected[0::2] = x
    assert torch.equal(result, expected)


@pallasite.kernel(config=pallasite.Config(block_sizes=[16, 128]))
def scatter_rows_tile_columns(out, x, dest):
    m, n = x.size()
    for tile_m, tile_n in hl.tile([m, n]):
        out[dest[tile_m], tile_n] = x[tile_m, tile_n]
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[128, 16]))
def scatter_rows_tile_columns_outer(out, x, dest):
    m, n = x.size()
    for tile_n, tile_m in hl.tile([n, m]):
        out[dest[tile_m], tile_n] = x[tile_m, tile_n]
    return out


@pytest.mark.parametrize("kernel", [scatter_rows_tile_columns, scatter_rows_tile_columns_outer])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scatter_along_the_first_dim_with_a_tile_on_another(kernel, dtype):
    out = _values(24, 320, dtype=dtype, seed=5)  # 320: a partial last column tile
    x = _values(40, 320, dtype=dtype)
    dest = _indices(40, 24)
    _, result = code_and_output(kernel, (out.clone(), x, dest))
    assert torch.equal(result, _scattered(out, dest, x))
    call = only_call(kernel, (out, x, dest))
    (out_operand,) = call.outputs
    semantics = {axis.dim.name: axis.semantics for axis in call.grid}
    assert semantics["tile_m"] is Semantics.ARBITRARY
    if kernel is scatter_rows_tile_columns_outer:  # columns are disjoint: split across cores
        assert semantics["tile_n"] is Semantics.PARALLEL and out_operand.axes[1].kind is BlockKind.TILE
    else:  # the row block is revisited by every program: the column tile stays resident
        assert out_operand.axes[1].kind is BlockKind.RESIDENT


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def scatter_columns(out, x, columns):
    m, k = x.size()
    for tile_m, tile_k in hl.tile([m, k]):
        out[tile_m, columns[tile_k]] = x[tile_m, tile_k]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_scatter_along_the_last_dim(dtype):
    out = _values(16, 96, dtype=dtype, seed=6)
    x = _values(16, 150, dtype=dtype)
    columns = _indices(150, 96)
    _, result = code_and_output(scatter_columns, (out.clone(), x, columns))
    assert torch.equal(result, _scattered(out, columns, x, axis=1))


@pallasite.kernel(config=pallasite.Config(block_sizes=[32]))
def scatter_in_inner_loop(out, x, dest):
    batches, n, _ = x.size()
    for g in hl.grid(batches):
        for tile in hl.tile(n):
            out[g, dest[g, tile], :] = x[g, tile, :] * 0.5
    return out


@pytest.mark.parametrize("loop_type, dtype", [*((t, torch.float32) for t in LOOP_TYPES),
                                              *((t, torch.float16) for t in LOOP_TYPES)])
def test_a_scatter_in_an_inner_loop(loop_type, dtype):
    out = _values(3, 40, 128, dtype=dtype, seed=7)
    x = _values(3, 70, 128, dtype=dtype)
    dest = _indices(3 * 70, 40).reshape(3, 70)
    expected = out.clone()
    for g in range(3):
        expected[g] = _scattered(out[g], dest[g], x[g] * 0.5)
    _, result = code_and_output(scatter_in_inner_loop, (out.clone(), x, dest), pallas_loop_type=loop_type)
    assert torch.equal(result, expected)
    check_tpu_lowering(scatter_in_inner_loop, (out, x, dest), pallas_loop_type=loop_type)


@pytest.mark.parametrize("kernel, args", [
    (scatter_rows, (_values(64, 128), _values(70, 128), _indices(70, 64))),
    (scatter_rows, (_values(64, 128, dtype=torch.bfloat16), _values(70, 128, dtype=torch.bfloat16),
                    _indices(70, 64))),
    (scatter_rows, (_values(64, 128, dtype=torch.int32), _values(70, 128, dtype=torch.int32), _indices(70, 64))),
    (scatter_rows, (_values(64, 128, dtype=torch.float16), _values(70, 128, dtype=torch.float16),
                    _indices(70, 64))),
    (scatter_1d, (_values(200), _values(300), _indices(300, 200))),
    (scatter_computed_index, (torch.zeros(200, 128), _values(100, 128))),
    (scatter_rows_tile_columns, (_values(24, 320), _values(40, 320), _indices(40, 24))),
    (scatter_rows_tile_columns_outer, (_values(24, 320), _values(40, 320), _indices(40, 24))),
    (scatter_columns, (_values(16, 96), _values(16, 150), _indices(150, 96))),
])
def test_every_form_lowers_to_mosaic(kernel, args):
    check_tpu_lowering(kernel, args)


@pytest.mark.parametrize("bad", [64, -1, 1000])
def test_an_index_outside_the_destination_is_an_error(bad):
    out = _values(64, 128)
    x = _values(70, 128)
    dest = _indices(70, 64)
    dest[50] = bad
    with pytest.raises(exc.ShapeMismatch) as info:
        code_and_output(scatter_rows, (out.clone(), x, dest))
    message = str(info.value)
    assert f"is {bad}" in message and "out.size(0) is 64" in message and "scattered indices" in message
    assert "out[dest[tile], :] = x[tile, :] * 2" in message and "test_scatters.py" in message
    with pytest.raises(exc.ShapeMismatch, match=f"{bad}.*scattered indices must lie"):
        run_ref(scatter_rows, (out.clone(), x, dest))


def test_reference_mode_scatters_with_the_last_lane_winning():
    """Reference mode alone (no compiler): duplicates resolve in lane order, then program order."""
    out = torch.zeros(4, 128)
    x = torch.arange(10, dtype=torch.float32)[:, None].expand(10, 128).contiguous()
    dest = torch.tensor([1, 1, 2, 1, 3, 2, 0, 0, 3, 1], dtype=torch.int32)
    result = run_ref(scatter_rows, (out, x, dest), config=pallasite.Config(block_sizes=[4]))
    # the last lane naming rows 0..3 is 7, 9, 5, 8
    assert result[:, 0].tolist() == [14.0, 18.0, 10.0, 16.0]


# ------------------------------------------------------------------ atomics --


@pallasite.kernel(config=pallasite.Config(block_sizes=[16, 128]))
def atomic_add_tiles(out, x):
    m, n = x.size()
    for tile_m, tile_n in hl.tile([m, n]):
        hl.atomic_add(out, [tile_m, tile_n], x[tile_m, tile_n] * 2)
    return out


def test_atomic_add_with_tile_indices_adds_in_the_owning_program():
    out = _values(40, 256, seed=8)
    x = _values(40, 256)
    _, result = code_and_output(atomic_add_tiles, (out.clone(), x))
    assert torch.equal(result, out + x * 2)
    assert torch.equal(run_ref(atomic_add_tiles, (out.clone(), x)), out + x * 2)
    call = only_call(atomic_add_tiles, (out, x))
    assert [axis.semantics for axis in call.grid] == [Semantics.PARALLEL, Semantics.PARALLEL]
    check_tpu_lowering(atomic_add_tiles, (out, x))


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128, 128]))
def atomic_add_matmul(x, y):
    m, k = x.size()
    _, n = y.size()
    out = torch.zeros([m, n], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        for tile_k in hl.tile(k):
            hl.atomic_add(out, [tile_m, tile_n], x[tile_m, tile_k] @ y[tile_k, tile_n], sem="release")
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_atomic_add_in_an_inner_loop(loop_type):
    x = _values(16, 256)
    y = _values(256, 128, seed=1)
    _, result = code_and_output(atomic_add_matmul, (x, y), pallas_loop_type=loop_type)
    torch.testing.assert_close(result, x @ y, rtol=1e-4, atol=1e-4)
    check_tpu_lowering(atomic_add_matmul, (x, y), pallas_loop_type=loop_type)


@pallasite.kernel(config=pallasite.Config(block_sizes=[128]))
def atomic_add_returns_old(out, x):
    before = torch.empty_like(out)
    for tile in hl.tile(x.size(0)):
        old = hl.atomic_add(out, [tile], x[tile])
        before[tile] = old
    return before


def test_atomic_add_returns_the_values_before_the_add():
    out = _values(300, seed=9)
    x = _values(300)
    target = out.clone()
    _, before = code_and_output(atomic_add_returns_old, (target, x))
    assert torch.equal(before, out)


@pallasite.kernel(config=pallasite.Config(block_sizes=[32]))
def atomic_add_through_index(out, x, dest):
    for tile in hl.tile(x.size(0)):
        hl.atomic_add(out, [dest[tile]], x[tile])
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[32]))
def scatter_two_index_vectors(out, x, rows, cols):
    for tile in hl.tile(x.size(0)):
        out[rows[tile], cols[tile]] = x[tile]
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[32]))
def atomic_add_bad_sem(out, x):
    for tile in hl.tile(x.size(0)):
        hl.atomic_add(out, [tile], x[tile], sem="seq_cst")
    return out


def test_atomic_add_through_an_index_tensor_adds_every_duplicate():
    x, dest = _values(40), _indices(40, 16)  # 40 lanes into 16 rows: duplicates in every tile
    expected = torch.zeros(16).index_add_(0, dest.long(), x)
    _, result = code_and_output(atomic_add_through_index, (torch.zeros(16), x, dest))
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)
    reference = torch.zeros(16)
    run_ref(atomic_add_through_index, (reference, x, dest))
    torch.testing.assert_close(reference, expected, atol=1e-5, rtol=1e-5)


def test_a_scatter_with_two_index_vectors_is_rejected_with_what_to_write():
    args = (torch.zeros(16, 16), _values(40), _indices(40, 16), _indices(40, 16, seed=2))
    for run in (lambda: code_and_output(scatter_two_index_vectors, args),
                lambda: run_ref(scatter_two_index_vectors, args)):  # the oracle rejects it too
        with pytest.raises(exc.IndexingError) as info:
            run()
        message = str(info.value)
        assert "only one index vector" in message and "out.view(-1)" in message
        assert "out[rows[tile], cols[tile]] = x[tile]" in message


def test_atomic_add_rejects_an_unknown_sem():
    with pytest.raises(exc.UnsupportedOperation, match="sem must be one of"):
        code_and_output(atomic_add_bad_sem, (torch.zeros(64), _values(64)))


@pallasite.kernel(config=pallasite.Config(block_sizes=[1, 32]))
def scatter_from_batches(out, x, dest):
    batches, n, _ = x.size()
    for tile_b, tile in hl.tile([batches, n]):
        out[dest[tile_b.begin, tile], :] = x[tile_b.begin, tile, :]
    return out


@pytest.mark.parametrize("loop_orders", [None, [[1, 0]]])
def test_the_last_program_in_grid_order_wins(loop_orders):
    out = torch.zeros(8, 128)
    x = _values(3, 40, 128)
    dest = _indices(3 * 40, 8).reshape(3, 40)
    config = {"block_sizes": [1, 32], **({"loop_orders": loop_orders} if loop_orders else {})}
    # the programs in grid order: batch-major, or tile-major with loop_orders [[1, 0]]
    def written_in_order(tile_major):
        programs = sorted(((b, t) for b in range(3) for t in range(2)), key=lambda p: p[::-1] if tile_major else p)
        expected = out.clone()
        for b, t in programs:
            for lane in range(t * 32, min(t * 32 + 32, 40)):
                expected[dest[b, lane]] = x[b, lane]
        return expected

    expected = written_in_order(tile_major=bool(loop_orders))
    assert not torch.equal(expected, written_in_order(tile_major=not loop_orders))  # the order matters here
    _, result = code_and_output(scatter_from_batches, (out.clone(), x, dest), **config)
    assert torch.equal(result, expected)
    assert torch.equal(run_ref(scatter_from_batches, (out.clone(), x, dest), config=pallasite.Config(**config)),
                       expected)


@pallasite.kernel(config=pallasite.Config(block_sizes=[16, 128]))
def atomic_column_sums(x):
    m, n = x.size()
    out = torch.zeros([n], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        hl.atomic_add(out, [tile_n], x[tile_m, tile_n].sum(0))
    return out


def test_atomic_add_accumulates_across_programs():
    """Programs of tile_m all add into the same columns: the axis runs in order, and the
    column tile inside it keeps one resident block (it must not change between visits)."""
    x = _values(40, 300)
    _, result = code_and_output(atomic_column_sums, (x,))
    torch.testing.assert_close(result, x.sum(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(run_ref(atomic_column_sums, (x,)), x.sum(0), rtol=1e-5, atol=1e-5)
    call = only_call(atomic_column_sums, (x,))
    assert [axis.semantics for axis in call.grid] == [Semantics.ARBITRARY, Semantics.ARBITRARY]
    (out_operand,) = call.outputs
    assert out_operand.axes[0].kind is BlockKind.RESIDENT and "atomically added" in out_operand.axes[0].reason
    check_tpu_lowering(atomic_column_sums, (x,))


@pallasite.kernel
def scatter_under_a_device_if(out, x, dest, flags):
    for g in hl.grid(x.size(0)):
        if flags[g] > 0:
            out[dest[g, :], :] = x[g, :, :]
    return out


def test_a_scatter_under_a_device_if():
    out = torch.zeros(16, 128)
    x = _values(3, 8, 128)
    dest = _indices(24, 16).reshape(3, 8)
    flags = torch.tensor([1, 0, 1], dtype=torch.int32)
    expected = out.clone()
    for g in (0, 2):
        expected = _scattered(expected, dest[g], x[g])
    _, result = code_and_output(scatter_under_a_device_if, (out.clone(), x, dest, flags))
    assert torch.equal(result, expected)
    assert torch.equal(run_ref(scatter_under_a_device_if, (out.clone(), x, dest, flags)), expected)
    check_tpu_lowering(scatter_under_a_device_if, (out, x, dest, flags))


@pallasite.kernel(config=pallasite.Config(block_sizes=[32]))
def scatter_cast(out, x, dest):
    for tile in hl.tile(x.size(0)):
        out[dest[tile], :] = x[tile, :]
    return out


def test_a_value_of_another_dtype_is_cast_as_a_store_casts():
    out = torch.zeros(16, 128)
    x = _values(40, 128, dtype=torch.bfloat16)
    dest = _indices(40, 16)
    expected = _scattered(out, dest, x.float())
    _, result = code_and_output(scatter_cast, (out.clone(), x, dest))
    assert torch.equal(result, expected)
    assert torch.equal(run_ref(scatter_cast, (out.clone(), x, dest)), expected)


def test_an_int32_scatter_too_large_for_its_select_is_rejected():
    args = (torch.zeros(4096, 256, dtype=torch.int32), torch.zeros(256, 256, dtype=torch.int32), _indices(256, 4096))
    with pytest.raises(exc.VmemOverflow, match="exceeds the .* VMEM threshold for scatters") as info:
        scatter_rows.bind(args).to_code()
    assert "out[dest[tile], :] = x[tile, :] * 2" in str(info.value)


def test_a_scattered_output_too_large_for_vmem_is_rejected():
    args = (torch.zeros(160_000, 128), torch.zeros(64, 128), _indices(64, 160_000))
    with pytest.raises(exc.VmemOverflow, match="exceeds the .* VMEM threshold for scattered outputs"):
        scatter_rows.bind(args).to_code()


@pallasite.kernel(config=pallasite.Config(block_sizes=[16]))
def scatter_middle_axis(out, x, dest):
    for tile in hl.tile(x.size(1)):
        out[:, dest[tile], :] = x[:, tile, :]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_a_3d_destination_scattered_along_its_middle_axis(dtype):
    out = _values(4, 24, 128, dtype=dtype, seed=10)
    x = _values(4, 40, 128, dtype=dtype)
    dest = _indices(40, 24)
    _, result = code_and_output(scatter_middle_axis, (out.clone(), x, dest))
    assert torch.equal(result, _scattered(out, dest, x, axis=1))
    check_tpu_lowering(scatter_middle_axis, (out, x, dest))


@pallasite.kernel(config=pallasite.Config(block_sizes=[32]))
def add_into_unique_rows(out, x, dest):
    for tile in hl.tile(x.size(0)):
        idx = dest[tile]
        out[idx, :] = out[idx, :] + x[tile, :]
    return out


def test_a_gather_then_a_scatter_through_the_same_index_adds_into_unique_rows():
    """What the atomic_add rejection suggests for unique indices."""
    out = _values(64, 128, seed=11)
    x = _values(50, 128)
    dest = torch.randperm(64, generator=torch.Generator().manual_seed(4))[:50].to(torch.int32)
    expected = out.clone()
    expected[dest.long()] += x
    _, result = code_and_output(add_into_unique_rows, (out.clone(), x, dest))
    assert torch.equal(result, expected)
    check_tpu_lowering(add_into_unique_rows, (out, x, dest))


@pallasite.kernel(config=pallasite.Config(block_sizes=[16, 32]))
def add_by_one_hot(out, v, idx):
    for tile_r in hl.tile(out.size(0)):
        acc = out[tile_r, :]
        for tile_i in hl.tile(idx.size(0)):
            hit = idx[tile_i][None, :] == tile_r.index[:, None]
            acc = acc + torch.where(hit, 1.0, 0.0) @ v[tile_i, :]
        out[tile_r, :] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_the_one_hot_loop_the_atomic_add_rejection_suggests_sums_duplicates(loop_type):
    out = _values(40, 128, seed=12)
    v = _values(100, 128)
    idx = _indices(100, 40)
    _, result = code_and_output(add_by_one_hot, (out.clone(), v, idx), pallas_loop_type=loop_type)
    torch.testing.assert_close(result, out.clone().index_add_(0, idx.long(), v), rtol=1e-5, atol=1e-5)


@pallasite.kernel
def scatter_from_inner_tiles(out, x, dest):
    for tile_b in hl.tile(x.size(0), block_size=1):
        for tile_i, tile_j in hl.tile([x.size(1), dest.size(0)], block_size=[8, 1]):
            out[dest[tile_j.begin, tile_i], :] = x[tile_b.begin, tile_i, :] + tile_j.begin
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("inner_order", [[0, 1], [1, 0]])
def test_an_inner_loops_dim_order_decides_the_last_writer(loop_type, inner_order):
    # Row 0 is written by tile (i=0, j=1) and by tile (i=1, j=0); every other row once.
    x = _values(1, 16, 128)
    lanes = torch.arange(16, dtype=torch.int32)
    dest = torch.stack([torch.where(lanes >= 8, 0, lanes + 1), torch.where(lanes < 8, 0, lanes + 1)])
    expected = torch.zeros(17, 128)
    steps = [(i, j) for i in range(2) for j in range(2)]
    for i, j in sorted(steps, key=lambda s: s[::-1] if inner_order == [1, 0] else s):
        for lane in range(i * 8, i * 8 + 8):
            expected[dest[j, lane]] = x[0, lane] + j
    config = {"pallas_loop_type": loop_type, "loop_orders": [inner_order]}
    _, result = code_and_output(scatter_from_inner_tiles, (torch.zeros(17, 128), x, dest), **config)
    assert torch.equal(result, expected)
    reference = run_ref(scatter_from_inner_tiles, (torch.zeros(17, 128), x, dest), config=pallasite.Config(**config))
    assert torch.equal(reference, expected)


@pallasite.kernel
def scatter_int_rows(src, idx, out):
    for t in hl.tile(idx.size(0)):
        out[idx[t], :] = src[t, :]
    return out


@pytest.mark.parametrize("block", [1, 8, 64])
def test_an_int32_row_scatter_into_a_small_table_fits_vmem(block):
    """A trial's finding: 150 KiB of int32 rows were refused (an 18.8 MiB select estimated at
    every block size): the estimate put the scattered lanes on the lane axis, padded to 128;
    the select holds them beside the scattered axis."""
    idx = torch.randperm(300, generator=torch.Generator().manual_seed(0))[:130].to(torch.int32)
    src = torch.arange(130 * 128, dtype=torch.int32).reshape(130, 128)
    expected = torch.zeros(300, 128, dtype=torch.int32)
    expected[idx.long()] = src
    _, result = code_and_output(scatter_int_rows, (src, idx, torch.zeros(300, 128, dtype=torch.int32)),
                                block_sizes=[block])
    assert torch.equal(result, expected)
