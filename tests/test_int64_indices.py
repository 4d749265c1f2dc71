"""int64 index tensors, as torch makes them and Helion's jagged examples pass them (issue
#22 §1): offsets, labels and indices read only as indices, offsets or loop bounds are
narrowed to int32 on the host with a checked range; int64 data the kernel computes with
is refused at the user's line. The decision is the plan's (`KernelPlan.narrowed_arguments`)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


def _offsets(lengths: list[int]) -> torch.Tensor:
    """Jagged offsets as Helion's examples build them: a cumsum, int64 (torch's default)."""
    return torch.cat([torch.zeros(1, dtype=torch.long), torch.tensor(lengths).cumsum(0)])


# ------------------------------------------------ offsets read as loop bounds --


@pallasite.kernel
def jagged_row_mean(x, offsets):
    segments = offsets.size(0) - 1
    out = torch.empty([segments, x.size(1)], dtype=torch.float32, device=x.device)
    for g in hl.grid(segments):
        start = offsets[g]
        end = offsets[g + 1]
        acc = hl.zeros([x.size(1)], dtype=torch.float32)
        for tile in hl.tile(start, end, block_size=8):
            acc = acc + x[tile, :].sum(0)
        out[g, :] = acc / torch.clamp(end - start, min=1)  # the length, a float divisor
    return out


def _row_means(x, offsets):
    bounds = offsets.tolist()
    return torch.stack([x[a:b].sum(0) / max(b - a, 1) for a, b in zip(bounds, bounds[1:])])


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_int64_offsets_as_loop_bounds(loop_type):
    x = torch.randn(45, 128, generator=torch.Generator().manual_seed(0))
    offsets = _offsets([5, 0, 19, 21])  # unaligned starts, an empty segment
    assert offsets.dtype == torch.int64
    _, out = code_and_output(jagged_row_mean, (x, offsets), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, _row_means(x, offsets), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(run_ref(jagged_row_mean, (x, offsets), pallas_loop_type=loop_type), out,
                               atol=1e-5, rtol=1e-5)
    assert offsets.dtype == torch.int64  # the caller's tensor is untouched


@pallasite.kernel
def jagged_row_sums_from_views(x, offsets):
    starts, ends = offsets[:-1], offsets[1:].clone()  # host views and copies of int64 offsets
    out = torch.zeros([starts.size(0), x.size(1)], dtype=torch.float32, device=x.device)
    for g in hl.grid(starts.size(0)):
        acc = hl.zeros([x.size(1)], dtype=torch.float32)
        for tile in hl.tile(starts[g], ends[g], block_size=8):
            acc = acc + x[tile, :].sum(0)
        out[g, :] = acc
    return out


def test_host_views_and_copies_of_int64_offsets_still_only_index():
    x, offsets = torch.randn(45, 128), _offsets([5, 0, 19, 21])
    expected = torch.stack([x[a:b].sum(0) for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())])
    _, out = code_and_output(jagged_row_sums_from_views, (x, offsets))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(run_ref(jagged_row_sums_from_views, (x, offsets)), out, atol=1e-5, rtol=1e-5)


def test_the_plan_records_which_arguments_are_narrowed():
    x, offsets = torch.randn(45, 128), _offsets([5, 0, 19, 21])
    plan = jagged_row_mean.bind((x, offsets)).plan()
    assert [(a.name, a.caller_dtype, a.values_read) for a in plan.narrowed_arguments] == [
        ("offsets", torch.int64, True)]


def test_int32_offsets_compile_the_same_kernel_without_narrowing():
    x = torch.randn(45, 128)
    wide, narrow = _offsets([5, 0, 19, 21]), _offsets([5, 0, 19, 21]).to(torch.int32)
    assert jagged_row_mean.bind((x, narrow)).plan().narrowed_arguments == ()
    torch.testing.assert_close(jagged_row_mean(x, narrow), jagged_row_mean(x, wide))


# ------------------------- offsets loaded per tile (Helion's jagged sum / mean) --


@pallasite.kernel
def jagged_sum_by_tiles(x_data, x_offsets, max_len: hl.constexpr):
    features = x_data.size(1)
    rows = x_offsets.size(0) - 1
    out = torch.zeros([rows, features], dtype=x_data.dtype, device=x_data.device)
    x_flat = x_data.view(-1)
    for tile_b in hl.tile(rows):
        starts = x_offsets[tile_b]
        ends = x_offsets[tile_b.index + 1]
        nnz = ends - starts
        for tile_m in hl.tile(features):
            row_sums = hl.zeros([tile_b, tile_m], dtype=x_data.dtype)
            for tile_k in hl.tile(max_len):
                valid = tile_k.index[None, :] < nnz[:, None]
                row = torch.where(valid, starts[:, None] + tile_k.index[None, :], 0)
                values = x_flat[row[:, :, None] * features + tile_m.index[None, None, :]]
                row_sums = row_sums + torch.where(valid[:, :, None], values, 0.0).sum(dim=1)
            out[tile_b, tile_m] = row_sums
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_int64_offsets_loaded_per_tile_index_a_gather(loop_type):
    offsets = _offsets([3, 0, 7, 5, 8, 1])
    x = torch.randn(int(offsets[-1]), 8, generator=torch.Generator().manual_seed(1))
    expected = torch.stack([x[a:b].sum(0) for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())])
    _, out = code_and_output(jagged_sum_by_tiles, (x, offsets, 8), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(run_ref(jagged_sum_by_tiles, (x, offsets, 8), pallas_loop_type=loop_type), out,
                               atol=1e-5, rtol=1e-5)


# ------------------------------------------------------- labels gather a row --


@pallasite.kernel
def target_logits(logits, labels):
    out = torch.empty([logits.size(0)], dtype=logits.dtype, device=logits.device)
    for tile in hl.tile(logits.size(0)):
        out[tile] = logits[tile.index, labels[tile]]
    return out


@pallasite.kernel
def embedding_bag_sum(table, indices, offsets):
    bags = offsets.size(0) - 1
    out = torch.empty([bags, table.size(1)], dtype=torch.float32, device=table.device)
    for g in hl.grid(bags):
        acc = hl.zeros([table.size(1)], dtype=torch.float32)
        for tile in hl.tile(offsets[g], offsets[g + 1], block_size=8):
            acc = acc + table[indices[tile], :].sum(0)
        out[g, :] = acc
    return out


def test_int64_labels_pick_each_rows_logit():
    logits = torch.randn(40, 256, generator=torch.Generator().manual_seed(2))
    labels = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(3))
    _, out = code_and_output(target_logits, (logits, labels))
    expected = logits[torch.arange(40), labels]
    assert torch.equal(out, expected)
    assert torch.equal(run_ref(target_logits, (logits, labels)), expected)


@pallasite.kernel
def pick_pairs(table, rows, cols):
    m, n = rows.size()
    out = torch.empty([m, n], dtype=table.dtype, device=table.device)
    for tm, tn in hl.tile([m, n]):
        out[tm, tn] = table[rows[tm, tn], cols[tm, tn]] * 2
    return out


def test_int64_index_pairs_gather_int32_values_that_may_be_stored():
    generator = torch.Generator().manual_seed(5)
    table = torch.randint(-8, 9, (6, 128), generator=generator, dtype=torch.int32)
    rows = torch.randint(0, 6, (16, 24), generator=generator)
    cols = torch.randint(0, 128, (16, 24), generator=generator)
    _, out = code_and_output(pick_pairs, (table, rows, cols))
    assert torch.equal(out, table[rows, cols] * 2)  # the gathered values are the table's, not the indices'
    assert torch.equal(run_ref(pick_pairs, (table, rows, cols)), out)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_int64_indices_and_offsets_of_an_embedding_bag(loop_type):
    generator = torch.Generator().manual_seed(4)
    table = torch.randn(50, 128, generator=generator)
    offsets = _offsets([3, 0, 20, 9])
    indices = torch.randint(0, 50, (32,), generator=generator)
    expected = torch.nn.functional.embedding_bag(indices, table, offsets[:-1], mode="sum")
    _, out = code_and_output(embedding_bag_sum, (table, indices, offsets), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(run_ref(embedding_bag_sum, (table, indices, offsets), pallas_loop_type=loop_type),
                               out, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------- range and data errors --


def test_an_offset_past_int32_is_an_argument_error_naming_it():
    x = torch.randn(45, 128)
    offsets = _offsets([5, 0, 19, 21])
    offsets[2] = 2**31 + 7
    with pytest.raises(exc.KernelArgumentError, match=r"'offsets'.*2147483655.*int32"):
        jagged_row_mean(x, offsets)


@pallasite.kernel
def shifted_labels(labels):
    out = torch.empty(labels.size(), dtype=torch.int32, device=labels.device)
    for tile in hl.tile(labels.size(0)):
        out[tile] = labels[tile] + 1
    return out


@pallasite.kernel
def bump_in_place(counts):
    for tile in hl.tile(counts.size(0)):
        counts[tile] = counts[tile] + 1
    return counts


def test_int64_values_stored_as_data_are_refused_at_the_users_line():
    labels = torch.arange(16)
    with pytest.raises(exc.UnsupportedDtype, match=r"'labels'.*int64.*stores integers computed from its values") as info:
        shifted_labels(labels)
    assert "out[tile] = labels[tile] + 1" in str(info.value)
    shifted_labels(labels.to(torch.int32))  # the same kernel on int32 data runs


def test_an_int64_tensor_the_kernel_writes_is_refused_at_the_users_line():
    with pytest.raises(exc.UnsupportedDtype, match=r"'counts'.*int64.*writes") as info:
        bump_in_place(torch.arange(16))
    assert "counts[tile] = counts[tile] + 1" in str(info.value)


@pallasite.kernel
def labels_plus_row_sums(labels, x):
    """Helion's form: int64 values cast to int32 where they are read, then computed with."""
    m, n = x.size()
    out = torch.empty([m], dtype=torch.int32, device=x.device)
    for tm in hl.tile(m):
        acc = labels[tm].to(torch.int32) + 1
        for tn in hl.tile(n):
            acc = acc + (x[tm, tn] > 0).to(torch.int32).sum(1)
            acc = acc * (labels[tm].to(torch.int32) % 3 + 1)
        out[tm] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_int64_values_cast_where_they_are_read_compute_as_torch_does(loop_type):
    labels = torch.arange(-20, 44)  # int64, negative values too
    x = torch.randn(64, 384, generator=torch.Generator().manual_seed(3))
    expected = labels.to(torch.int32) + 1
    for start in range(0, 384, 128):
        expected = (expected + (x[:, start:start + 128] > 0).to(torch.int32).sum(1)) * (labels.to(torch.int32) % 3 + 1)
    _, out = code_and_output(labels_plus_row_sums, (labels, x), block_sizes=[16, 128], pallas_loop_type=loop_type)
    assert out.dtype == torch.int32
    torch.testing.assert_close(out, expected.to(torch.int32))
    torch.testing.assert_close(run_ref(labels_plus_row_sums, (labels, x), block_sizes=[16, 128],
                                       pallas_loop_type=loop_type), out)
    with pytest.raises(exc.KernelArgumentError, match=r"'labels'.*int32"):  # torch would cast this one
        labels_plus_row_sums(torch.full([64], 2**31 + 3), x)


@pallasite.kernel
def cast_after_adding(labels):
    out = torch.empty(labels.size(), dtype=torch.int32, device=labels.device)
    for tile in hl.tile(labels.size(0)):
        out[tile] = (labels[tile] // 2).to(torch.int32)
    return out


def test_a_cast_after_int64_arithmetic_is_still_refused():
    """torch computes `labels[tile] // 2` in int64 before the cast: only a cast of the values
    as read is exact, so the error stays and says where to cast."""
    with pytest.raises(exc.UnsupportedDtype, match=r"'labels'.*stores integers computed from its values.*labels\[\.\.\.\]\.to\(torch\.int32\)"):
        cast_after_adding(torch.arange(16))


# ------------------------------------------------- positions computed on the host --


@pallasite.kernel(ignore_warnings=[exc.TensorOperationInWrapper])
def gather_wrapped(w, idx, x):
    """Helion's gather_gemv: negative indices wrap, computed on the host from int64 idx."""
    batch, s, _ = w.size()
    out = torch.empty([idx.size(0), s], dtype=torch.float32, device=w.device)
    idx_wrapped = torch.where(idx < 0, idx + batch, idx)
    for tile_i, tile_j in hl.tile([idx.size(0), s]):
        acc = hl.zeros([tile_i, tile_j], dtype=torch.float32)
        for tile_k in hl.tile(s):
            acc = acc + (w[idx_wrapped[tile_i], tile_j, tile_k] * x[tile_k]).sum(-1)
        out[tile_i, tile_j] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_positions_computed_on_the_host_from_int64_indices(loop_type):
    w, x = torch.randn(8, 128, 128), torch.randn(128)
    idx = torch.tensor([3, -1, 0, -8, 7, -3], dtype=torch.int64)
    _, out = code_and_output(gather_wrapped, (w, idx, x), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, w[idx] @ x, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(run_ref(gather_wrapped, (w, idx, x), pallas_loop_type=loop_type), out,
                               atol=1e-4, rtol=1e-4)
    (narrowed,) = gather_wrapped.bind((w, idx, x)).plan().narrowed_arguments
    assert [step.op for step in narrowed.computed] == ["add", "where"]


@pallasite.kernel(ignore_warnings=[exc.TensorOperationInWrapper])
def gather_clamped(table, idx):
    pos = torch.clamp(idx, 0, table.size(0) - 1).clamp(min=1)  # positional and keyword bounds
    out = torch.empty([idx.size(0), table.size(1)], dtype=table.dtype, device=table.device)
    for t in hl.tile(idx.size(0)):
        out[t, :] = table[pos[t], :]
    return out


@pallasite.kernel(ignore_warnings=[exc.TensorOperationInWrapper])
def gather_cast(table, idx):
    wrapped = idx.int() % table.size(0)  # int32 in torch too: computed on as int32, no range step
    shifted = idx.long() + 1  # a no-op cast: idx itself
    out = torch.empty([idx.size(0), table.size(1)], dtype=table.dtype, device=table.device)
    for t in hl.tile(idx.size(0)):
        out[t, :] = table[wrapped[t], :] + table[shifted[t] % table.size(0), :]
    return out


def test_clamped_and_cast_int64_indices():
    """torch.clamp of an int64 index on the host crashed on its bounds; idx.int() + a large
    number was refused as if torch computed it in int64; idx.long() was refused (the trial)."""
    table, idx = torch.randn(50, 128), torch.tensor([-3, 0, 7, 60, 49])
    torch.testing.assert_close(gather_clamped(table, idx), table[idx.clamp(0, 49).clamp(min=1)])
    idx = torch.tensor([3, 49, 2**31 - 5])
    expected = table[(idx.int() % 50).long()] + table[(idx + 1) % 50]
    torch.testing.assert_close(gather_cast(table, idx), expected)


@pallasite.kernel(ignore_warnings=[exc.TensorOperationInWrapper])
def segment_sums_by_length(x, offsets):
    lengths = offsets[1:] - offsets[:-1]  # int64 in torch, int32 here: equal while in range
    out = torch.zeros([lengths.size(0), x.size(1)], dtype=torch.float32, device=x.device)
    for g in hl.grid(lengths.size(0)):
        start = offsets[g]
        acc = hl.zeros([x.size(1)], dtype=torch.float32)
        for tile in hl.tile(start, start + lengths[g] * 1, block_size=8):
            acc = acc + x[tile, :].sum(0)
        out[g, :] = acc
    return out


def test_lengths_computed_from_int64_offsets_bound_loops():
    x = torch.randn(45, 128)
    offsets = _offsets([5, 0, 19, 21])
    _, out = code_and_output(segment_sums_by_length, (x, offsets))
    expected = torch.stack([x[a:b].sum(0) for a, b in zip(offsets.tolist(), offsets.tolist()[1:])])
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_a_host_step_that_could_leave_int32_is_an_argument_error_naming_the_line():
    """idx + 8 of 2**31 - 4 is past int32: torch's int64 result would differ from ours."""
    w, x = torch.randn(8, 128, 128), torch.randn(128)
    idx = torch.tensor([1, 2**31 - 4], dtype=torch.int64)
    with pytest.raises(exc.KernelArgumentError, match=r"'idx' holds values in \[1, 2147483644\].*past int32") as info:
        gather_wrapped(w, idx, x)
    assert "idx_wrapped = torch.where(idx < 0, idx + batch, idx)" in str(info.value)


@pallasite.kernel(ignore_warnings=[exc.TensorOperationInWrapper])
def lengths_returned(x, offsets):
    lengths = offsets[1:] - offsets[:-1]
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * 2.0
    return out, lengths


@pallasite.kernel(ignore_warnings=[exc.TensorOperationInWrapper])
def shifted_by_a_tensor(x, idx, shift):
    moved = idx + shift  # shift's values: any int32, so idx + shift may leave int32
    out = torch.empty([idx.size(0), x.size(1)], dtype=x.dtype, device=x.device)
    for tile in hl.tile(idx.size(0)):
        out[tile, :] = x[moved[tile], :]
    return out


def test_int64_values_host_code_returns_or_computes_without_a_range_are_refused():
    with pytest.raises(exc.UnsupportedDtype, match=r"'offsets'.*int64.*returns"):
        lengths_returned(torch.randn(8, 128), _offsets([3, 5]))
    with pytest.raises(exc.UnsupportedDtype, match=r"'idx'.*int64.*unknown range") as info:
        shifted_by_a_tensor(torch.randn(8, 128), torch.arange(4), torch.ones(4, dtype=torch.int32))
    assert "moved = idx + shift" in str(info.value)


def test_float64_stays_refused_at_the_call():
    with pytest.raises(exc.KernelArgumentError, match="float64"):
        jagged_row_mean(torch.randn(8, 128, dtype=torch.float64), _offsets([3, 5]))


# ------------------------------------- int64 values computed with, then converted --


@pallasite.kernel
def scaled_label_sums(labels, x):
    """int64 values multiplied, summed and compared in device code, then made floats: torch
    computes those steps in int64 (a trial's wrong answer: int32 wrapped them silently)."""
    m, n = x.size()
    out = torch.zeros([m], dtype=torch.float32, device=x.device)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tn in hl.tile(n):
            acc = acc + (x[tm, tn] * (labels[tn] * 1000)[None, :].float()).sum(1)
        acc = acc + labels[tm].sum().float() + (labels[tm] * labels[tm] > 5000).float()
        out[tm] = acc
    return out


def _scaled_label_sums(labels, x):
    m = x.size(0)
    tiles = [(labels[i:i + 16].sum()).float().expand(len(labels[i:i + 16])) for i in range(0, m, 16)]
    return (x * (labels * 1000).float()[None, :]).sum(1) + torch.cat(tiles) + (labels * labels > 5000).float()


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_int64_values_computed_with_then_converted_are_exact_or_refused(loop_type):
    x = torch.randn(48, 48, generator=torch.Generator().manual_seed(4))
    labels = torch.arange(-24, 24)  # int64; the steps stay within int32: run, as torch
    config = dict(block_sizes=[16, 16], pallas_loop_type=loop_type)
    _, out = code_and_output(scaled_label_sums, (labels, x), **config)
    torch.testing.assert_close(out, _scaled_label_sums(labels, x), atol=1e-2, rtol=1e-4)  # float sums reordered
    big = labels * 100_000  # 2.4e6 * 1000 leaves int32: the host says which step, before the call
    with pytest.raises(exc.KernelArgumentError, match=r"'labels'.*its mul.*labels\[tn\] \* 1000"):
        code_and_output(scaled_label_sums, (big, x), **config)


@pallasite.kernel
def label_cumsum_as_float(labels):
    """A scan's steps are adds of the values: ranged like any other add."""
    out = torch.empty(labels.size(), dtype=torch.float32, device=labels.device)
    for tile in hl.tile(labels.size(0)):
        out[tile] = torch.cumsum(labels[tile], 0).float()
    return out


@pallasite.kernel
def label_times_counts(labels, counts):
    """labels * counts: counts' values have no range the host knows, so int32 may wrap."""
    out = torch.empty(labels.size(), dtype=torch.float32, device=labels.device)
    for tile in hl.tile(labels.size(0)):
        out[tile] = (labels[tile] * counts[tile]).float()
    return out


@pallasite.kernel
def label_above_int32(labels):
    out = torch.empty(labels.size(), dtype=torch.float32, device=labels.device)
    for tile in hl.tile(labels.size(0)):
        out[tile] = torch.where(labels[tile] > 3_000_000_000, 1.0, 0.0)
    return out


def test_int64_values_without_a_range_rule_or_past_int32_constants_are_refused():
    labels = torch.arange(32)
    torch.testing.assert_close(label_cumsum_as_float(labels), torch.cumsum(labels, 0).float())
    with pytest.raises(exc.KernelArgumentError, match=r"'labels'.*its add"):
        label_cumsum_as_float(labels * 2**26)  # the running sum leaves int32
    with pytest.raises(exc.UnsupportedDtype, match=r"'labels'.*converts \(its to\) integers computed from its values \(with its mul\)"):
        label_times_counts(labels, torch.arange(32, dtype=torch.int32))
    with pytest.raises(exc.UnsupportedDtype, match=r"3000000000 does not fit int32") as info:
        label_above_int32(torch.arange(32))
    assert "labels[tile] > 3_000_000_000" in str(info.value)


@pallasite.kernel
def carried_label_sum(labels):
    """An int32 accumulator carried through an inner loop takes int64 values: torch adds in
    int64 (a second trial's wrong answer: the carried sum wrapped, unchecked)."""
    m, n = labels.shape
    out = torch.empty([m], dtype=torch.float32, device=labels.device)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.int32)
        for tn in hl.tile(n):
            acc = acc + labels[tm, tn].amax(1)
        out[tm] = acc.float()
    return out


@pallasite.kernel(ignore_warnings=[exc.TensorOperationInWrapper])
def host_then_device_steps(labels):
    lab2 = labels * 1000  # a host step, checked
    out = torch.empty(labels.size(), dtype=torch.float32, device=labels.device)
    for t in hl.tile(labels.size(0)):
        out[t] = (lab2[t] * 3).float()  # and a device step on its values
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_carried_accumulation_of_int64_values_is_refused(loop_type):
    labels = torch.full((16, 300), 1_000_000_000)
    with pytest.raises(exc.UnsupportedDtype, match=r"'labels'.*integers computed from its values"):
        code_and_output(carried_label_sum, (labels,), block_sizes=[16, 128], pallas_loop_type=loop_type)


def test_a_device_step_on_a_host_step_is_checked_with_it():
    labels = torch.randint(-50, 50, (300,))
    torch.testing.assert_close(host_then_device_steps(labels), (labels * 3000).float())
    labels[0] = 1_000_000  # 1e9 fits int32, 3e9 does not
    with pytest.raises(exc.KernelArgumentError, match=r"'labels'.*its mul.*lab2\[t\] \* 3"):
        host_then_device_steps(labels)


@pallasite.kernel
def label_extremes(labels):
    """A max or min of int64 values holds some of them; an argmax holds positions."""
    m = labels.size(0)
    top = torch.empty([m], dtype=torch.float32, device=labels.device)
    at = torch.empty([m], dtype=torch.long, device=labels.device)
    low = torch.empty([m], dtype=torch.long, device=labels.device)
    for t in hl.tile(m):
        top[t] = labels[t, :].amax(1).float()
        at[t] = labels[t, :].argmax(1)
        low[t] = labels[t, :].amin(1)
    return top, at, low


@pytest.mark.parametrize("block_sizes", [[8], [16]])
def test_max_min_and_argmax_of_int64_values(block_sizes):
    labels = torch.randint(-2**31, 2**31 - 1, (20, 130))
    _, (top, at, low) = code_and_output(label_extremes, (labels,), block_sizes=block_sizes)
    torch.testing.assert_close(top, labels.amax(1).float())
    torch.testing.assert_close(at, labels.argmax(1))
    torch.testing.assert_close(low, labels.amin(1))


@pallasite.kernel
def expert_histogram(ids, experts: int):
    counts = torch.zeros([experts], dtype=torch.int32, device=ids.device)
    for tile in hl.tile(ids.size(0)):
        hl.atomic_add(counts, [ids[tile]], torch.ones_like(ids[tile], dtype=torch.int32))
    return counts


def test_a_fill_shaped_like_int64_indices_is_no_use_of_their_values():
    """A trial's finding: `torch.ones_like(ids[tile])` takes only the shape of int64 ids, yet
    the kernel was refused as storing integers computed from their values."""
    ids = torch.randint(0, 7, (333,), generator=torch.Generator().manual_seed(0))
    expected = torch.bincount(ids, minlength=7).int()
    _, result = code_and_output(expert_histogram, (ids, 7))
    assert torch.equal(result, expected)
    assert torch.equal(run_ref(expert_histogram, (ids, 7)), expected)
