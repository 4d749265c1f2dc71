"""`outer_pipeline` over a loop whose end is a value of the outer tile (a causal key loop,
`hl.tile(0, min(s, tile_q.end))`): the folded grid axis spans the end's largest value, a step
past this program's end skips its body, and the blocks it indexes repeat the last one the
program needs (no copy), as JAX's causal flash attention skips the blocks above the diagonal.
Checked against torch and reference mode, lowered for every chip (conftest)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from examples.attention import attention
from pallasite import exc
from pallasite.autotune.cost_model import estimate
from pallasite.plan import schedule
from pallasite.plan.metrics import schedule_metrics
from pallasite.runtime import interpret
from pallasite.testing import code_and_output, run_ref

FOLD = "outer_pipeline"


def _causal_attention(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


@pytest.mark.parametrize("s, blocks", [
    (256, [64, 64]),
    (256, [128, 64]),   # two key steps per query tile
    (256, [64, 128]),   # a key tile past the diagonal: its tail masked at tile_q.end
    (200, [64, 64]),    # the last query tile ends at s
])
def test_causal_flash_attention_skips_the_steps_above_the_diagonal(s, blocks):
    q, k, v = (torch.randn(2, s, 128) for _ in range(3))
    expected = _causal_attention(q, k, v)
    code, out = code_and_output(attention, (q, k, v, True), block_sizes=blocks, pallas_loop_type=FOLD)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(run_ref(attention, (q, k, v, True), block_sizes=blocks, pallas_loop_type=FOLD),
                               expected, rtol=1e-4, atol=1e-4)
    assert "steps past this program's end of 'tile_k' skip" in code
    (call,) = attention.bind((q, k, v, True)).plan({"block_sizes": blocks, "pallas_loop_type": FOLD}).calls
    assert [axis.dim.name for axis in call.grid] == ["tile_b", "tile_q", "tile_k"]
    assert call.grid[2].num_blocks == -(-s // blocks[1])  # the largest end: s
    assert [axis.semantics.value for axis in call.grid] == ["parallel", "parallel", "arbitrary"]


def test_skipped_steps_copy_no_block_and_compute_nothing():
    """The key and value blocks of the steps above the diagonal repeat the last block the
    query tile needs, so Pallas copies nothing for them; the cost model counts no work there."""
    q, k, v = (torch.randn(2, 512, 128) for _ in range(3))
    config = {"block_sizes": [128, 128], "pallas_loop_type": FOLD}
    causal = attention.bind((q, k, v, True)).plan(config)
    full = attention.bind((q, k, v, False)).plan(config)
    block = 128 * 128 * 4
    saved = schedule_metrics(full).hbm_bytes - schedule_metrics(causal).hbm_bytes
    # per batch entry, k's (and v's) block indices over the 16 steps are 0000 0111 0122 0123:
    # 9 changes (copies) instead of 16
    assert saved == 2 * 2 * (16 - 9) * block
    causal_time = estimate(attention, (q, k, v, True), config).seconds
    full_time = estimate(attention, (q, k, v, False), config).seconds
    assert causal_time < 0.75 * full_time
    (call,) = causal.calls
    k_operand = next(op for op in call.inputs if op.symbol.name == "k")
    assert "min" in str(k_operand.axes[1].index)  # clamped to the last needed block


def test_a_fold_counted_by_outer_program_counts_as_step_by_step(monkeypatch):
    """`count_call` counts a folded loop's steps of one outer program at once; the count is
    the one of every step walked in turn."""
    q, k, v = (torch.randn(2, 256, 128) for _ in range(3))
    x = torch.randn(40, 200)
    cases = [(attention, (q, k, v, causal), blocks) for causal in (False, True) for blocks in ([64, 128], [128, 64])]
    cases += [(prefix_row_sums, (x,), [16, 128]), (lower_blocks_doubled, (x,), [16, 128])]
    for kernel, args, blocks in cases:
        (call,) = kernel.bind(args).plan({"block_sizes": blocks, "pallas_loop_type": FOLD}).calls
        assert schedule._plain_fold(call) is not None
        by_outer_program = schedule.count_call(call, {})
        with monkeypatch.context() as patch:
            patch.setattr(schedule, "_plain_fold", lambda call: None)
            assert schedule.count_call(call, {}) == by_outer_program


@pallasite.kernel
def lower_blocks_doubled(x):
    """A store indexed by the folded tile whose loop ends at the row tile's end: the blocks
    past it are never written (they keep the zeros)."""
    m, n = x.shape
    out = torch.zeros_like(x)
    for tm in hl.tile(m):
        for tn in hl.tile(0, min(n, tm.end)):
            out[tm, tn] = x[tm, tn] * 2
    return out


@pallasite.kernel
def prefix_row_sums(x):
    """A carried sum over the columns before the row tile's end plus a lookahead of 64."""
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tn in hl.tile(0, min(n, tm.end + 64)):
            acc = acc + x[tm, tn].sum(-1)
        out[tm] = acc
    return out


def _tile_end(rows: int, block: int, limit: int, extra: int = 0) -> torch.Tensor:
    """Each row's tile end (at most `rows`) plus `extra`, at most `limit`."""
    ends = torch.clamp((torch.arange(rows) // block + 1) * block, max=rows)
    return torch.clamp(ends + extra, max=limit)


@pytest.mark.parametrize("loop_type", [FOLD, "emit_pipeline", "fori_loop"])
@pytest.mark.parametrize("shape, blocks", [((64, 256), [16, 128]), ((40, 200), [16, 128])])
def test_stores_and_carried_sums_up_to_a_tile_end(loop_type, shape, blocks):
    x = torch.randn(*shape)
    m, n = shape
    columns = torch.arange(n)[None, :]
    ends = _tile_end(m, blocks[0], n)
    written = x * 2 * (columns < ends[:, None])
    _, out = code_and_output(lower_blocks_doubled, (x,), block_sizes=blocks, pallas_loop_type=loop_type)
    torch.testing.assert_close(out, written)
    torch.testing.assert_close(run_ref(lower_blocks_doubled, (x,), block_sizes=blocks), written)
    sums = (x * (columns < _tile_end(m, blocks[0], n, 64)[:, None])).sum(-1)
    _, out = code_and_output(prefix_row_sums, (x,), block_sizes=blocks, pallas_loop_type=loop_type)
    torch.testing.assert_close(out, sums, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(run_ref(prefix_row_sums, (x,), block_sizes=blocks), sums, rtol=1e-5, atol=1e-4)


@pallasite.kernel
def after_the_row_tile(x):
    """The columns after the row tile's end: the last row tile's range is empty."""
    m, n = x.shape
    out = torch.zeros_like(x)
    sums = torch.zeros([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tn in hl.tile(tm.end, n):
            out[tm, tn] = x[tm, tn] * 2
            acc = acc + x[tm, tn].sum(1)
        sums[tm] = acc
    return out, sums


@pytest.mark.parametrize("loop_type", [FOLD, "emit_pipeline", "fori_loop"])
def test_a_program_whose_range_is_empty_keeps_its_outputs(loop_type):
    """Its steps all skip; the blocks they index stay inside the array (the last one) and are
    copied in before they are written back."""
    x = torch.randn(256, 256)
    after = torch.arange(256)[None, :] >= _tile_end(256, 64, 256)[:, None]
    _, (out, sums) = code_and_output(after_the_row_tile, (x,), block_sizes=[64, 64], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, x * 2 * after)
    torch.testing.assert_close(sums, (x * after).sum(1), rtol=1e-5, atol=1e-4)
    reference = run_ref(after_the_row_tile, (x,), block_sizes=[64, 64])
    torch.testing.assert_close(reference[0], x * 2 * after)


@pallasite.kernel
def windowed(x, window: int):
    """Each row tile doubles the columns from `window` before it to its end."""
    window = hl.specialize(window)
    m, n = x.shape
    out = torch.zeros_like(x)
    for tm in hl.tile(m):
        for tn in hl.tile(max(0, tm.begin - window), min(n, tm.end)):
            out[tm, tn] = x[tm, tn] * 2
    return out


@pallasite.kernel
def local_attention(q, k, v, window: int):
    """Sliding-window causal attention: row i attends keys [i - window, i]."""
    window = hl.specialize(window)
    bh, s, d = q.shape
    out = torch.empty_like(q)
    for tb, tq in hl.tile([bh, s], block_size=[1, None]):
        m_i = hl.full([tb, tq], -1e30, dtype=torch.float32)
        l_i = hl.zeros([tb, tq], dtype=torch.float32)
        acc = hl.zeros([tb, tq, d], dtype=torch.float32)
        qb = q[tb, tq, :] * (d ** -0.5)
        for tk in hl.tile(max(0, tq.begin - window), min(s, tq.end)):
            scores = hl.dot(qb, k[tb, tk, :].transpose(1, 2))
            behind = tq.index[None, :, None] - tk.index[None, None, :]
            scores = torch.where((behind >= 0) & (behind <= window), scores, float("-inf"))
            m_new = torch.maximum(m_i, scores.amax(-1))
            p = torch.exp(scores - m_new[:, :, None])
            alpha = torch.exp(m_i - m_new)
            l_i = l_i * alpha + p.sum(-1)
            acc = hl.dot(p, v[tb, tk, :], acc=acc * alpha[:, :, None])
            m_i = m_new
        out[tb, tq, :] = (acc / l_i[:, :, None]).to(out.dtype)
    return out


@pytest.mark.parametrize("window, blocks, steps", [
    (128, [64, 64], 3),     # a program's range: up to 128 + 64 columns, aligned: 3 steps
    (128, [128, 128], 2),
    (100, [64, 64], 3),     # unaligned: tiles at 28, 92, 156 of [28, 192); the axis resident
])
def test_a_sliding_window_takes_as_many_steps_as_its_widest_row(window, blocks, steps):
    x = torch.randn(256, 320)
    rows, columns = torch.arange(256)[:, None], torch.arange(320)[None, :]
    ends = _tile_end(256, blocks[0], 320)[:, None]
    begins = torch.clamp((rows // blocks[0]) * blocks[0] - window, min=0)
    expected = x * 2 * ((columns >= begins) & (columns < ends))
    code, out = code_and_output(windowed, (x, window), block_sizes=blocks, pallas_loop_type=FOLD)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(windowed, (x, window), block_sizes=blocks), expected)
    (call,) = windowed.bind((x, window)).plan({"block_sizes": blocks, "pallas_loop_type": FOLD}).calls
    assert call.grid[1].num_blocks == steps and "over each program's own range" in code
    q, k, v = (torch.randn(2, 256, 128) for _ in range(3))
    behind = torch.arange(256)[:, None] - torch.arange(256)[None, :]
    mask = (behind >= 0) & (behind <= window)
    attended = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    _, out = code_and_output(local_attention, (q, k, v, window), block_sizes=blocks, pallas_loop_type=FOLD)
    torch.testing.assert_close(out, attended, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(run_ref(local_attention, (q, k, v, window), block_sizes=blocks), attended,
                               rtol=1e-4, atol=1e-4)


@pallasite.kernel
def data_ended(x, ends):
    out = torch.zeros_like(x)
    for tm in hl.tile(x.size(0)):
        end = ends[0]
        for tn in hl.tile(0, end):
            out[tm, tn] = x[tm, tn]
    return out


@pallasite.kernel
def window_at_run_time(x, window: int):
    m, n = x.shape
    out = torch.zeros_like(x)
    for tm in hl.tile(m):
        for tn in hl.tile(max(0, tm.begin - window), min(n, tm.end)):
            out[tm, tn] = x[tm, tn] * 2
    return out


@pytest.mark.parametrize("kernel, args, why, line", [
    (window_at_run_time, (128,), r"no compile-time bound.*w = hl.specialize\(w\)",
     "for tn in hl.tile(max(0, tm.begin - window), min(n, tm.end)):"),
    (data_ended, (torch.tensor([200], dtype=torch.int32),), "no compile-time bound",
     "for tn in hl.tile(0, end):"),
])
def test_bounds_a_fold_cannot_give_the_grid_are_refused_at_the_loop(kernel, args, why, line):
    x = torch.randn(16, 256)
    with pytest.raises(exc.BackendUnsupported, match=why) as error:
        code_and_output(kernel, (x, *args), block_sizes=[8, 128], pallas_loop_type=FOLD)
    assert line in str(error.value) and "Use another loop type" in str(error.value)


@pytest.mark.parametrize("seed", ["2", "7"])
def test_folded_ranges_are_race_free_on_two_cores(seed, monkeypatch):
    """Two cores visit the parallel grid points out of order (the seed fixes how). A block
    the skipped steps revisit must keep what its running step wrote: an in-place updated
    tensor is copied in only where its block changes (`InPlaceUpdate.changes_along`), not at
    every step (which read the input block as it was before that step's write)."""
    monkeypatch.setenv(interpret.CORES_ENV, "2")
    monkeypatch.setenv(interpret.SEED_ENV, seed)
    x = torch.randn(256, 320)
    q, k, v = (torch.randn(2, 256, 128) for _ in range(3))
    rows, columns = torch.arange(256)[:, None], torch.arange(320)[None, :]
    window_begins = torch.clamp((rows // 128) * 128 - 128, min=0)
    cases = [
        (windowed, (x, 128), [128, 128],
         x * 2 * ((columns >= window_begins) & (columns < _tile_end(256, 128, 320)[:, None]))),
        (lower_blocks_doubled, (x,), [64, 128], x * 2 * (columns < _tile_end(256, 64, 320)[:, None])),
        (after_the_row_tile, (x[:, :256],), [64, 64],
         (x[:, :256] * 2 * (columns[:, :256] >= _tile_end(256, 64, 256)[:, None]),
          (x[:, :256] * (columns[:, :256] >= _tile_end(256, 64, 256)[:, None])).sum(1))),
        (attention, (q, k, v, True), [64, 128], _causal_attention(q, k, v)),
    ]
    for kernel, args, blocks, expected in cases:
        kernel.reset()  # compile anew on two cores; leave no two-core kernel to the next test
        try:
            compiled = kernel.bind(args).compile_config(pallasite.Config(block_sizes=blocks, pallas_loop_type=FOLD))
            assert compiled.module.INTERPRET.num_cores_or_threads == 2
            out = compiled(*args)  # a race raises exc.DataRace
        finally:
            kernel.reset()
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)  # (a tuple for two outputs)


@pallasite.kernel
def causal_plus_one(x, out):
    """Found by a trial: with two steps or more past a row tile's range, every step copied
    the in-place output's input block over what the running step wrote (lost), and the folded
    axis was `parallel` though its skipped steps revisit that block."""
    m, n = x.shape
    for tm in hl.tile(m):
        for tn in hl.tile(0, min(n, tm.end)):
            out[tm, tn] = x[tm, tn] + 1.0
    return out


@pallasite.kernel
def causal_column_sums(x, out):
    """Every row tile adds into the same column blocks (the trial's atomic case)."""
    m, n = x.shape
    for tm in hl.tile(m):
        for tn in hl.tile(0, min(n, tm.end)):
            hl.atomic_add(out, [tn], x[tm, tn].sum(0))
    return out


@pallasite.kernel
def past_the_columns(x):
    m, n = x.shape
    out = torch.zeros([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tn in hl.tile(0, tm.end + 64):
            acc = acc + x[tm, tn].sum(-1)
        out[tm] = acc
    return out


def test_outputs_the_skipped_steps_revisit_keep_what_the_running_steps_wrote():
    x = torch.randn(384, 384)
    below = torch.arange(384)[None, :] < _tile_end(384, 128, 384)[:, None]
    config = {"block_sizes": [128, 128], "pallas_loop_type": FOLD}
    for start in (torch.zeros_like(x), torch.full_like(x, 7.0)):
        _, out = code_and_output(causal_plus_one, (x, start.clone()), **config)
        torch.testing.assert_close(out, torch.where(below, x + 1.0, start))
    (call,) = causal_plus_one.bind((x, x.clone())).plan(config).calls
    assert [axis.semantics.value for axis in call.grid] == ["parallel", "arbitrary"]
    assert "revisit the block of output 'out'" in call.grid[1].reason
    _, sums = code_and_output(causal_column_sums, (x, torch.zeros(384)), **config)
    torch.testing.assert_close(sums, (x * below).sum(0), rtol=1e-4, atol=1e-4)


def test_a_folded_range_past_its_tensor_or_of_no_program_is_checked_when_planning():
    """A range past the tensor is refused as under the other loop types (it was read as NaN);
    an empty outer extent runs no program (it was refused as unbounded)."""
    x = torch.randn(40, 100)
    with pytest.raises(exc.ShapeMismatch, match=r"tn covers \[0, 104\) but x.size\(1\) is 100"):
        code_and_output(past_the_columns, (x,), block_sizes=[16, 16], pallas_loop_type=FOLD)
    empty = torch.randn(0, 128)
    _, out = code_and_output(prefix_row_sums, (empty,), block_sizes=[16, 128], pallas_loop_type=FOLD)
    assert out.shape == (0,)


@pallasite.kernel
def causal_rows_by_columns(x):
    """A 2-D folded loop whose first dim's range comes from the outer tile (a trial's wrong
    answer: walked first, its skipped steps went back to a block the inner axis had left, and
    wrote it back stale). The fold walks that dim innermost."""
    m, n, k = x.shape
    out = torch.zeros_like(x)
    for tm in hl.tile(m):
        for tn, tk in hl.tile([0, 0], [min(n, tm.end), k]):
            out[tm, tn, tk] = x[tm, tn, tk] * 2.0
    return out


def test_a_two_dim_fold_walks_its_range_from_the_outer_tiles_innermost():
    x = torch.randn(40, 24, 256)
    ends = torch.clamp(_tile_end(40, 16, 40), max=24)
    expected = torch.where((torch.arange(24)[None, :] < ends[:, None])[:, :, None], x * 2, 0.0)
    config = {"block_sizes": [16, 8, 128], "pallas_loop_type": FOLD}
    _, out = code_and_output(causal_rows_by_columns, (x,), **config)
    torch.testing.assert_close(out, expected)
    (call,) = causal_rows_by_columns.bind((x,)).plan(config).calls
    assert [axis.dim.name for axis in call.grid] == ["tm", "tk", "tn"]
    # the loop's loop_orders entry: kept when it walks the ranged dim innermost, else refused
    # (a fold once ignored it, and the tuner scored configs differing only in it apart)
    ordered = {**config, "loop_orders": [[1, 0]]}
    (call,) = causal_rows_by_columns.bind((x,)).plan(ordered).calls
    assert [axis.dim.name for axis in call.grid] == ["tm", "tk", "tn"]
    with pytest.raises(exc.InvalidConfig, match=r"loop_orders \[0, 1\] .* walks 'tn', whose range comes from the outer"):
        code_and_output(causal_rows_by_columns, (x,), **config, loop_orders=[[0, 1]])


@pallasite.kernel
def doubled_blocks(x):
    """A 2-D fold of static ranges: its loop_orders entry orders its grid axes."""
    m, n, k = x.shape
    out = torch.zeros_like(x)
    for tm in hl.tile(m):
        for tn, tk in hl.tile([n, k]):
            out[tm, tn, tk] = x[tm, tn, tk] * 2.0
    return out


@pytest.mark.parametrize("order", [[0, 1], [1, 0]])
def test_a_two_dim_fold_walks_its_loop_orders_entry(order):
    x = torch.randn(16, 24, 256)
    config = {"block_sizes": [8, 8, 128], "pallas_loop_type": FOLD, "loop_orders": [order]}
    (call,) = doubled_blocks.bind((x,)).plan(config).calls
    assert [axis.dim.name for axis in call.grid] == ["tm", *(["tn", "tk"][i] for i in order)]
    _, out = code_and_output(doubled_blocks, (x,), **config)
    torch.testing.assert_close(out, x * 2)
    torch.testing.assert_close(run_ref(doubled_blocks, (x,), **config), x * 2)


def test_the_generated_code_names_a_folded_ranges_block_and_bounds_once():
    """The clamped block of a folded range is one module-level function the BlockSpecs and the
    in-place copy-in condition call (it was written out in each), and the range's computed end
    is named after its tile (`tn_range_end`, was `minimum`)."""
    x = torch.randn(40, 24, 256)
    code, _ = code_and_output(causal_rows_by_columns, (x,), block_sizes=[16, 8, 128], pallas_loop_type=FOLD)
    assert "def tn_block(i0, i2):" in code
    assert code.count("lambda i0, i1, i2: (i0, tn_block(i0, i2), i1)") == 3  # x, out in, out
    assert code.count("jnp.maximum(") == 1  # the clamp, in tn_block only
    assert "tn_block(pl.program_id(0), pl.program_id(2)) != tn_block(pl.program_id(0), pl.program_id(2) - 1)" in code
    assert "tn_range_end = jnp.minimum(24, tm_end)" in code and "minimum =" not in code


@pallasite.kernel
def visit_order(x):
    """Each tile of a folded 2-D loop records how many tiles the program visited before it: the
    result shows the order the fold walks (a trial's wrong answer: loop_orders was ignored)."""
    b, m, n = x.size()
    out = torch.empty_like(x)
    for tb in hl.tile(b):
        seen = hl.zeros([tb], dtype=torch.float32)
        for ti, tj in hl.tile([m, n]):
            out[tb, ti, tj] = seen[:, None, None] + 0 * x[tb, ti, tj]
            seen = seen + 1.0
    return out


@pytest.mark.parametrize("order,visits", [([0, 1], [(0, 0), (0, 1), (1, 0), (1, 1)]),
                                          ([1, 0], [(0, 0), (1, 0), (0, 1), (1, 1)])])
def test_a_two_dim_fold_visits_its_tiles_in_its_loop_orders_entry(order, visits):
    x = torch.randn(1, 128, 256)
    expected = torch.empty_like(x)
    for step, (i, j) in enumerate(visits):
        expected[:, i * 64:(i + 1) * 64, j * 128:(j + 1) * 128] = step
    config = {"block_sizes": [1, 64, 128], "pallas_loop_type": FOLD, "loop_orders": [order]}
    _, out = code_and_output(visit_order, (x,), **config)
    assert torch.equal(out, expected)
    assert torch.equal(run_ref(visit_order, (x,), **config), expected)
