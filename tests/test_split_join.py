"""hl.split and hl.join, as Helion's RoPE uses them: a row of d lanes viewed as d/2 pairs
(`x.reshape(m, d // 2, 2)`), split into its even and odd lanes, rotated, joined back and
merged into d lanes (`hl.join(a, b).reshape(m, d)`).

No (m, d/2, 2) value is built (its pairs would lie across sublanes and two lanes, which
Mosaic does not lay out): the split is two strided lane gathers of the d-lane rows and
the join + reshape an interleave (frontend/lane_pairs.py), checked on the recorded ops.
Other (..., 2) values split by subscripts, and split(join(a, b)) is (a, b). Results
match torch and reference mode; rows are partial tiles (NaN padding in interpret mode).
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.ir import walk_nodes
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


def _rope_reference(x, cos, sin):
    x0, x1 = x.float().reshape(x.shape[0], -1, 2).unbind(-1)
    rotated = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], -1)
    return rotated.reshape(x.shape).to(x.dtype)


@pallasite.kernel
def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    m, d = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m, block_size=8):
        pairs = x[tile_m, :].float().reshape(tile_m, d // 2, 2)
        x0, x1 = hl.split(pairs)
        c, s = cos[tile_m, :], sin[tile_m, :]
        out[tile_m, :] = hl.join(x0 * c - x1 * s, x0 * s + x1 * c).reshape(tile_m, d).to(x.dtype)
    return out


def _recorded(kernel, args):
    (call,) = kernel.bind(args).plan().calls
    return [node for node in walk_nodes(call.call.loop.body)]


@pytest.mark.parametrize("d, dtype", [(128, torch.float32), (256, torch.bfloat16), (64, torch.float32)],
                         ids=["d128-f32", "d256-bf16", "d64-f32"])
def test_rope_splits_and_joins_lane_pairs(d, dtype):
    generator = torch.Generator().manual_seed(d)
    x = torch.randn(20, d, generator=generator).to(dtype)
    angles = torch.rand(20, d // 2, generator=generator) * 6
    cos, sin = torch.cos(angles), torch.sin(angles)
    args = (x, cos, sin)
    _, out = code_and_output(rope, args)
    tolerance = {} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(out, _rope_reference(*args), **tolerance)
    torch.testing.assert_close(out, run_ref(rope, args), **tolerance)
    # the pairs are gathered from the rows and interleaved back: four strided lane gathers,
    # no subscript of a (m, d/2, 2) value
    ops = [node.op for node in _recorded(rope, args)]
    assert ops.count("gather") == 4 and "getitem" not in ops
    # their indices are iotas and constants, inside the axis by construction: no range checks
    assert not rope.bind(args).plan().range_checks


def test_split_and_join_are_exact_on_special_values():
    """Lane gathers move bit patterns: NaN, inf and -0.0 arrive unchanged."""
    x = torch.tensor([[float("nan"), -0.0, float("inf"), 1.5] * 32] * 8)
    ones, zeros = torch.ones(8, 64), torch.zeros(8, 64)
    out = rope(x, ones, zeros)  # cos 1, sin 0: x0 * 1 - x1 * 0 is not exact for inf/NaN, so compare pieces
    assert torch.equal(torch.isnan(out), torch.isnan(_rope_reference(x, ones, zeros)))


@pallasite.kernel
def swap_pairs(x: torch.Tensor) -> torch.Tensor:
    """Lanes (0, 1), (2, 3), ... swapped: split and join with nothing computed between."""
    m, d = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m, block_size=8):
        even, odd = hl.split(x[tile_m, :].reshape(tile_m, d // 2, 2))
        out[tile_m, :] = hl.join(odd, even).view(tile_m, d)
    return out


_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.int32: torch.int32}


@pytest.mark.parametrize("dtype", list(_BITS), ids=str)
def test_swapping_lane_pairs_is_exact(dtype):
    x = torch.randint(-1000, 1000, (20, 128)).to(dtype)
    x[3, 5] = float("nan") if dtype.is_floating_point else 7
    x[4, 6] = -0.0 if dtype.is_floating_point else -7
    expected = x.reshape(20, 64, 2).flip(-1).reshape(20, 128).view(_BITS[dtype])
    _, out = code_and_output(swap_pairs, (x,))
    assert torch.equal(out.view(_BITS[dtype]), expected)
    assert torch.equal(run_ref(swap_pairs, (x,)).view(_BITS[dtype]), expected)


@pallasite.kernel
def split_loaded_pairs(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A tensor stored as pairs: split by subscripts; split(join(a, b)) is (a, b)."""
    m, k, _ = x.size()
    first = torch.empty([m, k], dtype=x.dtype)
    second = torch.empty([m, k], dtype=x.dtype)
    for tile_m in hl.tile(m, block_size=8):
        a, b = hl.split(x[tile_m, :, :])
        again_a, again_b = hl.split(hl.join(a, b * 2))
        first[tile_m, :] = again_a
        second[tile_m, :] = again_b
    return first, second


def test_split_of_loaded_pairs_and_of_a_join():
    x = torch.randn(20, 16, 2)
    _, (first, second) = code_and_output(split_loaded_pairs, (x,))
    assert torch.equal(first, x[..., 0]) and torch.equal(second, x[..., 1] * 2)
    ref_first, ref_second = run_ref(split_loaded_pairs, (x,))
    assert torch.equal(ref_first, first) and torch.equal(ref_second, second)


@pallasite.kernel
def rope_per_head(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE over the heads of a row, one head per inner-loop step (3-d pairs)."""
    m, h, d = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m, block_size=8):
        c, s = cos[tile_m, :], sin[tile_m, :]
        for tile_h in hl.tile(h, block_size=1):
            x0, x1 = hl.split(x[tile_m, tile_h, :].reshape(tile_m, tile_h, d // 2, 2))
            c3, s3 = c[:, None, :], s[:, None, :]
            joined = hl.join(x0 * c3 - x1 * s3, x0 * s3 + x1 * c3)
            out[tile_m, tile_h, :] = joined.reshape(tile_m, tile_h, d)
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_rope_in_an_inner_loop(loop_type):
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(20, 3, 128, generator=generator)
    angles = torch.rand(20, 64, generator=generator) * 6
    cos, sin = torch.cos(angles), torch.sin(angles)
    expected = torch.stack([_rope_reference(x[:, i], cos, sin) for i in range(3)], 1)
    _, out = code_and_output(rope_per_head, (x, cos, sin), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, run_ref(rope_per_head, (x, cos, sin)))


@pallasite.kernel
def split_of_odd_width(x: torch.Tensor) -> torch.Tensor:
    m, d = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m, block_size=8):
        a, b = hl.split(x[tile_m, :])
        out[tile_m, :] = a + b
    return out


def test_split_of_a_last_dim_other_than_two_is_refused():
    with pytest.raises(exc.ShapeMismatch, match="hl.split splits a last dim of size 2") as info:
        split_of_odd_width(torch.randn(16, 128))
    assert "hl.split(x[tile_m, :])" in str(info.value)
    with pytest.raises(exc.ShapeMismatch, match="hl.split splits a last dim of size 2"):
        run_ref(split_of_odd_width, (torch.randn(16, 128),))


def test_split_and_join_are_in_hl_with_docstrings():
    for name in ("split", "join"):
        assert name in hl.__all__ and getattr(hl, name).__doc__


@pallasite.kernel
def rope_by_subscripts(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE written with torch only: pairs picked by subscripts and unbind, stacked back."""
    m, d = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m, block_size=8):
        pairs = x[tile_m, :].view(tile_m, d // 2, 2)
        x0, x1 = pairs[..., 0], pairs[:, :, 1]
        y0, y1 = pairs.unbind(-1)
        c, s = cos[tile_m, :], sin[tile_m, :]
        rotated = torch.stack([x0 * c - x1 * s, y0 * s + y1 * c], dim=-1)
        out[tile_m, :] = rotated.flatten(1)
    return out


def test_rope_with_subscripts_unbind_stack_and_flatten():
    generator = torch.Generator().manual_seed(11)
    x = torch.randn(20, 128, generator=generator)
    angles = torch.rand(20, 64, generator=generator) * 6
    args = (x, torch.cos(angles), torch.sin(angles))
    _, out = code_and_output(rope_by_subscripts, args)
    torch.testing.assert_close(out, _rope_reference(*args))
    torch.testing.assert_close(out, run_ref(rope_by_subscripts, args))
    ops = [node.op for node in _recorded(rope_by_subscripts, args)]
    assert ops.count("gather") == 6 and "subview" not in ops  # four halves, two for the interleave
