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
    assert [axis.dim.name for axis in call.grid] == ["row", "col"]
    assert [loop_plan.strategy for loop_plan in call.inner_loops.values()] == [FOLD]  # its grid steps


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
def reads_back_after(x):
    out = torch.zeros_like(x)
    for row in hl.tile(x.size(0)):
        for col in hl.tile(x.size(1)):
            out[row, col] = x[row, col]
        out[row, 0] = out[row, 0] * 2
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
    (stores_before, (), [8, 128], "store into 'out'", "for col in hl.tile(x.size(1)):"),
    (reads_what_it_writes, (), [8, 128], "read 'out'", "for col in hl.tile(x.size(1)):"),
    (reads_back_after, (), [8, 128], "after it read 'out'", "for col in hl.tile(x.size(1)):"),
    (two_loops, (), [8, 128, 128], "holds 2", "for col in hl.tile(x.size(1)):"),
    (data_bound, (torch.tensor([200], dtype=torch.int32),), [8, 128], "no compile-time bound",
     "for col in hl.tile(0, end):"),
])
def test_loops_that_cannot_fold_are_refused_at_their_line(kernel, args, blocks, why, line):
    x = torch.randn(16, 256)
    with pytest.raises(exc.BackendUnsupported, match=why) as error:
        code_and_output(kernel, (x, *args), block_sizes=blocks, pallas_loop_type=FOLD)
    assert line in str(error.value) and "Use another loop type" in str(error.value)
    code_and_output(kernel, (x, *args), block_sizes=blocks, pallas_loop_type="emit_pipeline")  # another runs it


def test_the_autotuner_offers_it_to_the_loops_that_may_fold():
    """A loop directly in its device loop's body may fold; one nested in another may not."""
    x = torch.randn(16, 256)
    genes = scale_by_row.bind((x,)).config_spec.genes()
    choices = [gene.choices for gene in genes if gene.path[0] == "pallas_loop_type"]
    assert choices == [(*LOOP_TYPES, FOLD)]
    a, b = torch.randn(16, 256), torch.randn(256, 384)
    genes = matmul_k_inside.bind((a, b)).config_spec.genes()
    choices = [gene.choices for gene in genes if gene.path[0] == "pallas_loop_type"]
    assert choices == [(*LOOP_TYPES, FOLD), tuple(LOOP_TYPES)]  # the tn loop, then tk inside it
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


# ------------------------------------------------------- values carried across the folded steps --

@pallasite.kernel
def running_sums(x):
    """A carried value read and written at every folded step (a scan over column tiles)."""
    out = torch.empty_like(x)
    for row in hl.tile(x.size(0)):
        acc = hl.zeros([row, 128], dtype=torch.float32)
        for col in hl.tile(x.size(1), block_size=128):
            acc = acc + x[row, col]
            out[row, col] = acc
    return out


def _running_sums(x):
    padded = torch.nn.functional.pad(x, (0, -x.size(1) % 128))
    blocks = padded.reshape(x.size(0), -1, 128).cumsum(1).reshape(x.size(0), -1)
    return blocks[:, :x.size(1)]


@pallasite.kernel
def stores_after(x):
    """The statement after the folded loop runs at its last step, into a block every step
    of the row revisits."""
    out = torch.zeros_like(x)
    for row in hl.tile(x.size(0)):
        for col in hl.tile(x.size(1)):
            out[row, col] = x[row, col]
        out[row, 0] = x[row, 0] * 2
    return out


@pallasite.kernel
def flash_attention(q, k, v):
    """Online softmax: m, l and acc carried across the key tiles, the output written after."""
    bh, s, d = q.shape
    out = torch.empty_like(q)
    for tb, tq in hl.tile([bh, s]):
        qb = q[tb, tq, :] * (d ** -0.5)
        m_i = hl.full([tb, tq], float("-inf"), dtype=torch.float32)
        l_i = hl.zeros([tb, tq], dtype=torch.float32)
        acc = hl.zeros([tb, tq, d], dtype=torch.float32)
        for tk in hl.tile(s):
            scores = torch.bmm(qb, k[tb, tk, :].transpose(1, 2))
            m_new = torch.maximum(m_i, scores.amax(-1))
            p = torch.exp(scores - m_new[:, :, None])
            alpha = torch.exp(m_i - m_new)
            l_i = l_i * alpha + p.sum(-1)
            acc = acc * alpha[:, :, None] + torch.bmm(p.to(v.dtype), v[tb, tk, :])
            m_i = m_new
        out[tb, tq, :] = (acc / l_i[:, :, None]).to(out.dtype)
    return out


@pallasite.kernel
def matmul_k_folded(a, b):
    m, k = a.shape
    n = b.size(1)
    out = torch.empty([m, n], dtype=torch.float32)
    for tm, tn in hl.tile([m, n]):
        acc = hl.zeros([tm, tn], dtype=torch.float32)
        for tk in hl.tile(k):
            acc = acc + torch.matmul(a[tm, tk], b[tk, tn])
        out[tm, tn] = acc
    return out


@pallasite.kernel
def normalize_long_rows(x):
    """Two passes over long rows: the folded loop carries the row's sums, the loop after it
    (at the last step, of its own loop type) writes the normalized row."""
    m, n = x.shape
    out = torch.empty_like(x)
    for row in hl.tile(m):
        total = hl.zeros([row], dtype=torch.float32)
        squares = hl.zeros([row], dtype=torch.float32)
        for col in hl.tile(n):
            blk = x[row, col]
            total = total + blk.sum(-1)
            squares = squares + (blk * blk).sum(-1)
        mean = total / n
        rstd = torch.rsqrt(squares / n - mean * mean + 1e-5)
        for col2 in hl.tile(n):
            out[row, col2] = (x[row, col2] - mean[:, None]) * rstd[:, None]
    return out


@pytest.mark.parametrize("shape", [(16, 512), (13, 300)])
def test_values_carried_across_folded_steps(shape):
    x = torch.randn(*shape)
    code, out = code_and_output(running_sums, (x,), block_sizes=[8], pallas_loop_type=FOLD)
    torch.testing.assert_close(out, _running_sums(x), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(run_ref(running_sums, (x,)), _running_sums(x), rtol=1e-5, atol=1e-4)
    assert "carried across its steps in VMEM scratch" in code and "@pl.when" in code
    (call,) = running_sums.bind((x,)).plan({"block_sizes": [8], "pallas_loop_type": FOLD}).calls
    assert [axis.semantics.value for axis in call.grid] == ["parallel", "arbitrary"]
    assert "'acc' carried from step to step" in call.grid[1].reason
    expected = x.clone()
    expected[:, 0] = x[:, 0] * 2
    code, out = code_and_output(stores_after, (x,), block_sizes=[8, 128], pallas_loop_type=FOLD)
    torch.testing.assert_close(out, expected)
    assert "at its last step" in code


@pytest.mark.parametrize("s, blocks", [(256, [2, 128, 128]), (200, [2, 64, 128])])
def test_flash_attention_with_the_key_axis_on_the_grid(s, blocks):
    q, k, v = (torch.randn(4, s, 128) for _ in range(3))
    expected = torch.softmax(q @ k.transpose(1, 2) / 128 ** 0.5, -1) @ v
    code, out = code_and_output(flash_attention, (q, k, v), block_sizes=blocks, pallas_loop_type=FOLD)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(run_ref(flash_attention, (q, k, v)), expected, rtol=1e-4, atol=1e-4)
    (call,) = flash_attention.bind((q, k, v)).plan({"block_sizes": blocks, "pallas_loop_type": FOLD}).calls
    assert [axis.semantics.value for axis in call.grid] == ["parallel", "parallel", "arbitrary"]
    assert len([s for s in call.scratch if s.name.endswith("_ref")]) == 3  # m_i, l_i, acc


def test_matmul_with_k_on_the_grid():
    a, b = torch.randn(24, 384), torch.randn(384, 256)
    _, out = code_and_output(matmul_k_folded, (a, b), block_sizes=[8, 128, 128], pallas_loop_type=FOLD)
    torch.testing.assert_close(out, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("after", LOOP_TYPES)
def test_a_loop_after_the_folded_one_runs_at_its_last_step(after):
    x = torch.randn(13, 300) * 3 + 1
    expected = torch.nn.functional.layer_norm(x, (300,), eps=1e-5)
    _, out = code_and_output(normalize_long_rows, (x,), block_sizes=[8, 128, 128],
                             pallas_loop_type=[FOLD, after])
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(run_ref(normalize_long_rows, (x,)), expected, rtol=1e-4, atol=1e-4)


@pallasite.kernel
def matmul_plus_one(a, b):
    m, k = a.shape
    n = b.size(1)
    out = torch.empty([m, n], dtype=torch.float32)
    for tm, tn in hl.tile([m, n]):
        acc = hl.zeros([tm, tn], dtype=torch.float32)
        for tk in hl.tile(k):
            acc = acc + a[tm, tk] @ b[tk, tn]
        out[tm, tn] = acc + 1.0
    return out


def test_a_folded_loop_without_a_tile_still_runs_what_follows_it():
    """K = 0: no folded step (a grid axis of 0 would run no program), the carried value keeps
    its initial value and the store after the loop runs (trial finding: it was skipped, the
    output left uninitialized)."""
    a, b = torch.randn(16, 0), torch.randn(0, 128)
    code, out = code_and_output(matmul_plus_one, (a, b), block_sizes=[8, 128, 128], pallas_loop_type=FOLD)
    torch.testing.assert_close(out, torch.ones(16, 128))
    assert "no tile at these sizes" in code and "pl.when" not in code
    a, b = torch.randn(16, 256), torch.randn(256, 128)
    _, out = code_and_output(matmul_plus_one, (a, b), block_sizes=[8, 128, 128], pallas_loop_type=FOLD)
    torch.testing.assert_close(out, a @ b + 1, rtol=1e-4, atol=1e-4)


@pallasite.kernel
def gemm_in_place(a, b, c):
    """C += A @ B with K on the grid: the statement after the loop reads and writes c, which
    only it writes (at the last step), so it reads c as it was."""
    m, k = a.shape
    n = b.size(1)
    for tm, tn in hl.tile([m, n]):
        acc = hl.zeros([tm, tn], dtype=torch.float32)
        for tk in hl.tile(k):
            acc = acc + a[tm, tk] @ b[tk, tn]
        c[tm, tn] = c[tm, tn] + acc
    return c


@pallasite.kernel
def row_sums_added_atomically(x, out):
    m, n = x.shape
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tn in hl.tile(n):
            acc = acc + x[tm, tn].sum(-1)
        hl.atomic_add(out, [tm], acc)
    return out


@pytest.mark.parametrize("shape", [(64, 256, 128), (40, 200, 136)])
def test_read_modify_write_after_the_folded_loop(shape):
    m, k, n = shape
    a, b, c = torch.randn(m, k), torch.randn(k, n), torch.randn(m, n)
    expected = c + a @ b
    _, out = code_and_output(gemm_in_place, (a, b, c.clone()), block_sizes=[32, 128, 128], pallas_loop_type=FOLD)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(run_ref(gemm_in_place, (a, b, c.clone())), expected, rtol=1e-4, atol=1e-3)
    x, base = torch.randn(m, k), torch.randn(m)
    _, out = code_and_output(row_sums_added_atomically, (x, base.clone()), block_sizes=[8, 128],
                             pallas_loop_type=FOLD)
    torch.testing.assert_close(out, base + x.sum(-1), rtol=1e-5, atol=1e-4)


@pallasite.kernel
def wide_running_max(x):
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.full([tm, 16384], float("-inf"), dtype=torch.float32)
        for tn in hl.tile(n):
            acc = torch.maximum(acc, x[tm, tn].amax(-1)[:, None])
        out[tm] = acc.amax(-1)
    return out


def test_a_carried_value_over_the_vmem_budget_is_named():
    """A VMEM overflow names the largest parts of the estimate, scratch buffers among them:
    here the accumulator's (trial nit: only blocks were listed)."""
    x = torch.empty(2048, 4096, device="meta")
    with pytest.raises(exc.VmemOverflow, match=r"the largest: .*scratch 'tn_acc_ref' 128\.0 MiB"):
        wide_running_max.bind((x,)).plan({"block_sizes": [2048, 128], "pallas_loop_type": FOLD})


@pallasite.kernel
def segment_totals_then_columns(x, offsets, y):
    """A jagged loop in the prologue (repeated per folded step, only computing) and a folded
    hl.grid: the grid over segments is not flattened into work items (the folded steps'
    order is fixed)."""
    segments = offsets.size(0) - 1
    d = y.size(1)
    out = torch.zeros([segments, d], dtype=torch.float32)
    for g in hl.grid(segments):
        total = hl.zeros([128], dtype=torch.float32)
        for t in hl.tile(offsets[g], offsets[g + 1]):
            total = total + x[t, :].sum(0)
        for c in hl.grid(d):
            out[g, c] = y[g, c] + total.sum()
    return out


@pytest.mark.parametrize("first", LOOP_TYPES)
def test_a_jagged_prologue_beside_a_folded_grid(first):
    x, y = torch.randn(40, 128), torch.randn(4, 6)
    offsets = torch.tensor([0, 5, 17, 17, 40], dtype=torch.int32)
    totals = torch.stack([x[offsets[i]:offsets[i + 1]].sum() for i in range(4)])
    _, out = code_and_output(segment_totals_then_columns, (x, offsets, y), pallas_loop_type=[first, FOLD])
    torch.testing.assert_close(out, y + totals[:, None], rtol=1e-5, atol=1e-4)
    (call,) = segment_totals_then_columns.bind((x, offsets, y)).plan(
        {"pallas_loop_type": [first, FOLD]}).calls
    assert call.worklist is None and "folded into the grid" in call.worklist_reason
