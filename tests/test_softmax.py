"""softmax and log_softmax in device code (issue #7 §5).

Both are composites: the recorder expands them into amax, sub, exp, sum and
div (log_softmax: log and sub), so a partially filled reduced axis is masked
by the mask planner like any other reduction — the tests below put the padding
on the reduced axis, both in a tiled block and in a full-row block.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.ir import walk_nodes
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output


SPELLINGS = {
    "torch.softmax": (lambda v: torch.softmax(v, dim=1), False),
    "F.softmax": (lambda v: F.softmax(v, dim=-1), False),
    "Tensor.softmax": (lambda v: v.softmax(1), False),
    "torch.log_softmax": (lambda v: torch.log_softmax(v, 1), True),
    "F.log_softmax": (lambda v: F.log_softmax(v, dim=1), True),
    "Tensor.log_softmax": (lambda v: v.log_softmax(dim=-1), True),
}


def rows_kernel(op, block_n: int | None):
    """`op` of each block of rows: the whole row (`block_n=None`) or tiles of `block_n`."""

    @pallasite.kernel
    def rows(x):
        m, n = x.size()
        out = torch.empty_like(x)
        if block_n is None:
            for tile_m in hl.tile(m, block_size=8):
                out[tile_m, :] = op(x[tile_m, :])
        else:
            for tile_m, tile_n in hl.tile([m, n], block_size=[8, block_n]):
                out[tile_m, tile_n] = op(x[tile_m, tile_n])
        return out

    return rows


def expected_rows(op, x: torch.Tensor, block_n: int | None) -> torch.Tensor:
    if block_n is None:
        return op(x)
    return torch.cat([op(x[:, j:j + block_n]) for j in range(0, x.shape[1], block_n)], dim=1)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_softmax_spellings_over_a_padded_tiled_row(spelling):
    """A 200-long row in one 256-lane block: the 56 padded lanes must not count."""
    op, log = SPELLINGS[spelling]
    x = torch.randn(16, 200, generator=torch.Generator().manual_seed(0)) * 4
    kernel = rows_kernel(op, 256)
    _, result = code_and_output(kernel, (x,))
    torch.testing.assert_close(result, op(x), atol=1e-5, rtol=1e-5)
    recorded = [node.op for node in walk_nodes(kernel.bind((x,)).plan().calls[0].call.loop.body)]
    assert {"amax", "sub", "exp", "sum"} <= set(recorded)
    assert ("log" in recorded) == log and ("div" in recorded) == (not log)


def test_padded_reduced_axis_is_masked_by_the_mask_planner():
    x = torch.randn(16, 200)
    plan = rows_kernel(lambda v: torch.softmax(v, 1), 256).bind((x,)).plan()
    call = plan.calls[0]
    ops_by_id = {node.id: node.op for node in walk_nodes(call.call.loop.body)}
    fills = {(ops_by_id[node_id], mask.axis, mask.fill) for node_id, masks in call.masks.items() for mask in masks}
    assert fills == {("amax", 1, float("-inf")), ("sum", 1, 0)}


@pytest.mark.parametrize("log", [False, True])
def test_softmax_of_a_full_row_block_and_several_tiles(log):
    op = (lambda v: torch.log_softmax(v, 1)) if log else (lambda v: torch.softmax(v, 1))
    x = torch.randn(20, 300, generator=torch.Generator().manual_seed(1)) * 3
    _, full_row = code_and_output(rows_kernel(op, None), (x,))
    torch.testing.assert_close(full_row, op(x), atol=1e-5, rtol=1e-5)
    _, tiled = code_and_output(rows_kernel(op, 128), (x,))  # per-tile softmax, last tile partial
    torch.testing.assert_close(tiled, expected_rows(op, x, 128), atol=1e-5, rtol=1e-5)


def test_bf16_softmax_computes_in_f32_and_dtype_argument():
    x = torch.randn(16, 200, generator=torch.Generator().manual_seed(2)).bfloat16()
    _, result = code_and_output(rows_kernel(lambda v: torch.softmax(v, 1), 256), (x,))
    assert result.dtype == torch.bfloat16
    torch.testing.assert_close(result, torch.softmax(x, 1), atol=1e-2, rtol=1e-2)

    @pallasite.kernel
    def to_f32(x):
        m, n = x.size()
        out = torch.empty([m, n], dtype=torch.float32)
        for tile_m in hl.tile(m, block_size=8):
            out[tile_m, :] = F.log_softmax(x[tile_m, :], dim=1, dtype=torch.float32)
        return out

    _, result = code_and_output(to_f32, (x,))
    torch.testing.assert_close(result, F.log_softmax(x, dim=1, dtype=torch.float32), atol=1e-5, rtol=1e-5)


@pallasite.kernel
def softmax_in_inner_loop(x):
    b, m, n = x.size()
    out = torch.empty_like(x)
    for tile_b in hl.tile(b, block_size=1):
        for tile_n in hl.tile(n):
            out[tile_b, :, tile_n] = torch.softmax(x[tile_b, :, tile_n], dim=2)
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_softmax_over_an_inner_partial_tile(loop_type):
    """The reduced axis is an inner loop's tile; its last tile (200 = 128 + 72) is partial."""
    x = torch.randn(2, 8, 200, generator=torch.Generator().manual_seed(3))
    config = dict(block_sizes=[128], pallas_loop_type=loop_type)
    _, result = code_and_output(softmax_in_inner_loop, (x,), **config)
    expected = torch.cat([torch.softmax(x[..., :128], 2), torch.softmax(x[..., 128:], 2)], dim=2)
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)
    check_tpu_lowering(softmax_in_inner_loop, (x,), chips=("v6e",), **config)


def test_softmax_lowers_to_mosaic():
    x = torch.randn(16, 200)
    check_tpu_lowering(rows_kernel(lambda v: torch.softmax(v, 1), 256), (x,))
    check_tpu_lowering(rows_kernel(lambda v: F.log_softmax(v, dim=1), None), (x,), chips=("v5e",))


def test_softmax_without_dim_or_of_integers_is_rejected():
    x = torch.randn(8, 128)
    with pytest.raises(exc.UnsupportedOperation, match=r"(?s)dim=.*at .*test_softmax.py"):
        code_and_output(rows_kernel(lambda v: F.softmax(v), None), (x,))
    with pytest.raises(exc.UnsupportedDtype, match="cast it to a float dtype"):
        code_and_output(rows_kernel(lambda v: torch.softmax(v, 1), None), (x.int(),))
