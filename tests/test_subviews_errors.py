"""Narrowing reads that cannot be lowered are rejected with a clear error naming the
problem and the user's line (issue #9), never an internal failure under a misleading type.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


def _block_kernel(read):
    @pallasite.kernel
    def kernel(x):
        t, d = x.shape
        out = torch.zeros([t, d], dtype=x.dtype, device=x.device)
        for tile_t in hl.tile(t, block_size=8):
            blk = x[tile_t, :]
            out[tile_t, :] = read(blk)
        return out
    return kernel


def test_boolean_mask_of_a_device_value_is_an_indexing_error_not_a_shape_mismatch():
    # torch's meta indexing of a boolean mask fails inside torch (nonzero has no meta
    # implementation); that internal failure once surfaced as ShapeMismatch
    kernel = _block_kernel(lambda blk: blk[blk > 0])
    with pytest.raises(exc.IndexingError, match="boolean mask") as info:
        code_and_output(kernel, (torch.randn(16, 128),))
    assert "read(blk)" in str(info.value)  # the user's line
    assert "register_meta" not in str(info.value)


def test_meta_only_failure_is_not_reported_as_a_shape_mismatch():
    # an op whose result shape depends on data: torch's meta failure is not a shape error
    kernel = _block_kernel(lambda blk: blk + torch.unique(blk[0])[None, :])
    with pytest.raises(exc.PallasiteError) as info:
        code_and_output(kernel, (torch.randn(16, 128),))
    assert not isinstance(info.value, exc.ShapeMismatch) or "meta" not in str(info.value)
    assert "meta tensors" not in str(info.value)
    assert "torch.unique is not supported" in str(info.value)  # not torch.boolean_dispatch.<locals>.fn


# ------------------------------------------------------------- rejections --


def _inner_kernel(read, block=8):
    @pallasite.kernel
    def kernel(x):
        t, d = x.shape
        out = torch.zeros([(t + block - 1) // block, d], dtype=torch.float32, device=x.device)
        for tile_t in hl.tile(t, block_size=block):
            blk = x[tile_t, :]
            acc = hl.zeros([d], dtype=torch.float32)
            for tile_s in hl.tile(tile_t.end - tile_t.begin, block_size=2):
                acc = acc + read(blk, tile_s).sum(0)
            out[tile_t.id, :] = acc
        return out
    return kernel


@pytest.mark.parametrize("read,error,message", [
    (lambda blk, s: blk[-3:2], exc.IndexingError, "the slice is empty"),
    (lambda blk, s: blk[0:4:2], exc.IndexingError, "strided slice"),
    (lambda blk, s: blk[hl.arange(0, 4, 2)], exc.IndexingError, "strided run"),
    (lambda blk, s: blk[s.index + 1], exc.IndexingError, "not provably one contiguous run"),
    (lambda blk, s: blk[s.index * 2], exc.IndexingError, "not provably one contiguous run"),
    (lambda blk, s: (blk > 0)[s.index].to(torch.float32), exc.IndexingError, "torch.bool value"),
    (lambda blk, s: blk[1:10], exc.InvalidConfig, "wider than the block"),
    (lambda blk, s: blk[9][None, :], exc.InvalidConfig, "index 9 is past the block"),
    (lambda blk, s: blk[:, 200][:, None], exc.IndexingError, "index 200 is past the block"),
])
def test_rejected_narrowing_reads_name_the_problem(read, error, message):
    kernel = _inner_kernel(read)
    with pytest.raises(error, match=message) as info:
        code_and_output(kernel, (torch.randn(16, 128),))
    assert "test_subviews_errors.py" in str(info.value)  # the user's line


def test_index_past_a_partial_last_tile_is_invalid_config():
    # rows 16..20: the last tile holds 5 rows, so blk[6] is past it (eager PyTorch raises)
    kernel = _inner_kernel(lambda blk, s: blk[6][None, :])
    with pytest.raises(exc.InvalidConfig, match="can pass the end of tile 'tile_t'"):
        code_and_output(kernel, (torch.randn(21, 128),))
    kernel = _inner_kernel(lambda blk, s: blk[4][None, :])  # inside every tile: fine
    x = torch.randn(21, 128)
    _, out = code_and_output(kernel, (x,))
    expected = torch.stack([x[i + 4] * len(range(0, min(8, 21 - i), 2)) for i in range(0, 21, 8)])
    torch.testing.assert_close(out, expected)


def test_a_negative_index_past_a_partial_last_tile_is_invalid_config():
    """`blk[-1]` counts from the block's end, which on the partial last tile is padding."""
    kernel = _inner_kernel(lambda blk, s: blk[-1][None, :])
    with pytest.raises(exc.InvalidConfig, match=r"blk\[-1\] on axis 0: a negative index counts from the end of "
                       "the block of tile 'tile_t'"):  # as written: it quoted blk[7] (a trial's finding)
        code_and_output(kernel, (torch.randn(21, 128),))
    slices = _inner_kernel(lambda blk, s: blk[-3:].sum(0)[None, :])
    with pytest.raises(exc.InvalidConfig, match=r"blk\[-3:\] on axis 0: a negative index counts"):
        code_and_output(slices, (torch.randn(21, 128),))
    x = torch.randn(24, 128)  # tiles of 8 pad nothing: the last row of each tile
    _, out = code_and_output(kernel, (x,))
    torch.testing.assert_close(out, torch.stack([x[i + 7] * 4 for i in range(0, 24, 8)]))


@pallasite.kernel
def ends_of_rows(x):
    m, n = x.size()
    last = torch.empty([m], dtype=x.dtype)
    tails = torch.empty([m, 3], dtype=x.dtype)
    for t in hl.tile(m):
        c = x[t, :].cumsum(1)
        last[t] = c[:, -1] - c[:, -2]
        tails[t, :] = c[:, -3:] + c[:, :-1][:, -3:]
    return last, tails


def test_negative_indices_of_a_whole_axis_count_from_its_end():
    """`c[:, -1]` of a device value's whole axis was refused (trial V); torch counts from the
    end, which a whole axis (not a partial tile's) holds."""
    x = torch.randn(20, 16)
    c = x.cumsum(1)
    expected = (c[:, -1] - c[:, -2], c[:, -3:] + c[:, :-1][:, -3:])
    _, compiled = code_and_output(ends_of_rows, (x,), block_sizes=[8])
    for result in (compiled, run_ref(ends_of_rows, (x,), block_sizes=[8])):
        for got, want in zip(result, expected):
            torch.testing.assert_close(got, want)


# -------------------------------------------------------- read after write --


@pallasite.kernel
def load_overwrite_read(x):
    t, d = x.shape
    out = torch.zeros([(t + 7) // 8, d], dtype=torch.float32, device=x.device)
    for tile_t in hl.tile(t, block_size=8):
        blk = x[tile_t, :]
        x[tile_t, :] = blk * 0 - 1  # overwrite the tensor the block came from
        acc = blk[1] * 100  # a constant read after the write
        for tile_s in hl.tile(tile_t.end - tile_t.begin, block_size=2):
            acc = acc + blk[tile_s.index].sum(0)
        out[tile_t.id, :] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("t", [16, 13])
def test_read_after_write_sees_the_loaded_values(loop_type, t):
    x = torch.randn(t, 128)
    eager_x = x.clone()
    expected = pallasite.testing.run_ref(load_overwrite_read, (eager_x,))
    manual = torch.stack([x[i + 1] * 100 + x[i:i + 8].sum(0) for i in range(0, t, 8)])
    torch.testing.assert_close(expected, manual, rtol=1e-5, atol=1e-4)
    _, out = code_and_output(load_overwrite_read, (x,), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, manual, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(x, torch.full_like(x, -1.0))
    plan = load_overwrite_read.bind((x,)).plan(pallasite.Config(pallas_loop_type=loop_type))
    (call,) = plan.calls
    (copy,) = call.block_copies.values()
    assert all(read.ref_name == copy.scratch for read in call.subviews.values())


def test_read_after_write_lowers_to_mosaic():
    pallasite.testing.check_tpu_lowering(load_overwrite_read, (torch.randn(16, 128),))


@pallasite.kernel
def first_row_of_segments(x, offsets):
    segments = offsets.size(0) - 1
    out = torch.zeros([segments, x.size(1)], dtype=torch.float32, device=x.device)
    for g in hl.grid(segments):
        acc = hl.zeros([x.size(1)], dtype=torch.float32)
        for tile in hl.tile(offsets[g], offsets[g + 1], block_size=8):
            blk = x[tile, :]
            acc = acc + blk[0]  # every tile holds at least one row
        out[g, :] = acc
    return out


def test_position_zero_of_a_data_dependent_tile_is_always_valid():
    x = torch.randn(30, 128)
    offsets = torch.tensor([0, 3, 3, 20, 30], dtype=torch.int32)
    _, out = code_and_output(first_row_of_segments, (x, offsets))
    bounds = offsets.tolist()
    expected = torch.stack([sum((x[i] for i in range(a, b, 8)), torch.zeros(128))
                            for a, b in zip(bounds, bounds[1:])])
    torch.testing.assert_close(out, expected)


def test_position_one_of_a_data_dependent_tile_is_refused():
    @pallasite.kernel
    def second_rows(x, offsets):
        out = torch.zeros([offsets.size(0) - 1, x.size(1)], dtype=torch.float32, device=x.device)
        for g in hl.grid(offsets.size(0) - 1):
            acc = hl.zeros([x.size(1)], dtype=torch.float32)
            for tile in hl.tile(offsets[g], offsets[g + 1], block_size=8):
                acc = acc + x[tile, :][1]
            out[g, :] = acc
        return out

    with pytest.raises(exc.IndexingError, match="can pass the end of tile 'tile'"):
        code_and_output(second_rows, (torch.randn(30, 128), torch.tensor([0, 3, 30], dtype=torch.int32)))


@pallasite.kernel
def overwrite_through_a_view(x):
    t, d = x.shape
    flat = x.view(t * d // 128, 128)  # the same storage, written below
    out = torch.zeros([(t + 7) // 8, d], dtype=torch.float32, device=x.device)
    for tile_t in hl.tile(t, block_size=8):
        blk = x[tile_t, :]
        flat[tile_t, :] = blk * 0 + 5
        acc = hl.zeros([d], dtype=torch.float32)
        for tile_s in hl.tile(tile_t.end - tile_t.begin, block_size=2):
            acc = acc + blk[tile_s.index].sum(0)
        out[tile_t.id, :] = acc
    return out


def test_a_write_through_a_view_also_copies_the_block():
    x = torch.randn(16, 128)
    expected = torch.stack([x[i:i + 8].sum(0) for i in range(0, 16, 8)])
    plan = overwrite_through_a_view.bind((x,)).plan()
    (call,) = plan.calls
    assert len(call.block_copies) == 1
    _, out = code_and_output(overwrite_through_a_view, (x,))
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-4)


def test_a_run_of_a_computed_value_reads_it_back_from_vmem():
    kernel = _inner_kernel(lambda blk, s: (blk * 2)[s.index])
    x = torch.randn(13, 128)
    _, out = code_and_output(kernel, (x,))
    expected = torch.stack([2 * x[i:i + 8].sum(0) for i in range(0, 13, 8)])
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-4)


def test_a_constant_slice_of_a_partial_tile_names_the_slice_not_an_eager_error():
    @pallasite.kernel
    def tail_sum(x):
        out = torch.empty([x.size(0), x.size(2)], dtype=torch.float32, device=x.device)
        for b in hl.grid(x.size(0)):
            acc = hl.zeros([x.size(2)], dtype=torch.float32)
            for tt in hl.tile(x.size(1)):
                blk = x[b, tt, :]
                acc = acc + blk[1:].sum(0)
            out[b, :] = acc
        return out

    # 21 rows in blocks of 8: the last tile holds 5, where torch's blk[1:] has 4 rows, not 7
    with pytest.raises(exc.InvalidConfig, match="a constant slice of tile 'tt'.*would depend on the tile's extent"):
        code_and_output(tail_sum, (torch.randn(2, 21, 128),), block_sizes=[8])


# --------------------------------------------------- several index vectors --


@pallasite.kernel
def head_tile_sums(x):
    """Rows of the block in runs of one inner tile and heads in runs of another."""
    t, h, d = x.shape
    out = torch.zeros([(t + 7) // 8, d], dtype=torch.float32, device=x.device)
    for tile_t in hl.tile(t, block_size=8):
        blk = x[tile_t, :, :]
        acc = hl.zeros([d], dtype=torch.float32)
        for tile_s, tile_h in hl.tile([tile_t.end - tile_t.begin, h], block_size=[2, 2]):
            acc = acc + blk[tile_s, tile_h].sum(0).sum(0)
        out[tile_t.id, :] = acc
    return out


@pallasite.kernel
def paired_runs(x):
    t, h, d = x.shape
    out = torch.zeros([(t + 7) // 8, d], dtype=torch.float32, device=x.device)
    for tile_t in hl.tile(t, block_size=8):
        blk = x[tile_t, :, :]
        acc = hl.zeros([d], dtype=torch.float32)
        for tile_s, tile_h in hl.tile([tile_t.end - tile_t.begin, h], block_size=[2, 2]):
            acc = acc + blk[tile_s.index, tile_h.index].sum(0)
        out[tile_t.id, :] = acc
    return out


def test_two_index_vectors_in_one_narrowing_pair_up_so_they_are_refused_not_read_as_a_block():
    # torch pairs index tensors element by element: blk[s.index, h.index] is the diagonal
    # (row s[i], head h[i]), which reference mode computes; a narrowing read is a block of
    # runs, so the pair is refused, never summed as the block. Tiles are slices: the block.
    x = torch.randn(13, 4, 128)
    with pytest.raises(exc.IndexingError, match=r"pairs them element by element") as info:
        code_and_output(paired_runs, (x,))
    assert "blk[tile_s.index, tile_h.index]" in str(info.value)
    _, out = code_and_output(head_tile_sums, (x,))
    expected = torch.stack([x[i:i + 8].sum((0, 1)) for i in range(0, 13, 8)])
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_run_of_a_device_value_bounded_by_a_tile_begin_is_a_clear_error(loop_type):
    """`blk[ts.begin:ts.begin + 4]`: checking whether the slice is `:` once compared its traced
    bounds with `==` and failed inside the tracer ('bool' object has no attribute 'dtype')."""
    @pallasite.kernel(config=pallasite.Config(block_sizes=[32, 4], pallas_loop_type=loop_type))
    def runs(x, w):
        m, d = x.size()
        out = torch.empty_like(x)
        for tm in hl.tile(m):
            blk = x[tm, :]
            for ts in hl.tile(tm.end - tm.begin):
                run = blk[ts.begin:ts.begin + 4]
                out[tm.begin + ts.index, :] = run * w[ts, :]
        return out

    with pytest.raises(exc.IndexingError, match="compile-time ints.*index with the tile") as info:
        code_and_output(runs, (torch.randn(64, 256), torch.randn(32, 256)))
    assert "run = blk[ts.begin:ts.begin + 4]" in str(info.value)
