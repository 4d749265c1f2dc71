"""A masked load's tile may run past the tensor's end (Helion's concatenation,
`examples/concatenate.py`): `hl.load(x, [t0, t1], extra_mask=t1.index < x.size(1))` over
an output wider than x reads 0 where t1 passes x's end, as a shifted tile by 0 does
(`ShiftedTile`, planned resident and read from aligned runs), compiled and in reference
mode. A plain `x[t0, t1]` past the end stays a bounds error, as in torch."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.ir import ShiftedTile
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def concat_columns(x, y):
    """Helion's concat2d_dim1: each output tile reads x where it lies left of x's end and y
    (shifted left by x's width) past it."""
    out = torch.empty([x.size(0), x.size(1) + y.size(1)], dtype=x.dtype, device=x.device)
    for tile0, tile1 in hl.tile(out.size()):
        idx = hl.tile_index(tile1)
        x_part = hl.load(x, [tile0, tile1], extra_mask=(idx < x.size(1))[None, :])
        y_part = hl.load(y, [tile0, idx - x.size(1)], extra_mask=(idx >= x.size(1))[None, :])
        out[tile0, tile1] = torch.where((idx < x.size(1))[None, :], x_part, y_part)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("widths", [(40, 60), (130, 200), (256, 3)])
def test_concatenation_reads_zero_past_the_first_tensors_end(dtype, widths):
    x = (torch.randn(37, widths[0]) * 100).to(dtype)
    y = (torch.randn(37, widths[1]) * 100).to(dtype)
    expected = torch.cat([x, y], dim=1)
    code, out = code_and_output(concat_columns, (x, y))
    assert torch.equal(out, expected)
    assert torch.equal(run_ref(concat_columns, (x, y)), expected)
    assert "x at tile1.index: aligned runs" in code  # the generated code says what it reads


def test_the_plan_reads_the_overrunning_tile_as_a_shift_by_zero():
    x, y = torch.randn(16, 40), torch.randn(16, 60)
    plan = concat_columns.bind((x, y)).plan()
    loads = [node for node in plan.ir.device_loops[0].loop.body if getattr(node, "op", "") == "load"]
    x_load = next(node for node in loads if node.tensor.name == "x")
    assert isinstance(x_load.index[1], ShiftedTile) and x_load.index[1].offset == 0


@pallasite.kernel
def zero_padded(x, rows: int, cols: int):
    """A tile past the end on both axes: x zero-extended to [rows, cols]."""
    out = torch.empty([rows, cols], dtype=x.dtype, device=x.device)
    for tm, tn in hl.tile([rows, cols], block_size=[8, 128]):
        inside = (tm.index < x.size(0))[:, None] & (tn.index < x.size(1))[None, :]
        out[tm, tn] = hl.load(x, [tm, tn], extra_mask=inside)
    return out


def test_both_axes_past_the_end_and_one_axis():
    """Two tiles past the end are two shifted tiles (by 0) in one subscript: each axis reads
    its aligned runs, 0 outside the tensor, in both modes."""
    x = torch.randn(13, 70)
    expected = torch.nn.functional.pad(x, (0, 300 - 70, 0, 24 - 13))
    _, out = code_and_output(zero_padded, (x, 24, 300))
    assert torch.equal(out, expected)
    assert torch.equal(run_ref(zero_padded, (x, 24, 300)), expected)
    _, out = code_and_output(zero_padded, (x[:, :], 13, 300))  # only the columns run past the end
    assert torch.equal(out, torch.nn.functional.pad(x, (0, 300 - 70)))


@pallasite.kernel
def concat_in_inner_loop(x, y):
    """The concatenation with its columns walked by an inner loop."""
    m = x.size(0)
    total = x.size(1) + y.size(1)
    out = torch.empty([m, total], dtype=x.dtype, device=x.device)
    for tm in hl.tile(m, block_size=8):
        for tn in hl.tile(total, block_size=128):
            idx = tn.index
            left = hl.load(x, [tm, tn], extra_mask=(idx < x.size(1))[None, :])
            right = hl.load(y, [tm, idx - x.size(1)], extra_mask=(idx >= x.size(1))[None, :])
            out[tm, tn] = left + right
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_concatenation_in_an_inner_loop(loop_type):
    x, y = torch.randn(20, 200), torch.randn(20, 90)
    expected = torch.cat([x, y], dim=1)
    _, out = code_and_output(concat_in_inner_loop, (x, y), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(run_ref(concat_in_inner_loop, (x, y), pallas_loop_type=loop_type), expected,
                               rtol=0, atol=0)


@pallasite.kernel
def unmasked_past_end(x, y):
    out = torch.empty([x.size(0), x.size(1) + y.size(1)], dtype=x.dtype, device=x.device)
    for tile0, tile1 in hl.tile(out.size()):
        out[tile0, tile1] = x[tile0, tile1]
    return out


def test_a_plain_subscript_past_the_end_is_still_a_bounds_error():
    x, y = torch.randn(16, 40), torch.randn(16, 60)
    with pytest.raises(exc.ShapeMismatch, match="tile1 covers"):
        unmasked_past_end(x, y)
    with pytest.raises(exc.ShapeMismatch, match="tile1 covers|past axis 1"):
        run_ref(unmasked_past_end, (x, y))
