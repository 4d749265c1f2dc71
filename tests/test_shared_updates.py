"""`a += v` in device code when another name holds the same tile value.

In torch both names hold one tensor and `+=` changes it in place, so `b = a; a += 1`
changes `b` too; pallasite's device values are values (as Helion's are), so the kernel
would read the old `b`. Such an update is refused, in both modes, when the other name is
read later; an update no other live name sees runs as before."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES

from source_lines import assert_points_at

RUNS = {"compiled": lambda kernel, args, **config: pallasite.testing.code_and_output(kernel, args, **config)[1],
        "reference": lambda kernel, args, **config: pallasite.testing.run_ref(kernel, args, **config)}


@pallasite.kernel
def copy_then_update(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        a = x[t]
        b = a
        a *= 2
        out[t] = b + a
    return out


@pallasite.kernel
def snapshot_before_an_inner_loop(x):
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        first = acc
        for tn in hl.tile(n):
            acc += x[tm, tn].sum(1)
        out[tm] = first + acc
    return out


@pallasite.kernel
def snapshot_read_in_the_loop(x):
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        start = acc
        for tn in hl.tile(n):
            acc += x[tm, tn].sum(1) + start
        out[tm] = acc
    return out


@pallasite.kernel
def tuple_bound_then_updated_under_an_if(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        a, keep = x[t], 0
        keep = a
        if x.size(0) > 4:
            a -= 1
        out[t] = keep
    return out


@pallasite.kernel
def both_names_carried(x):
    """In torch, the first `acc +=` changes `best` too (both start as one tensor)."""
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        best = acc
        for tn in hl.tile(n):
            acc += x[tm, tn].sum(1)
            best = torch.maximum(best, acc)
        out[tm] = best + acc
    return out


def _bump(v, w):
    v += w
    return v * 2


@pallasite.kernel
def helper_updates_its_argument(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        a = x[t]
        r = _bump(a, 1.0)
        out[t] = a + r
    return out


@pallasite.kernel
def list_item_updated(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        v = x[t]
        values = [v, v * 2]
        values[0] += 10
        out[t] = v + values[0]
    return out


def _x():
    return torch.randn(16, 256)


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("kernel, args, words, line", [
    (copy_then_update, (torch.randn(16),), "`a \\*= 2` would change `b` too", "a *= 2"),
    (snapshot_before_an_inner_loop, (_x(),), "`acc \\+= x\\[tm, tn\\].sum\\(1\\)` would change `first` too",
     "acc += x[tm, tn].sum(1)"),
    (snapshot_read_in_the_loop, (_x(),), "would change `start` too", "acc += x[tm, tn].sum(1) + start"),
    (tuple_bound_then_updated_under_an_if, (torch.randn(16),), "`a -= 1` would change `keep` too", "a -= 1"),
    (both_names_carried, (_x(),), "would change `best` too", "acc += x[tm, tn].sum(1)"),
    # compiled, `a` kept its value where torch's `v += w` in the helper changes it (trial P)
    (helper_updates_its_argument, (torch.randn(16),), "An `x \\+= v` in a function this line calls would change "
     "`a` too", "r = _bump(a, 1.0)"),
    (list_item_updated, (torch.randn(16),), "`values\\[0\\] \\+= 10` would change `v` too", "values[0] += 10"),
])
def test_an_update_another_live_name_would_see_is_refused(kernel, args, words, line, run):
    """Each ran before, the other name keeping the old value where torch changes it."""
    with pytest.raises(exc.UnsupportedOperation, match=words) as error:
        RUNS[run](kernel, args)
    assert_points_at(error.value, kernel, line)
    assert "Write `" in str(error.value)


@pallasite.kernel
def copy_no_longer_read(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        a = x[t]
        b = a
        out[t] = b * 3
        a += 1
        out[t] = out[t] + a
    return out


@pallasite.kernel
def copy_then_rebind(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        a = x[t]
        b = a
        a = a * 2
        out[t] = b + a
    return out


@pallasite.kernel
def fresh_accumulator_in_the_loop(x):
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        total = acc
        for tn in hl.tile(n):
            acc = hl.zeros([tm], dtype=torch.float32)
            acc += x[tm, tn].sum(1)
            total = total + acc
        out[tm] = total
    return out


@pallasite.kernel
def running_best(x):
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        best = hl.full([tm], float("-inf"), dtype=torch.float32)
        for tn in hl.tile(n):
            acc += x[tm, tn].sum(1)
            best = torch.maximum(best, acc)
        out[tm] = best + acc
    return out


def _torch_running_best(x):
    sums = x.reshape(x.shape[0], -1, 128).sum(2).cumsum(1)
    return sums.amax(1) + sums[:, -1]


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("kernel, expected", [
    (copy_no_longer_read, lambda x: x * 3 + x + 1),
    (copy_then_rebind, lambda x: x * 3),
])
def test_updates_no_other_live_name_sees_run(kernel, expected, run):
    x = torch.randn(300)
    torch.testing.assert_close(RUNS[run](kernel, (x,), block_sizes=[128]), expected(x))


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("kernel, expected", [
    (fresh_accumulator_in_the_loop, lambda x: x.sum(1)),
    (running_best, _torch_running_best),
])
def test_inner_loop_updates_no_other_live_name_sees_run(kernel, expected, loop_type, run):
    x = torch.randn(16, 256)
    out = RUNS[run](kernel, (x,), block_sizes=[8, 128], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected(x), rtol=1e-5, atol=1e-4)


def test_the_refused_forms_ran_before_as_values():
    """What the refusal replaces: the snapshot keeps the old value (the rebinding spelling
    still does, and lowers), where torch's in-place `+=` would change it."""
    x = torch.randn(16, 256)
    _, out = pallasite.testing.code_and_output(snapshot_rebound, (x,), block_sizes=[8, 128])
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-4)
    pallasite.testing.check_tpu_lowering(snapshot_rebound, (x,), block_sizes=[8, 128])


@pallasite.kernel
def snapshot_rebound(x):
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        first = acc
        for tn in hl.tile(n):
            acc = acc + x[tm, tn].sum(1)
        out[tm] = first + acc
    return out


def _accumulate(acc, block):
    acc += block.sum(1)
    return acc


@pallasite.kernel
def helper_result_rebinds_its_argument(x):
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tn in hl.tile(n):
            acc = _accumulate(acc, x[tm, tn])
        out[tm] = acc
    return out


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_helper_updating_a_value_its_caller_rebinds_runs(loop_type, run):
    """Helion's helper form `acc = accum(acc, blk)` with `acc += ...` inside: the caller's
    old value dies with the call, so no name sees the difference. Reference mode refused it
    (torch hands `v += w` to its mode as `add_`, like `v.add_(w)`; trial P): it reads the
    helper's running instruction now."""
    x = torch.randn(16, 256)
    out = RUNS[run](helper_result_rebinds_its_argument, (x,), block_sizes=[8, 128], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-4)


def _add_in_place(acc, block):
    return acc.add_(block.sum(1))


@pallasite.kernel
def helper_calls_an_in_place_method(x):
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tn in hl.tile(n):
            acc = _add_in_place(acc, x[tm, tn])
        out[tm] = acc
    return out


@pytest.mark.parametrize("run", RUNS)
def test_an_in_place_method_in_a_helper_stays_refused(run):
    with pytest.raises(exc.UnsupportedOperation, match="add_"):
        RUNS[run](helper_calls_an_in_place_method, (torch.randn(16, 256),), block_sizes=[8, 128])


# ----------------------------------------------------------------------------- views --


@pallasite.kernel
def column_view_then_update(x):
    out = torch.empty([x.size(0)], dtype=x.dtype)
    for t in hl.tile(x.size(0)):
        a = x[t, :]
        column = a[:, 0]
        a += 5
        out[t] = column
    return out


@pallasite.kernel
def update_through_a_view(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        a = x[t, :]
        flat = a.T.reshape(-1)
        flat *= 2
        out[t, :] = a
    return out


@pallasite.kernel
def same_dtype_cast_then_update(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        a = x[t, :]
        b = a.float()
        a -= 1
        out[t, :] = b
    return out


@pallasite.kernel
def unpacked_views_then_update(x):
    out = torch.empty([x.size(0), 2], dtype=x.dtype)
    for t in hl.tile(x.size(0)):
        a = x[t, :]
        first, second = a[:, 0], a[:, 1]
        a += 1
        out[t, 0] = first
        out[t, 1] = second
    return out


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("kernel, words, line", [
    (unpacked_views_then_update, "`a \\+= 1` would change `first` too", "a += 1"),
    # torch: the column is a view of `a`, so it reads a + 5; pallasite read the old column (trial P)
    (column_view_then_update, "`a \\+= 5` would change `column` too", "a += 5"),
    (update_through_a_view, "`flat \\*= 2` would change `a` too", "flat *= 2"),
    (same_dtype_cast_then_update, "`a -= 1` would change `b` too", "a -= 1"),
])
def test_an_update_a_view_would_see_is_refused(kernel, words, line, run):
    with pytest.raises(exc.UnsupportedOperation, match=words) as error:
        RUNS[run](kernel, (torch.randn(16, 128),), block_sizes=[8])
    assert_points_at(error.value, kernel, line)


@pallasite.kernel
def views_that_do_not_see_the_update(x):
    out = torch.empty([x.size(0), 4], dtype=torch.float32)
    for t in hl.tile(x.size(0)):
        a = x[t, :]
        first, second = a[:, 0], a[:, 1]  # siblings: `first *= 2` leaves `second` as it was
        kept = a[:, 2].clone()
        widened = a.to(torch.bfloat16)  # another dtype: a copy
        first *= 2
        out[t, 0] = first
        out[t, 1] = second
        out[t, 2] = kept
        out[t, 3] = widened[:, 3].float()
    return out


@pytest.mark.parametrize("run", RUNS)
def test_siblings_copies_and_casts_run(run):
    x = torch.randn(16, 128)
    out = RUNS[run](views_that_do_not_see_the_update, (x,), block_sizes=[8])
    expected = torch.stack([x[:, 0] * 2, x[:, 1], x[:, 2], x[:, 3].to(torch.bfloat16).float()], 1)
    torch.testing.assert_close(out, expected)


# ---------------------------------------------- names a device `if` or a tuple shares --


@pallasite.kernel
def shared_under_a_device_if(x, flags):
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in hl.tile([m, n]):
        a = x[tm, tn] * 1.0
        b = a * 3
        if flags[tn.id] > 0:
            b = a
        a += 1
        out[tm, tn] = b
    return out


@pallasite.kernel
def snapshot_under_an_if_in_the_loop(x, flags):
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        snap = hl.zeros([tm], dtype=torch.float32)
        for tn in hl.tile(n):
            if flags[tn.id] > 0:
                snap = acc
            acc += x[tm, tn].sum(1)
        out[tm] = snap
    return out


@pallasite.kernel
def held_in_a_tuple(x, flags):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        a = x[t, :] * 1.0
        pair = (a, 2.0)
        a += 1
        out[t, :] = pair[0]
    return out


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("kernel, words, line", [
    # compiled, b kept a's old value where the branch ran (torch: 2.0, compiled 1.0; trial R)
    (shared_under_a_device_if, "`a \\+= 1` would change `b` too", "a += 1"),
    (snapshot_under_an_if_in_the_loop, "would change `snap` too", "acc += x[tm, tn].sum(1)"),
    (held_in_a_tuple, "`a \\+= 1` would change `pair` too", "a += 1"),
])
def test_an_update_a_merged_name_or_a_container_would_see_is_refused(kernel, words, line, run):
    x, flags = torch.ones(8, 384), torch.tensor([0, 1, 0], dtype=torch.int32)
    with pytest.raises(exc.UnsupportedOperation, match=words) as error:
        RUNS[run](kernel, (x, flags), block_sizes=[8, 128])
    assert_points_at(error.value, kernel, line)


# ------------------------------------------- function forms of views; a container's item --


@pallasite.kernel
def function_form_view(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        a = x[t, :] * 1.0
        c = torch.reshape(a, (-1, x.size(1)))
        a += 1
        out[t, :] = c
    return out


@pallasite.kernel
def update_through_a_function_form_view(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        a = x[t, :] * 1.0
        c = torch.transpose(a, 0, 1)
        c += 1
        out[t, :] = a
    return out


@pallasite.kernel
def same_type_then_update(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        a = x[t, :] * 1.0
        c = a.type(torch.float32)
        a += 1
        out[t, :] = c
    return out


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("kernel, words", [
    # torch.reshape(a, ...) is a.reshape(...): both modes kept the old value (trial T)
    (function_form_view, "`a \\+= 1` would change `c` too"),
    (update_through_a_function_form_view, "`c \\+= 1` would change `a` too"),
    (same_type_then_update, "`a \\+= 1` would change `c` too"),
])
def test_function_forms_of_views_are_views(kernel, words, run):
    with pytest.raises(exc.UnsupportedOperation, match=words):
        RUNS[run](kernel, (torch.randn(16, 128),), block_sizes=[8])


def _add_to(acc, v):
    acc += v
    return acc


@pallasite.kernel
def items_updated_in_their_container(x, y):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        accs = [x[t] * 1.0, y[t] * 1.0]
        accs[0] += 1
        named = {"a": x[t] * 1.0}
        named["a"] += y[t]
        accs[1] = _add_to(accs[1], x[t])
        out[t] = accs[0] + accs[1] + named["a"]
    return out


@pytest.mark.parametrize("run", RUNS)
def test_an_item_updated_in_its_own_container_runs(run):
    """`accs[0] += 1` puts the new value in `accs` itself: no holder keeps the old one (trial T:
    refused, saying it would change `accs`)."""
    x, y = torch.randn(300), torch.randn(300)
    out = RUNS[run](items_updated_in_their_container, (x, y), block_sizes=[128])
    torch.testing.assert_close(out, (x + 1) + (y + x) + (x + y))
