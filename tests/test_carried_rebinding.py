"""Carried values that rebind each other in an inner loop (`tmp = a; a = b + s; b = tmp`),
and Python numbers a loop's body updates from their own value.

An unrolled loop rebinds its carried variables at the end of each step; written one by one,
a result that reads another carried variable read its new value (trial P: the swap gave
384/384 where torch gives 256/128, `prev = acc` the final sum). A Python number counted in
a loop's body (`count += 1`) took one tile's update compiled (the body is traced once) and
every tile's in reference mode: refused in both."""
from __future__ import annotations

import types

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref

from source_lines import assert_points_at


@pallasite.kernel
def swap_through_tmp(x):
    m, n = x.shape
    first = torch.empty([m], dtype=torch.float32)
    second = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        a = hl.zeros([tm], dtype=torch.float32)
        b = hl.zeros([tm], dtype=torch.float32)
        for tn in hl.tile(n):
            tmp = a
            a = b + x[tm, tn].sum(1)
            b = tmp
        first[tm] = a
        second[tm] = b
    return first, second


@pallasite.kernel
def previous_sums(x):
    m, n = x.shape
    out = torch.empty([m, 3], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        prev = acc
        older = acc
        for tn in hl.tile(n):
            older = prev
            prev = acc
            acc = acc + x[tm, tn].sum(1)
        out[tm, 0] = acc
        out[tm, 1] = prev
        out[tm, 2] = older
    return out


@pallasite.kernel
def block_difference(x):
    m, n = x.shape
    out = torch.empty([m, 128], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm, 128], dtype=torch.float32)
        old = acc
        for tn in hl.tile(n):
            old = acc
            acc = acc + x[tm, tn]
        out[tm, :] = acc - old
    return out


def _swap(x):
    sums = x.reshape(x.shape[0], -1, 128).sum(2)
    a = torch.zeros(x.shape[0])
    b = torch.zeros(x.shape[0])
    for step in range(sums.shape[1]):
        a, b = b + sums[:, step], a
    return a, b


def _previous(x):
    running = x.reshape(x.shape[0], -1, 128).sum(2).cumsum(1)
    padded = torch.cat([torch.zeros(x.shape[0], 2), running], 1)
    return torch.stack([padded[:, -1], padded[:, -2], padded[:, -3]], 1)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("kernel, expected", [
    (swap_through_tmp, _swap),
    (previous_sums, _previous),
    (block_difference, lambda x: x[:, -128:]),
])
def test_carried_values_rebinding_each_other(kernel, expected, loop_type):
    x = torch.randn(16, 384)
    _, out = code_and_output(kernel, (x,), block_sizes=[8, 128], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected(x), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(run_ref(kernel, (x,), block_sizes=[8, 128], pallas_loop_type=loop_type),
                               expected(x), rtol=1e-5, atol=1e-4)


def test_an_unrolled_swap_rebinds_at_once():
    code, _ = code_and_output(swap_through_tmp, (torch.randn(16, 384),), block_sizes=[8, 128],
                              pallas_loop_type="unroll")
    assert "a, b = (a_1, a)" in code


@pallasite.kernel
def tiles_counted_in_python(x):
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        count = 0
        for tn in hl.tile(n):
            acc = acc + x[tm, tn].sum(1)
            count += 1
        out[tm] = acc / count
    return out


@pallasite.kernel
def programs_counted_in_python(x):
    out = torch.empty_like(x)
    scale = 0.0
    for t in hl.tile(x.size(0)):
        scale = scale + 1.0
        out[t] = x[t] * scale
    return out


@pytest.mark.parametrize("run", ["compiled", "reference"])
@pytest.mark.parametrize("kernel, args, words, line", [
    (tiles_counted_in_python, (torch.randn(16, 384),), "'count' is the Python int 0 before this loop",
     "for tn in hl.tile(n):"),
    (programs_counted_in_python, (torch.randn(384),), "'scale' is the Python float 0.0 before this loop",
     "for t in hl.tile(x.size(0)):"),
])
def test_a_python_number_counted_per_tile_is_refused(kernel, args, words, line, run):
    """Compiled gave 384 for the mean of ones (count stuck at 1) and scaled every program by
    1; reference mode counted."""
    with pytest.raises(exc.UnsupportedOperation, match=words) as error:
        if run == "compiled":
            code_and_output(kernel, args, block_sizes=[8, 128] if len(args[0].shape) == 2 else [128])
        else:
            run_ref(kernel, args, block_sizes=[8, 128] if len(args[0].shape) == 2 else [128])
    assert_points_at(error.value, kernel, line)


# ------------------------------------------- values that leave a loop through a container --


@pallasite.kernel
def parts_in_a_list(x):
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        parts = []
        for tn in hl.tile(n):
            parts.append(x[tm, tn].sum(1))
        total = parts[0]
        for part in parts[1:]:
            total = total + part
        out[tm] = total
    return out


@pallasite.kernel
def accumulators_in_a_list(x):
    m, n = x.shape
    out = torch.empty([m, 2], dtype=torch.float32)
    for tm in hl.tile(m):
        accs = [hl.zeros([tm], dtype=torch.float32), hl.zeros([tm], dtype=torch.float32)]
        for tn in hl.tile(n):
            accs[0] = accs[0] + x[tm, tn].sum(1)
            accs[1] = accs[1] + x[tm, tn].amax(1)
        out[tm, 0] = accs[0]
        out[tm, 1] = accs[1]
    return out


@pytest.mark.parametrize("run", ["compiled", "reference"])
@pytest.mark.parametrize("kernel, name", [(parts_in_a_list, "parts"), (accumulators_in_a_list, "accs")])
def test_values_a_container_takes_out_of_a_loop_are_refused(kernel, name, run):
    """Reference mode ran the list of parts (trial P), compiled refused it naming `total` at a
    later line; both refuse it at the loop now, saying why."""
    x = torch.randn(16, 384)
    with pytest.raises(exc.UnsupportedOperation, match=f"'{name}' collects values computed inside this loop") \
            as error:
        if run == "compiled":
            code_and_output(kernel, (x,), block_sizes=[8, 128])
        else:
            run_ref(kernel, (x,), block_sizes=[8, 128])
    assert_points_at(error.value, kernel, "for tn in hl.tile(n):")


@pallasite.kernel
def through_a_column_view(x):
    column = x[:, 1]
    for t in hl.tile(x.size(0)):
        column[t] = column[t] * 10
    return x


@pallasite.kernel
def doubled_in_place(x):
    for t in hl.tile(x.size(0)):
        x[t, :] = x[t, :] * 2
    return x


def test_a_write_through_a_host_view_is_refused_in_both_modes_and_an_argument_view_is_written():
    """Compiled refuses a device write into a part of another tensor taken in host code;
    reference mode wrote it (trial P). A view the caller passes is the kernel's argument."""
    for run in (lambda k, a: code_and_output(k, a, block_sizes=[8]), lambda k, a: run_ref(k, a, block_sizes=[8])):
        with pytest.raises(exc.UnsupportedOperation, match="'column', a getitem view of 'x'"):
            run(through_a_column_view, (torch.ones(8, 128),))
    base = torch.ones(16, 256)
    run_ref(doubled_in_place, (base[:, :128],), block_sizes=[8])
    assert torch.equal(base[:, :128], torch.full((16, 128), 2.0)) and torch.equal(base[:, 128:], torch.ones(16, 128))
    compiled_base = torch.ones(16, 256)
    code_and_output(doubled_in_place, (compiled_base[:, :128],), block_sizes=[8])
    assert torch.equal(compiled_base, base)


# -------------------------------------------------- Python state counted in containers --


@pallasite.kernel
def counted_in_a_list(x):
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        count = [0]
        for tn in hl.tile(n):
            count[0] += 1
            acc = acc + x[tm, tn].sum(1) * count[0]
        out[tm] = acc
    return out


@pallasite.kernel
def counted_in_an_object(x):
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        state = types.SimpleNamespace(count=0)
        for tn in hl.tile(n):
            state.count = state.count + 1
            acc = acc + x[tm, tn].sum(1) * state.count
        out[tm] = acc
    return out


@pallasite.kernel
def programs_counted_in_a_dict(x):
    m, n = x.shape
    out = torch.empty_like(x)
    seen = {"programs": 0}
    for tm, tn in hl.tile([m, n]):
        seen["programs"] += 1
        out[tm, tn] = x[tm, tn] * seen["programs"]
    return out


@pallasite.kernel
def a_setting_kept_in_a_dict(x):
    m, n = x.shape
    out = torch.empty_like(x)
    settings = {"scale": 1.0}
    for tm in hl.tile(m):
        for tn in hl.tile(n):
            settings["scale"] = 2.0
            out[tm, tn] = x[tm, tn] * settings["scale"]
    return out


@pytest.mark.parametrize("run", ["compiled", "reference"])
@pytest.mark.parametrize("kernel, name, line", [
    (counted_in_a_list, "count", "for tn in hl.tile(n):"),
    (counted_in_an_object, "state", "for tn in hl.tile(n):"),
    (programs_counted_in_a_dict, "seen", "for tm, tn in hl.tile([m, n]):"),
])
def test_python_state_a_container_counts_per_tile_is_refused(kernel, name, line, run):
    """Compiled took one tile's update (384 where torch gives 768), reference mode every
    tile's (trial R)."""
    x = torch.ones(16, 384)
    with pytest.raises(exc.UnsupportedOperation, match=f"'{name}' holds Python numbers the loop's body updates"):
        if run == "compiled":
            code_and_output(kernel, (x,), block_sizes=[8, 128])
        else:
            run_ref(kernel, (x,), block_sizes=[8, 128])


def test_a_value_a_container_is_set_to_runs():
    x = torch.randn(16, 384)
    _, out = code_and_output(a_setting_kept_in_a_dict, (x,), block_sizes=[8, 128])
    torch.testing.assert_close(out, x * 2)
    torch.testing.assert_close(run_ref(a_setting_kept_in_a_dict, (x,), block_sizes=[8, 128]), x * 2)


@pallasite.kernel
def tiles_as_a_list(x, scale: int):
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):  # a list of one tile per dim
        out[tile] = x[tile] * scale
    return out


@pallasite.kernel
def inner_tiles_as_a_list(x):
    out = torch.empty_like(x)
    for tm in hl.tile(x.size(0)):
        for tiles in hl.tile([x.size(1)]):
            out[tm, tiles] = x[tm, tiles] * 2
    return out


@pytest.mark.parametrize("run", ["compiled", "reference"])
def test_a_loop_variable_holding_tiles_is_not_a_collected_value(run):
    """`for tile in hl.tile(out.size())` binds a list of tiles (Helion's affine test): the
    first version of the collected-values check refused it."""
    x, y = torch.randn(1024), torch.randn(16, 256)
    if run == "compiled":
        out, inner = code_and_output(tiles_as_a_list, (x, 3))[1], code_and_output(inner_tiles_as_a_list, (y,))[1]
    else:
        out, inner = run_ref(tiles_as_a_list, (x, 3)), run_ref(inner_tiles_as_a_list, (y,))
    torch.testing.assert_close(out, x * 3)
    torch.testing.assert_close(inner, y * 2)


@pallasite.kernel
def containers_built_in_the_body(x):
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in hl.tile([m, n]):
        index = (tm, tn)
        a = x[index]
        pair = (a * 1, a * 2)
        named = {"a": a * 2}
        out[index] = pair[0] + pair[1] + named["a"] + torch.max(a, dim=1).values[:, None] * 0
    return out


@pallasite.kernel
def parts_of_a_static_range(x):
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tn in hl.tile(n):
            parts = []
            for k in hl.static_range(2):
                parts.append(x[tm, tn][:, k * 64:(k + 1) * 64].sum(1))
            moments = torch.var_mean(x[tm, tn], dim=1)
            acc = acc + parts[0] + parts[1] + moments[1] * 0
        out[tm] = acc
    return out


@pytest.mark.parametrize("run", ["compiled", "reference"])
def test_containers_the_body_builds_are_its_own(run):
    """Tuples, lists and dicts a loop's body builds and reads in the same tile run (trial S:
    the first collected-values check refused every one, Helion's add example included)."""
    x = torch.randn(16, 256)
    results = []
    for kernel in (containers_built_in_the_body, parts_of_a_static_range):
        results.append(code_and_output(kernel, (x,), block_sizes=[8, 128])[1] if run == "compiled"
                       else run_ref(kernel, (x,), block_sizes=[8, 128]))
    torch.testing.assert_close(results[0], x * 5)
    torch.testing.assert_close(results[1], x.sum(1), rtol=1e-5, atol=1e-4)
