"""int64 outputs (plan/widened_outputs.py): a host allocation in torch's default integer
type, which Helion programs fill with indices (argmax, labels, positions), is held as int32
and returned widened to int64, where that is exact; where the narrowing would show, it is
refused at the user's line."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.config import FOLDED_LOOP_TYPE
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel
def running_argmax(x):
    """The column of each row's largest value, over an inner loop, and the row's position."""
    m, n = x.size()
    best_at = torch.empty([m], dtype=torch.long, device=x.device)
    rows = torch.zeros([m, 2], dtype=torch.int64, device=x.device)
    for tm in hl.tile(m):
        best = hl.full([tm], float("-inf"), dtype=torch.float32)
        at = hl.zeros([tm], dtype=torch.int32)
        for tn in hl.tile(n):
            block = x[tm, tn]
            local = torch.argmax(block, dim=1)
            value = torch.amax(block, dim=1)
            better = value > best
            at = torch.where(better, local + tn.begin, at)
            best = torch.where(better, value, best)
        best_at[tm] = at
        rows[tm, 0] = tm.index
    return best_at, rows


@pytest.mark.parametrize("loop_type", [*LOOP_TYPES, FOLDED_LOOP_TYPE])
def test_argmax_indices_return_as_int64(loop_type):
    x = torch.randn(40, 300, generator=torch.Generator().manual_seed(0))
    config = {"block_sizes": [16, 128], "pallas_loop_type": loop_type}
    _, (best_at, rows) = code_and_output(running_argmax, (x,), **config)
    assert best_at.dtype == rows.dtype == torch.int64
    torch.testing.assert_close(best_at, torch.argmax(x, dim=1))
    torch.testing.assert_close(rows, torch.stack([torch.arange(40), torch.zeros(40, dtype=torch.long)], 1))
    ref_best, ref_rows = run_ref(running_argmax, (x,), **config)
    torch.testing.assert_close(ref_best, best_at)
    torch.testing.assert_close(ref_rows, rows)
    check_tpu_lowering(running_argmax, (x,), **config)


@pallasite.kernel
def labels_like(labels, x):
    out = torch.empty_like(labels)  # int64, as the caller's labels
    for t in hl.tile(labels.size(0)):
        out[t] = labels[t].to(torch.int32) * 2 + (x[t] > 0).to(torch.int32)
    return out


def test_empty_like_an_int64_argument_returns_int64():
    labels, x = torch.arange(-10, 90), torch.randn(100)
    out = labels_like(labels, x)
    assert out.dtype == torch.int64
    torch.testing.assert_close(out, labels * 2 + (x > 0).long())


@pallasite.kernel
def read_back(x):
    counts = torch.zeros([x.size(0)], dtype=torch.long, device=x.device)
    for t in hl.tile(x.size(0)):
        counts[t] = counts[t] + (x[t] > 0).to(torch.int32)
    return counts


@pallasite.kernel
def float_into_long(x):
    out = torch.empty([x.size(0)], dtype=torch.long, device=x.device)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] * 1e10
    return out


@pallasite.kernel
def host_view(x):
    out = torch.empty([x.size(0)], dtype=torch.long, device=x.device)
    for t in hl.tile(x.size(0)):
        out[t] = (x[t] > 0).to(torch.int32)
    return out.view(2, -1)


@pallasite.kernel
def huge_fill(x):
    out = torch.full([x.size(0)], 2**40, dtype=torch.long, device=x.device)
    for t in hl.tile(x.size(0)):
        out[t] = (x[t] > 0).to(torch.int32)
    return out


@pytest.mark.parametrize("kernel, what, line", [
    (read_back, "reads it in device code", "counts[t] = counts[t] + (x[t] > 0).to(torch.int32)"),
    (float_into_long, "stores float values", "out[t] = x[t] * 1e10"),
    (host_view, "host code uses it", "return out.view(2, -1)"),
    (huge_fill, "filled with 1099511627776, past int32", "out = torch.full("),
])
def test_where_int32_would_show_an_int64_output_is_refused_at_the_users_line(kernel, what, line):
    with pytest.raises(exc.UnsupportedDtype, match=f"is an int64 tensor.*{what}") as info:
        kernel(torch.randn(64))
    assert line in str(info.value)


@pallasite.kernel
def copied_labels(labels):
    """The values as read, stored as they are (torch's cast of each value, which fits int32)."""
    out = torch.empty_like(labels)
    small = torch.empty(labels.size(), dtype=torch.int16, device=labels.device)
    for t in hl.tile(labels.size(0)):
        out[t] = labels[t]
        small[t] = labels[t]
    return out, small


def test_int64_values_stored_as_read_are_copied():
    labels = torch.arange(-40_000, 40_000, 997)
    out, small = copied_labels(labels)
    assert out.dtype == torch.int64 and small.dtype == torch.int16
    torch.testing.assert_close(out, labels)
    torch.testing.assert_close(small, labels.to(torch.int16))  # wraps as torch's cast does


@pallasite.kernel
def plus_long_constant(x, counts):
    c = torch.tensor(5)  # int64, as torch makes it
    out = torch.empty_like(x)
    bumped = torch.empty_like(counts)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] + c
        bumped[t] = counts[t] + c  # int32 in torch too: a 0-d tensor does not promote
    return out, bumped


def test_an_int64_0d_constant_reads_as_torch_promotes_it():
    x, counts = torch.randn(100), torch.arange(100, dtype=torch.int32)
    out, bumped = plus_long_constant(x, counts)
    torch.testing.assert_close(out, x + 5)
    assert bumped.dtype == torch.int32
    torch.testing.assert_close(bumped, counts + torch.tensor(5))
