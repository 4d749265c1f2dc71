"""A slice `tile.begin + c : tile.begin + c + tile.block_size` is the tile shifted by c.

Helion's fused SwiGLU GEMM reads the up-projection half of one weight as
`W[tile_k, tile_n.begin + N : tile_n.begin + N + tile_n.block_size]`. That window is
`tile_n + N` (a `ShiftedTile`): its lanes past the tile's valid positions are padding,
as the tile's are, so a partial last tile reads no column past the half it names. It
was a gather of `start + hl.arange(block)`, which reads those lanes too (past the
tensor's end for the last tile)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.ir import GatherIndex, Load, ShiftedTile, walk_nodes
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel(config=pallasite.Config(block_sizes=[32, 128, 128]))
def fused_swiglu(x, w):
    m, k = x.shape
    n = w.size(1) // 2
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc_gate = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        acc_up = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            x_tile = x[tile_m, tile_k]
            acc_gate = torch.addmm(acc_gate, x_tile, w[tile_k, tile_n])
            n_begin = tile_n.begin + n
            acc_up = torch.addmm(acc_up, x_tile, w[tile_k, n_begin:n_begin + tile_n.block_size])
        out[tile_m, tile_n] = (acc_gate * torch.sigmoid(acc_gate) * acc_up).to(out.dtype)
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def shifted_back(x):
    m, n = x.shape
    out = torch.zeros([m, n - 5], dtype=x.dtype, device=x.device)
    for tile_m in hl.tile(m):
        for tile_n in hl.tile(n - 5):
            start = tile_n.begin - 3 + 8
            out[tile_m, tile_n] = x[tile_m, start:start + tile_n.block_size] * 2
    return out


def _swiglu(x, w):
    n = w.shape[1] // 2
    return torch.nn.functional.silu(x @ w[:, :n]) * (x @ w[:, n:])


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("m, k, n", [(64, 256, 384), (50, 200, 300)])  # 300: a partial last tile of n
def test_the_up_projection_half_is_the_tile_shifted(loop_type, m, k, n):
    x, w = torch.randn(m, k), torch.randn(k, 2 * n)
    _, out = code_and_output(fused_swiglu, (x, w), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, _swiglu(x, w), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(run_ref(fused_swiglu, (x, w), pallas_loop_type=loop_type), _swiglu(x, w),
                               rtol=1e-4, atol=1e-3)
    check_tpu_lowering(fused_swiglu, (x, w), pallas_loop_type=loop_type)


def test_the_window_is_recorded_as_a_shifted_tile_not_a_gather():
    x, w = torch.randn(64, 256), torch.randn(256, 768)
    call = fused_swiglu.bind((x, w)).plan().calls[0]
    loads = [node for node in walk_nodes(call.call.loop.body) if isinstance(node, Load) and node.tensor.name == "w"]
    assert not any(isinstance(item, GatherIndex) for node in loads for item in node.index)
    (shifted,) = [item for node in loads for item in node.index if isinstance(item, ShiftedTile)]
    assert shifted.offset == 384


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def shifted_back_inline(x):
    """shifted_back with the start written out twice, as supported-forms.md shows the window
    (a trial: each `tile_n.begin - 3 + 8` is its own traced value, and the window was refused)."""
    m, n = x.shape
    out = torch.zeros([m, n - 5], dtype=x.dtype, device=x.device)
    for tile_m in hl.tile(m):
        for tile_n in hl.tile(n - 5):
            out[tile_m, tile_n] = x[tile_m, tile_n.begin - 3 + 8:tile_n.begin - 3 + 8 + tile_n.block_size] * 2
    return out


@pytest.mark.parametrize("kernel", [shifted_back, shifted_back_inline], ids=["named", "inline"])
@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_window_shifted_by_a_sum_of_constants(loop_type, kernel):
    x = torch.randn(20, 300)
    _, out = code_and_output(kernel, (x,), pallas_loop_type=loop_type)
    assert torch.equal(out, x[:, 5:] * 2)
    assert torch.equal(run_ref(kernel, (x,), pallas_loop_type=loop_type), x[:, 5:] * 2)
    check_tpu_lowering(kernel, (x,), pallas_loop_type=loop_type)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128]))
def shifted_past_the_end(x):
    m, n = x.shape
    out = torch.zeros([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        start = tile_n.begin + 8
        out[tile_m, tile_n] = x[tile_m, start:start + tile_n.block_size]
    return out


def test_a_window_past_the_axis_end_stays_a_range_checked_gather():
    """torch clamps such a slice (a shorter value, then a shape error): no shifted tile, whose
    lanes past the end would read 0, but the gather that reports the index."""
    x = torch.randn(16, 300)
    call = shifted_past_the_end.bind((x,)).plan().calls[0]
    loads = [node for node in walk_nodes(call.call.loop.body) if isinstance(node, Load)]
    assert any(isinstance(item, GatherIndex) for node in loads for item in node.index)
    with pytest.raises(pallasite.exc.ShapeMismatch, match="is 300 but x.size"):
        shifted_past_the_end(x)
