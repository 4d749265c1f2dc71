"""`pallas_loop_type="outer_pipeline"`: a device loop's last inner loop folded into its grid
(plan/folded_loops.py). Each folded tile is a program, so Pallas' pipeline overlaps the next
tile's copies (the next row's too) with this one's compute; the statements before the loop
run at every step and must only compute. Checked against torch and reference mode, lowered
for every chip (conftest); loops that cannot fold are `exc.BackendUnsupported` at their line."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref
from test_grid_step import copy_even_rows  # a stepped outer grid (Helion's form)

FOLD = "outer_pipeline"


@pallasite.kernel
def scale_by_row(x):
    """A prologue computed from the outer tile, read in the folded body."""
    out = torch.zeros_like(x)
    for row in hl.tile(x.size(0)):
        scale = (row.index + 1).to(torch.float32)
        for col in hl.tile(x.size(1)):
            out[row, col] = x[row, col] * scale[:, None]
    return out


@pytest.mark.parametrize("shape, blocks", [((16, 256), [8, 128]), ((13, 300), [8, 128])])
def test_a_folded_loop_is_a_grid_axis(shape, blocks):
    x = torch.randn(*shape)
    expected = x * (torch.arange(shape[0]) + 1)[:, None]
    code, out = code_and_output(scale_by_row, (x,), block_sizes=blocks, pallas_loop_type=FOLD)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(scale_by_row, (x,)), expected)
    assert "the inner loop folded into the grid (outer_pipeline)" in code
    plan = scale_by_row.bind((x,)).plan({"block_sizes": blocks, "pallas_loop_type": FOLD})
    (call,) = plan.calls
    assert [axis.dim.name for axis in call.grid] == ["row", "col"] and not call.inner_loops


@pallasite.kernel
def add_sequence_bias(x, bias):
    """Helion's form: a block read once per outer index (its index map ignores the folded
    axis), added at every folded step."""
    s, n, d = x.shape
    out = torch.zeros_like(x)
    for seq in hl.grid(s):
        bias_blk = bias[seq, :]
        for tile in hl.tile(n):
            out[seq, tile, :] = x[seq, tile, :] + bias_blk[None, :]
    return out


def test_prologue_blocks_and_stepped_outer_grids():
    x, bias = torch.randn(3, 24, 128), torch.randn(3, 128)
    expected = x + bias[:, None, :]
    _, out = code_and_output(add_sequence_bias, (x, bias), block_sizes=[8], pallas_loop_type=FOLD)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(add_sequence_bias, (x, bias)), expected)
    x = torch.randn(7, 16, 128)
    expected = torch.zeros_like(x)
    expected[0::2] = x[0::2]
    _, out = code_and_output(copy_even_rows, (x,), block_sizes=[8], pallas_loop_type=FOLD)
    torch.testing.assert_close(out, expected)


@pallasite.kernel
def matmul_k_inside(a, b):
    """The folded loop holds a loop of its own, which keeps its loop type."""
    m, k = a.shape
    n = b.size(1)
    out = torch.empty([m, n], dtype=torch.float32)
    for tm in hl.tile(m):
        for tn in hl.tile(n):
            acc = hl.zeros([tm, tn], dtype=torch.float32)
            for tk in hl.tile(k):
                acc = acc + torch.matmul(a[tm, tk], b[tk, tn])
            out[tm, tn] = acc
    return out


@pytest.mark.parametrize("inner", LOOP_TYPES)
def test_a_folded_loop_holding_a_loop_under_each_loop_type(inner):
    a, b = torch.randn(16, 256), torch.randn(256, 384)
    _, out = code_and_output(matmul_k_inside, (a, b), block_sizes=[8, 128, 128], pallas_loop_type=[FOLD, inner])
    torch.testing.assert_close(out, a @ b, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(run_ref(matmul_k_inside, (a, b)), a @ b, rtol=1e-4, atol=1e-4)


@pallasite.kernel
def row_sums_in_place(x, out):
    """Each folded step adds into a block the folded axis does not index: the steps of one
    row revisit it, in order."""
    for row in hl.tile(x.size(0)):
        for col in hl.tile(x.size(1)):
            out[row] = out[row] + x[row, col].sum(-1)
    return out


def test_folded_steps_revisiting_a_block_run_in_order():
    x, out = torch.randn(16, 512), torch.randn(16)
    expected = out + x.sum(-1)
    ref_out = out.clone()
    _, result = code_and_output(row_sums_in_place, (x, out), block_sizes=[8, 128], pallas_loop_type=FOLD)
    torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(run_ref(row_sums_in_place, (x, ref_out)), expected, rtol=1e-5, atol=1e-4)


@pallasite.kernel
def carries(x):
    out = torch.empty_like(x)
    for row in hl.tile(x.size(0)):
        acc = hl.zeros([row, 128], dtype=torch.float32)
        for col in hl.tile(x.size(1), block_size=128):
            acc = acc + x[row, col]
            out[row, col] = acc
    return out


@pallasite.kernel
def stores_after(x):
    out = torch.zeros_like(x)
    for row in hl.tile(x.size(0)):
        for col in hl.tile(x.size(1)):
            out[row, col] = x[row, col]
        out[row, 0] = x[row, 0] * 2
    return out


@pallasite.kernel
def stores_before(x):
    out = torch.zeros_like(x)
    for row in hl.tile(x.size(0)):
        out[row, 0] = x[row, 0] * 2
        for col in hl.tile(x.size(1)):
            out[row, col] = out[row, col] + x[row, col]
    return out


@pallasite.kernel
def reads_what_it_writes(x):
    out = torch.zeros_like(x)
    for row in hl.tile(x.size(0)):
        first = out[row, 0]
        for col in hl.tile(x.size(1)):
            out[row, col] = x[row, col] + first[:, None]
    return out


@pallasite.kernel
def two_loops(x):
    out = torch.zeros_like(x)
    for row in hl.tile(x.size(0)):
        for col in hl.tile(x.size(1)):
            out[row, col] = x[row, col]
        for col in hl.tile(x.size(1)):
            out[row, col] = out[row, col] * 2
    return out


@pallasite.kernel
def data_bound(x, ends):
    out = torch.zeros_like(x)
    for row in hl.tile(x.size(0)):
        end = ends[0]
        for col in hl.tile(0, end):
            out[row, col] = x[row, col]
    return out


@pytest.mark.parametrize("kernel, args, blocks, why, line", [
    (carries, (), [8], "carries 'acc'", "for col in hl.tile(x.size(1), block_size=128):"),
    (stores_after, (), [8, 128], "must be the last statement", "for col in hl.tile(x.size(1)):"),
    (stores_before, (), [8, 128], "store into 'out'", "for col in hl.tile(x.size(1)):"),
    (reads_what_it_writes, (), [8, 128], "read 'out'", "for col in hl.tile(x.size(1)):"),
    (two_loops, (), [8, 128, 128], "holds 2", "for col in hl.tile(x.size(1)):"),
    (data_bound, (torch.tensor([200], dtype=torch.int32),), [8, 128], "compile-time ints",
     "for col in hl.tile(0, end):"),
])
def test_loops_that_cannot_fold_are_refused_at_their_line(kernel, args, blocks, why, line):
    x = torch.randn(16, 256)
    with pytest.raises(exc.BackendUnsupported, match=why) as error:
        code_and_output(kernel, (x, *args), block_sizes=blocks, pallas_loop_type=FOLD)
    assert line in str(error.value) and "Use another loop type" in str(error.value)
    code_and_output(kernel, (x, *args), block_sizes=blocks, pallas_loop_type="emit_pipeline")  # another runs it


def test_the_autotuner_never_picks_it():
    x = torch.randn(16, 256)
    genes = scale_by_row.bind((x,)).config_spec.genes()
    choices = {value for gene in genes if gene.path[0] == "pallas_loop_type" for value in gene.choices}
    assert choices == set(LOOP_TYPES) and FOLD not in choices
    with pytest.raises(exc.InvalidConfig, match="outer_pipeline"):
        code_and_output(scale_by_row, (x,), pallas_loop_type="outer_pipelin")


@pallasite.kernel
def column_sums(x, acc):
    m, n = x.shape
    for tm in hl.tile(m):
        for tn in hl.tile(n):
            acc[tn] = acc[tn] + x[tm, tn].sum(0)
    return acc


def test_a_block_the_fold_would_revisit_out_of_order_names_the_fold():
    """Folding tn makes it a grid axis inside tm: acc's blocks, indexed by tn only, would be
    revisited across tm. The refusal says folding caused it; fori_loop runs the kernel."""
    x, acc = torch.randn(37, 300), torch.randn(300)
    with pytest.raises(exc.BackendUnsupported, match="folding 'tn' into the grid") as error:
        code_and_output(column_sums, (x, acc.clone()), block_sizes=[8, 128], pallas_loop_type=FOLD)
    assert "Use another loop type" in str(error.value) and "acc[tn] = acc[tn]" in str(error.value)
    _, out = code_and_output(column_sums, (x, acc.clone()), block_sizes=[8, 128], pallas_loop_type="fori_loop")
    torch.testing.assert_close(out, acc + x.sum(0), rtol=1e-5, atol=1e-4)
