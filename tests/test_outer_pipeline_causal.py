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
from pallasite.plan.metrics import schedule_metrics
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
def windowed(x):
    m, n = x.shape
    out = torch.zeros_like(x)
    for tm in hl.tile(m):
        for tn in hl.tile(max(0, tm.begin - 128), min(n, tm.end)):
            out[tm, tn] = x[tm, tn] * 2
    return out


@pallasite.kernel
def data_ended(x, ends):
    out = torch.zeros_like(x)
    for tm in hl.tile(x.size(0)):
        end = ends[0]
        for tn in hl.tile(0, end):
            out[tm, tn] = x[tm, tn]
    return out


@pytest.mark.parametrize("kernel, args, why, line", [
    (windowed, (), "its begin is computed in the kernel", "for tn in hl.tile(max(0, tm.begin - 128), min(n, tm.end)):"),
    (data_ended, (torch.tensor([200], dtype=torch.int32),), "no compile-time bound",
     "for tn in hl.tile(0, end):"),
])
def test_bounds_a_fold_cannot_give_the_grid_are_refused_at_the_loop(kernel, args, why, line):
    x = torch.randn(16, 256)
    with pytest.raises(exc.BackendUnsupported, match=why) as error:
        code_and_output(kernel, (x, *args), block_sizes=[8, 128], pallas_loop_type=FOLD)
    assert line in str(error.value) and "Use another loop type" in str(error.value)
