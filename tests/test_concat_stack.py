"""torch.cat and torch.stack of tile values, along every axis of a tile.

Pieces that fill whole Mosaic tiles along the concatenated axis (lanes: multiples of
128; sublanes: of 8 rows for 32-bit values, 16 for 16-bit) are joined by
`jnp.concatenate`; any other piece along one of the two minor axes is placed by the
bit-exact selects of `pallasite/runtime/relayout.py`, so the same kernel lowers for every
chip (the test plugin lowers each for v5e/v6e/v7x). `stack` is `cat` of unsqueezed
pieces. Rows are partial tiles (20 rows, blocks of 8): interpret mode fills their padding
with NaN, which must stay out of the valid rows. Each result matches torch and reference
mode bit for bit (a concatenation computes nothing).
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


def _input(shape, dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.int32:
        return torch.randint(-1000, 1000, shape, generator=generator, dtype=torch.int32)
    return torch.randn(*shape, generator=generator).to(dtype)


def _check(kernel, args, expected):
    code, out = code_and_output(kernel, args)
    assert torch.equal(out, expected)
    assert torch.equal(run_ref(kernel, args), expected)
    return code


@pallasite.kernel
def cat_lanes(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m = x.size(0)
    out = torch.empty([m, x.size(1) + y.size(1)], dtype=torch.promote_types(x.dtype, y.dtype))
    for tile_m in hl.tile(m, block_size=8):
        out[tile_m, :] = torch.cat([x[tile_m, :], y[tile_m, :]], dim=1)
    return out


@pytest.mark.parametrize("widths, dtype, aligned", [
    ((128, 256), torch.float32, True),
    ((64, 64), torch.float32, False),
    ((96, 160), torch.bfloat16, False),
    ((128, 128), torch.int32, True),
    ((32, 96), torch.int32, False),
], ids=["aligned-f32", "halves-f32", "unaligned-bf16", "aligned-i32", "unaligned-i32"])
def test_cat_along_the_lanes(widths, dtype, aligned):
    x, y = _input((20, widths[0]), dtype, 1), _input((20, widths[1]), dtype, 2)
    code = _check(cat_lanes, (x, y), torch.cat([x, y], 1))
    assert ("relayout.concatenate" in code) != aligned
    assert ("jnp.concatenate" in code) == aligned


def test_cat_keeps_nan_inf_and_negative_zero_bits_and_promotes_dtypes():
    x = torch.tensor([[float("nan"), float("inf"), -0.0, -float("inf")] * 16] * 8)
    y = torch.randn(8, 32).to(torch.bfloat16)
    code, out = code_and_output(cat_lanes, (x, y))
    expected = torch.cat([x, y], 1)  # torch promotes bfloat16 to float32
    assert out.dtype == torch.float32
    assert torch.equal(out.view(torch.int32), expected.view(torch.int32))
    assert torch.equal(run_ref(cat_lanes, (x, y)).view(torch.int32), expected.view(torch.int32))


@pallasite.kernel
def cat_three(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m, 2 * n + y.size(1)], dtype=x.dtype)
    for tile_m in hl.tile(m, block_size=8):
        a = x[tile_m, :]
        out[tile_m, :] = torch.concat((a, y[tile_m, :], a * 2), -1)
    return out


def test_cat_of_three_pieces_with_a_negative_dim():
    x, y = _input((20, 32), torch.float32, 3), _input((20, 64), torch.float32, 4)
    _check(cat_three, (x, y), torch.cat([x, y, x * 2], -1))


@pallasite.kernel
def cat_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    b, r, n = x.size()
    out = torch.empty([b, r + y.size(1), n], dtype=x.dtype)
    for tile_b in hl.tile(b, block_size=2):
        out[tile_b, :, :] = torch.cat([x[tile_b, :, :], y[tile_b, :, :]], 1)
    return out


@pytest.mark.parametrize("rows, dtype, aligned", [
    ((8, 16), torch.float32, True), ((4, 4), torch.float32, False), ((8, 8), torch.bfloat16, False),
], ids=["aligned-f32", "unaligned-f32", "unaligned-bf16"])
def test_cat_along_the_sublanes(rows, dtype, aligned):
    """Blocks of 2 over 3 batches: the last is partial, padded along the leading axis."""
    x, y = _input((3, rows[0], 128), dtype, 5), _input((3, rows[1], 128), dtype, 6)
    code = _check(cat_rows, (x, y), torch.cat([x, y], 1))
    assert ("relayout.concatenate" in code) != aligned


@pallasite.kernel
def stacks(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m, n = x.size()
    leading = torch.empty([2, m, n], dtype=x.dtype)
    middle = torch.empty([m, 2, n], dtype=x.dtype)
    last = torch.empty([m, n, 2], dtype=x.dtype)
    for tile_m in hl.tile(m, block_size=8):
        a, b = x[tile_m, :], y[tile_m, :]
        leading[:, tile_m, :] = torch.stack([a, b])
        middle[tile_m, :, :] = torch.stack((a, b), dim=1)
        last[tile_m, :, :] = torch.stack([a, b], -1)
    return leading, middle, last


def test_stack_along_each_axis():
    x, y = _input((20, 128), torch.float32, 7), _input((20, 128), torch.float32, 8)
    expected = tuple(torch.stack([x, y], dim) for dim in (0, 1, 2))
    _, outs = code_and_output(stacks, (x, y))
    for out, want, ref in zip(outs, expected, run_ref(stacks, (x, y))):
        assert torch.equal(out, want) and torch.equal(ref, want)
    (call,) = stacks.bind((x, y)).plan().calls
    recorded = [node.op for node in pallasite.ir.walk_nodes(call.call.loop.body)]
    assert recorded.count("cat") == 3 and "stack" not in recorded  # stack is cat of unsqueezed pieces


@pallasite.kernel
def cat_in_inner_loop(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Each chunk of x beside the same chunk of y, summed over the chunks."""
    m, n = x.size()
    out = torch.empty([m, 256], dtype=torch.float32)
    for tile_m in hl.tile(m, block_size=8):
        acc = hl.zeros([tile_m, 256], dtype=torch.float32)
        for tile_n in hl.tile(n, block_size=128):
            pair = torch.cat([x[tile_m, tile_n], y[tile_m, tile_n]], dim=1)
            acc = acc + torch.stack([pair, pair * 2]).sum(0)
        out[tile_m, :] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_cat_and_stack_in_an_inner_loop(loop_type):
    x, y = _input((20, 384), torch.float32, 9), _input((20, 384), torch.float32, 10)
    chunks = [torch.cat([x[:, j:j + 128], y[:, j:j + 128]], 1) * 3 for j in range(0, 384, 128)]
    expected = chunks[0] + chunks[1] + chunks[2]
    _, out = code_and_output(cat_in_inner_loop, (x, y), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, run_ref(cat_in_inner_loop, (x, y)))


@pallasite.kernel
def cat_along_a_partial_tile(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m, 2 * n], dtype=x.dtype)
    for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
        v = x[tile_m, tile_n]
        out[tile_m, tile_n] = torch.cat([v, v], 1)[:, :128]
    return out


def test_cat_along_a_partially_filled_tile_is_refused_at_its_line():
    with pytest.raises(exc.UnsupportedOperation, match="torch.cat/stack along axis 1") as info:
        cat_along_a_partial_tile(torch.randn(16, 200))
    assert "torch.cat([v, v], 1)" in str(info.value)


@pallasite.kernel
def cat_mismatched(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m, n], dtype=x.dtype)
    for tile_m in hl.tile(m, block_size=8):
        out[tile_m, :] = torch.cat([x[tile_m, :], x[tile_m, :].t()], 1)
    return out


def test_cat_of_mismatched_shapes_is_a_shape_error():
    with pytest.raises(exc.ShapeMismatch, match="torch.cat"):
        cat_mismatched(torch.randn(16, 128))


@pallasite.kernel
def cat_in_host_code(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    both = torch.cat([x, y], 0)  # a new tensor in host code, not a view of x
    out = torch.empty_like(both)
    for tile_m in hl.tile(both.size(0), block_size=8):
        out[tile_m, :] = both[tile_m, :] * 2
    return out


def test_cat_in_host_code():
    x, y = _input((8, 128), torch.float32, 11), _input((12, 128), torch.float32, 12)
    _check(cat_in_host_code, (x, y), torch.cat([x, y]) * 2)


def test_the_cost_model_charges_the_select_form_of_an_unaligned_cat():
    """A concatenation by selects costs a one-hot per piece; an aligned one a copy per vreg."""
    from types import SimpleNamespace

    from pallasite.plan.tpu_tiling import aligned_concatenation
    from pallasite.plan.vector_work import _concatenation_work

    def node(widths):
        pieces = [SimpleNamespace(shape=(8, w), dtype=torch.float32) for w in widths]
        return SimpleNamespace(args=pieces, kwargs={"dim": 1},
                               outputs=[SimpleNamespace(shape=(8, sum(widths)), dtype=torch.float32)])

    assert aligned_concatenation([(8, 128), (8, 256)], torch.float32, 1)
    assert not aligned_concatenation([(8, 64), (8, 64)], torch.float32, 1)
    assert aligned_concatenation([(16, 128), (16, 128)], torch.bfloat16, 0)
    assert not aligned_concatenation([(8, 128), (8, 128)], torch.bfloat16, 0)  # 16-row bf16 tiles
    assert aligned_concatenation([(3, 8, 7), (5, 8, 7)], torch.bfloat16, 0)  # a leading axis
    assert _concatenation_work(node((128, 256)), 3, 0).valu == 3
    assert _concatenation_work(node((64, 64)), 1, 0).valu == 3 * 2 * 64  # (8, 128 x 64) one-hots
