"""Shifted tiles (issue 22 §2): `x[tile - 3]`, `x[tile.index + 130]`, `x[3 + tile]` read the
positions tile.index + c; a position outside the tensor reads 0 (as a tile's tail is masked),
so a causal convolution needs no bounds arithmetic; a store at a shifted tile writes the
positions inside the tensor and drops the rest. The axis stays resident; each access takes
the two block-aligned runs holding its lanes, selects and rotates them (`pltpu.roll`)
(plan: `TileShift`); tiles that start past a block multiple (`hl.tile(1, n)`) shift by that
much more. A shift that is not a compile-time int is refused."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.ir import ShiftedTile
from pallasite.plan.loops import LOOP_TYPES
from pallasite.plan.plans import BlockKind
from pallasite.testing import code_and_output, run_ref


def _shifted(x: torch.Tensor, c: int, dim: int = 0) -> torch.Tensor:
    """x at positions i + c along `dim`, 0 outside."""
    n = x.shape[dim]
    index = torch.arange(n) + c
    inside = (index >= 0) & (index < n)
    out = x.index_select(dim, index.clamp(0, n - 1))
    shape = [1] * x.ndim
    shape[dim] = n
    return torch.where(inside.reshape(shape), out, torch.zeros((), dtype=x.dtype))


@pallasite.kernel
def three_shifts(x):
    """Negative, positive past a whole block, and a constant first (n = 300: a partial last tile)."""
    n, = x.shape
    out = torch.empty_like(x)
    for t in hl.tile(n, block_size=128):
        out[t] = x[t - 3] + 10 * x[t.index + 130] + 100 * x[3 + t] + 1000 * x[t + 256]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_shifts_both_ways(dtype):
    x = torch.arange(1, 301).to(dtype)
    expected = _shifted(x, -3) + 10 * _shifted(x, 130) + 100 * _shifted(x, 3) + 1000 * _shifted(x, 256)
    code, out = code_and_output(three_shifts, (x,))
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(three_shifts, (x,)), expected)
    assert "pltpu.roll" in code and "read 0" in code
    (node,) = [n for call in three_shifts.bind((x,)).plan().calls for n in _loads(call)
               if n.index[0] == ShiftedTile(n.index[0].dim, -3)]
    assert node.index[0].offset == -3


def _loads(call):
    from pallasite.ir import Load, walk_nodes

    return [node for node in walk_nodes(call.call.loop.body) if isinstance(node, Load)]


@pallasite.kernel
def causal_depthwise_conv(x, weight, bias):
    """A causal depthwise conv1d in Helion's form: taps read at `seq - shift` under an extra
    mask (the shifted read already gives 0 before the start)."""
    batch, channels, seqlen = x.shape
    width = hl.specialize(weight.size(1))
    out = torch.empty_like(x)
    for tb, td, ts in hl.tile([batch, channels, seqlen], block_size=[1, 8, 128]):
        seq = ts.index
        total = hl.zeros([td, ts], dtype=torch.float32) + bias[td][:, None]
        for tap in range(width):
            back = width - 1 - tap
            values = hl.load(x, [tb.begin, td, seq - back], extra_mask=((seq < seqlen) & (seq >= back))[None, :])
            total = total + values * weight[td, tap][:, None]
        out[tb, td, ts] = total[None, :, :].to(out.dtype)
    return out


def test_causal_conv1d_form():
    x, weight, bias = torch.randn(2, 16, 300), torch.randn(16, 4), torch.randn(16)
    expected = F.conv1d(F.pad(x, (3, 0)), weight.unsqueeze(1), bias=bias, groups=16)
    _, out = code_and_output(causal_depthwise_conv, (x, weight, bias))
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(run_ref(causal_depthwise_conv, (x, weight, bias)), expected, atol=1e-4, rtol=1e-4)
    plan = causal_depthwise_conv.bind((x, weight, bias)).plan()
    (x_operand,) = [op for op in plan.calls[0].inputs if op.symbol.name == "x"]
    assert x_operand.axes[-1].kind is BlockKind.RESIDENT and "shifted" in x_operand.axes[-1].reason


@pallasite.kernel
def row_stencil(x):
    """Shifted rows (the sublane axis) in an inner loop: out = x[r - 1] - 2 x[r] + x[r + 1]."""
    m, n = x.shape
    out = torch.empty_like(x)
    for tn in hl.tile(n, block_size=128):
        for tm in hl.tile(m, block_size=8):
            out[tm, tn] = x[tm - 1, tn] - 2 * x[tm, tn] + x[tm + 1, tn]
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_shifted_rows_in_inner_loop(loop_type):
    x = torch.randn(20, 256)  # 20 rows: a partial last row tile
    expected = _shifted(x, -1) - 2 * x + _shifted(x, 1)
    _, out = code_and_output(row_stencil, (x,), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(row_stencil, (x,), pallas_loop_type=loop_type), expected)


@pallasite.kernel
def shifted_sum(x):
    """A reduction over a shifted partial tile sees only its valid lanes (the tile's padding is
    masked as a tile's), and positions past the tensor add 0."""
    m, n = x.shape
    out = torch.zeros([m], dtype=x.dtype, device=x.device)
    for tm in hl.tile(m, block_size=8):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tn in hl.tile(n, block_size=128):
            acc = acc + x[tm, tn + 5].sum(1)
        out[tm] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_reduction_over_shifted_partial_tile(loop_type):
    x = torch.randn(16, 200)
    expected = x[:, 5:].sum(1)
    _, out = code_and_output(shifted_sum, (x,), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(run_ref(shifted_sum, (x,), pallas_loop_type=loop_type), expected,
                               atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------ refusals --


@pallasite.kernel
def store_shifted(x):
    """Stores at shifted tiles, both ways (300 elements: a partial last tile); `out` starts as
    zeros, so the positions no lane lands on must keep them."""
    n, = x.shape
    later = torch.zeros_like(x)
    earlier = torch.zeros_like(x)
    for t in hl.tile(n, block_size=128):
        later[t + 3] = x[t]
        earlier[t.index - 130] = x[t] * 2
    return later, earlier


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_stores_at_shifted_tiles_drop_positions_outside(dtype):
    x = torch.arange(1, 301).to(dtype)
    later, earlier = torch.zeros_like(x), torch.zeros_like(x)
    later[3:] = x[:297]
    earlier[:170] = x[130:] * 2
    _, (out_later, out_earlier) = code_and_output(store_shifted, (x,))
    torch.testing.assert_close(out_later, later)
    torch.testing.assert_close(out_earlier, earlier)
    ref_later, ref_earlier = run_ref(store_shifted, (x,))
    torch.testing.assert_close(ref_later, later)
    torch.testing.assert_close(ref_earlier, earlier)


@pallasite.kernel
def shift_rows_down(x):
    """A shifted store of rows in an inner loop: out[r + 1] = x[r]."""
    m, n = x.shape
    out = torch.zeros_like(x)
    for tn in hl.tile(n, block_size=128):
        for tm in hl.tile(m, block_size=8):
            out[tm + 1, tn] = x[tm, tn]
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_shifted_row_store_in_inner_loop(loop_type):
    x = torch.randn(20, 256)
    expected = torch.zeros_like(x)
    expected[1:] = x[:-1]
    _, out = code_and_output(shift_rows_down, (x,), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(shift_rows_down, (x,), pallas_loop_type=loop_type), expected)


@pallasite.kernel
def float_shift(x):
    n, = x.shape
    out = torch.empty_like(x)
    for t in hl.tile(n, block_size=128):
        out[t] = x[t + 1.5]
    return out


@pallasite.kernel
def grid_index_shift(x):
    out = torch.zeros_like(x)
    for g in hl.grid(2):
        for t in hl.tile(128, block_size=128):
            out[t + g * 128] = x[g * 128 + t] + 1  # trial OO: reference mode read 0 past x's end
    return out


@pytest.mark.parametrize("kernel, error, message, in_reference", [
    (float_shift, exc.UnsupportedSyntax, "compile-time int", True),
    (grid_index_shift, exc.UnsupportedSyntax, "compile-time int", True),
])
def test_refused(kernel, error, message, in_reference):
    x = torch.randn(256)
    with pytest.raises(error, match=message) as info:
        code_and_output(kernel, (x,))
    assert "test_offset_tiles.py" in str(info.value)
    if in_reference:
        with pytest.raises(error, match=message):
            run_ref(kernel, (x,))


@pallasite.kernel
def lanes_from(x, begin: hl.constexpr, shift: hl.constexpr):
    n, = x.shape
    out = torch.zeros_like(x)
    for t in hl.tile(begin, n, block_size=128):
        out[t] = x[t + shift] + x[t]
    return out


@pallasite.kernel
def rows_from(x, begin: hl.constexpr, shift: hl.constexpr):
    m, n = x.shape
    out = torch.zeros_like(x)
    for tm in hl.tile(begin, m, block_size=8):
        out[tm, :] = x[tm.index + shift, :] * 2 + x[tm, :]
    return out


@pallasite.kernel
def stored_from(x, begin: hl.constexpr, shift: hl.constexpr):
    n, = x.shape
    out = torch.zeros_like(x)
    for t in hl.tile(begin, n, block_size=128):
        out[t + shift] = x[t]
    return out


def _from(x, begin, shift, dim=0, scale=1):
    expected = _shifted(x, shift, dim) * scale + x
    expected.narrow(dim, 0, begin).zero_()
    return expected


@pytest.mark.parametrize("begin, shift", [(1, -1), (3, -1), (3, -3), (130, 5), (1, 127), (5, 200), (2, -130)])
def test_tiles_that_start_past_a_block_multiple(begin, shift):
    """`hl.tile(1, m)` with `x[t.index - 1]` (trial M: refused, as its tiles do not start
    at block multiples): the runs are the block multiples the tiles start in, rotated by
    the tile's lead plus the shift; lanes and rows, loads and stores, lowered (suite hook)."""
    x = torch.arange(1, 301, dtype=torch.float32)
    for kernel, expected in ((lanes_from, _from(x, begin, shift)),):
        _, out = code_and_output(kernel, (x, begin, shift))
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(run_ref(kernel, (x, begin, shift)), expected)
    rows = torch.randn(50, 128)
    row_begin, row_shift = begin % 8, shift % 11 - 5
    expected = _from(rows, row_begin, row_shift, scale=2)
    _, out = code_and_output(rows_from, (rows, row_begin, row_shift))
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(rows_from, (rows, row_begin, row_shift)), expected)
    stored = torch.zeros_like(x)
    positions = torch.arange(begin, 300) + shift
    inside = (positions >= 0) & (positions < 300)
    stored[positions[inside]] = x[begin:][inside]
    _, out = code_and_output(stored_from, (x, begin, shift))
    torch.testing.assert_close(out, stored)
    torch.testing.assert_close(run_ref(stored_from, (x, begin, shift)), stored)


@pallasite.kernel
def masked_1d_shift(x):
    """hl.load with a mask shaped like the shifted index: the index stays a shifted tile
    (no gather), and the mask's zeros agree with the shifted read's."""
    n, = x.shape
    out = torch.empty_like(x)
    for t in hl.tile(n, block_size=128):
        idx = t.index
        out[t] = hl.load(x, [idx - 2], extra_mask=idx >= 2) + x[t]
    return out


def test_masked_load_keeps_the_shifted_tile():
    x = torch.randn(300)
    expected = _shifted(x, -2) + x
    code, out = code_and_output(masked_1d_shift, (x,))
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(masked_1d_shift, (x,)), expected)
    plan = masked_1d_shift.bind((x,)).plan()
    assert not any(access.gather for access in plan.calls[0].accesses.values())


@pallasite.kernel
def narrowed_shift(x):
    """A narrowing read of a shifted load slices the computed value (it is no view of the ref)."""
    m, n = x.shape
    out = torch.empty([m, 2], dtype=x.dtype, device=x.device)
    for tm in hl.tile(m, block_size=8):
        row = x[tm - 1, :]
        out[tm, :] = row[:, 3:5]
    return out


def test_narrowing_a_shifted_load():
    x = torch.randn(16, 128)
    expected = _shifted(x, -1)[:, 3:5]
    _, out = code_and_output(narrowed_shift, (x,))
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(narrowed_shift, (x,)), expected)


@pallasite.kernel
def two_shifts(x):
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in hl.tile([m, n], block_size=[8, 128]):
        out[tm, tn] = x[tm - 1, tn + 1]
    return out


def test_two_moved_tiles_read_a_moved_block():
    """`tile + c` is the tile moved by c: an axis of the subscript as the tile is (Helion's
    meaning; torch gives tile arithmetic none), so two of them read a block, 0 outside."""
    x = torch.randn(16, 256)
    expected = _shifted(_shifted(x, -1, 0), 1, 1)
    _, out = code_and_output(two_shifts, (x,))
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(two_shifts, (x,)), expected)


@pallasite.kernel
def halves_by_offset(x, y):
    """Helion's `out[tile1.index + c, tile2 + c]`: one index tensor beside a moved tile."""
    n, m = x.size()
    out = torch.zeros(x.size(), dtype=torch.float32)
    for tile1, tile2 in hl.tile([n // 2, m // 2]):
        out[tile1, tile2] = x[tile1, tile2]
        out[tile1.index + n // 2, tile2] = y[tile1.index + n // 2, tile2]
        out[tile1, tile2 + m // 2] = x[tile1, tile2 + m // 2]
        out[tile1.index + n // 2, tile2 + m // 2] = y[tile1.index + n // 2, tile2 + m // 2]
    return out


@pytest.mark.parametrize("block", [[64, 64], [32, 64]])
def test_index_tensor_beside_a_moved_tile_reads_the_block(block):
    x, y = torch.randn(128, 128), torch.randn(128, 128)
    expected = torch.cat((x[:64], y[64:]))
    _, out = code_and_output(halves_by_offset, (x, y), block_sizes=block)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(halves_by_offset, (x, y)), expected)


@pallasite.kernel
def moved_store(x):
    m, n = x.shape
    out = torch.zeros_like(x)
    for tm, tn in hl.tile([m, n], block_size=[8, 128]):
        out[tm + 1, tn - 3] = x[tm, tn] * 2
    return out


def test_a_store_at_two_moved_tiles_drops_positions_outside():
    x = torch.randn(16, 256)
    expected = torch.zeros_like(x)
    expected[1:, :-3] = x[:-1, 3:] * 2
    _, out = code_and_output(moved_store, (x,))
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(moved_store, (x,)), expected)


@pallasite.kernel
def index_positions_pair(x):
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in hl.tile([m, n], block_size=[8, 128]):
        out[tm, tn] = x[tm.index - 1, tn.index + 1]
    return out


@pallasite.kernel
def moved_beside_pairs(x, rows, cols):
    b, m, n = x.shape
    out = torch.empty([b, m], dtype=x.dtype)
    for tb, tm in hl.tile([b, m], block_size=[8, 8]):
        out[tb, tm] = x[tb + 1, rows[tm], cols[tm]]
    return out


def test_index_tensors_still_pair_and_a_moved_tile_beside_pairs_is_refused():
    """`tile.index - 1` is a tensor of positions: two of them pair element by element as in
    torch ([8] and [128] do not broadcast: a clear error, not a block). A moved tile beside
    two paired index tensors is refused in both modes."""
    with pytest.raises(exc.IndexingError, match="do not broadcast"):
        code_and_output(index_positions_pair, (torch.randn(16, 256),))
    with pytest.raises(exc.IndexingError, match=r"shapes \[8\], \[128\], which do not broadcast"):
        run_ref(index_positions_pair, (torch.randn(16, 256),), block_sizes=[8, 128])
    args = (torch.randn(16, 8, 8), torch.arange(8, dtype=torch.int32), torch.arange(8, dtype=torch.int32))
    for run in (lambda: code_and_output(moved_beside_pairs, args), lambda: run_ref(moved_beside_pairs, args)):
        with pytest.raises(exc.IndexingError, match=r"moved tile \(`tile \+ c`\) beside several index tensors"):
            run()


@pallasite.kernel
def gather_at_moved_columns(table, idx):
    m, = idx.shape
    n = table.size(1)
    out = torch.empty([m, n], dtype=table.dtype)
    for tm, tn in hl.tile([m, n], block_size=[8, 128]):
        out[tm, tn] = table[idx[tm], tn + 1]
    return out


@pallasite.kernel
def moved_store_past_a_partial_tile(x):
    m, n = x.shape
    out = torch.zeros_like(x)
    for tm in hl.tile(0, 10, block_size=8):
        for tn in hl.tile(n, block_size=128):
            out[tm, tn + 1] = x[tm, tn]
    return out


@pallasite.kernel
def scatter_at_moved_columns(x, idx):
    m, n = x.shape
    out = torch.zeros_like(x)
    for tm, tn in hl.tile([m, n], block_size=[8, 128]):
        out[idx[tm], tn + 1] = x[tm, tn]
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_moved_tile_beside_a_gather_and_a_partial_tile(loop_type):
    """A gather picks its rows from the moved window; a store at a moved tile keeps the rows
    past a partial tile's end on the other axis (rows 10..15 of the second tile's block: a
    store at a shifted tile overwrote them before the multi-axis rewrite, silently)."""
    table, idx = torch.randn(32, 256), torch.randint(0, 32, (16,), dtype=torch.int32)
    expected = torch.cat([table[idx.long(), 1:], torch.zeros(16, 1)], 1)
    _, out = code_and_output(gather_at_moved_columns, (table, idx))
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(gather_at_moved_columns, (table, idx)), expected)
    x = torch.randn(16, 256)
    expected = torch.zeros_like(x)
    expected[:10, 1:] = x[:10, :-1]
    _, out = code_and_output(moved_store_past_a_partial_tile, (x,), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(moved_store_past_a_partial_tile, (x,)), expected)


def test_a_scatter_at_a_moved_tile_is_refused_in_both_modes():
    args = (torch.randn(16, 256), torch.randperm(16).to(torch.int32))
    for run in (lambda: code_and_output(scatter_at_moved_columns, args),
                lambda: run_ref(scatter_at_moved_columns, args)):
        with pytest.raises(exc.UnsupportedOperation, match="a scatter at a moved tile"):
            run()


@pallasite.kernel
def moved_beside_a_row_index(x):
    m, n = x.shape
    out = torch.zeros_like(x)
    for i in hl.grid(m):
        for tn in hl.tile(n):
            out[i, tn] = x[i, tn - 1] + x[2, tn + 1] * 10
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_moved_tile_beside_a_scalar_index(loop_type):
    """The second aligned run replaces the moved axis's ref item, not the item of the same
    number among the window's kept axes (a scalar index drops one)."""
    x = torch.randn(37, 300)
    expected = _shifted(x, -1, 1) + _shifted(x[2:3].expand(37, 300), 1, 1) * 10
    _, out = code_and_output(moved_beside_a_row_index, (x,), block_sizes=[128], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(moved_beside_a_row_index, (x,)), expected)


@pallasite.kernel(static_shapes=True)
def shifted_flags(x, y):
    """A shifted tile of bool and 8/16-bit tensors: the positions outside the tensor read 0."""
    n, = x.shape
    out = torch.empty_like(x)
    small = torch.empty_like(y)
    for t in hl.tile(n):
        out[t] = x[t - 1]
        small[t] = y[t + 2]
    return out, small


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.uint8])
@pytest.mark.parametrize("block", [4, 16])
def test_a_shifted_tile_of_a_bool_or_narrow_tensor(block, dtype):
    x = torch.tensor([True, False, False, True, True, False, True] * 3)
    y = torch.arange(21, dtype=torch.int32).to(dtype)
    expected = (torch.cat([torch.tensor([False]), x[:-1]]), torch.cat([y[2:], torch.zeros(2, dtype=dtype)]))
    for result in (code_and_output(shifted_flags, (x, y), block_sizes=[block])[1],
                   run_ref(shifted_flags, (x, y), block_sizes=[block])):
        torch.testing.assert_close(result[0], expected[0])
        torch.testing.assert_close(result[1], expected[1])


@pallasite.kernel
def shifted_by_an_argument(x, shift: int):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0), block_size=128):
        out[t] = x[t + shift]
    return out


def test_a_shift_an_int_argument_holds_is_a_constant_of_the_variant():
    """`x[t + c]` with c an int argument was refused compiled and ran in reference mode
    (trial R); c is now a constant of its variant, as an int argument sizing a tensor is."""
    x = torch.arange(1, 301, dtype=torch.float32)
    shifted_by_an_argument.reset()
    for shift in (3, -5, 3):
        _, out = code_and_output(shifted_by_an_argument, (x, shift))
        torch.testing.assert_close(out, _shifted(x, shift))
        torch.testing.assert_close(run_ref(shifted_by_an_argument, (x, shift)), _shifted(x, shift))
    assert shifted_by_an_argument.cache_size == 2


@pallasite.kernel
def index_shifted_by_arguments(x, back: int, ahead: int):
    """`tile.index - c`, `tile.index + c` with c an int argument: loads, `hl.load`, a store."""
    m, n = x.shape
    out = torch.zeros_like(x)
    for tn in hl.tile(n, block_size=128):
        for tm in hl.tile(m, block_size=8):
            behind = x[tm.index - back, tn]
            later = hl.load(x, [tm.index + ahead, tn])
            out[tm.index + ahead, tn] = behind + later
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_an_index_shifted_by_an_int_argument_is_a_shifted_tile(loop_type):
    """`x[t.index - c]` with c an int argument read as a gather compiled (ShapeMismatch at the
    first position outside the tensor) and as a shift in reference mode (0 there): the two
    modes disagreed. c is now a constant of the variant there too, as in `x[t + c]`."""
    x = torch.randn(20, 256)
    index_shifted_by_arguments.reset()
    for back, ahead in ((2, 3), (1, 5), (2, 3)):
        moved = _shifted(x, -back) + _shifted(x, ahead)
        expected = torch.zeros_like(x)
        expected[ahead:] = moved[:20 - ahead]
        _, out = code_and_output(index_shifted_by_arguments, (x, back, ahead), pallas_loop_type=loop_type)
        torch.testing.assert_close(out, expected)
        reference = run_ref(index_shifted_by_arguments, (x, back, ahead), pallas_loop_type=loop_type)
        torch.testing.assert_close(reference, expected)
    assert index_shifted_by_arguments.cache_size == 2


@pallasite.kernel
def positions_from(x, start: int):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0), block_size=128):
        out[t] = x[t] + (t.index + start).float()
    return out


def test_positions_an_argument_moves_stay_runtime_values():
    """Only an index makes the argument a constant: `t.index + start` in arithmetic (RoPE's
    positions) compiles once for every start."""
    x = torch.randn(300)
    positions_from.reset()
    for start in (0, 7, 1000):
        _, out = code_and_output(positions_from, (x, start))
        torch.testing.assert_close(out, x + torch.arange(start, start + 300).float())
    assert positions_from.cache_size == 1


@pallasite.kernel
def shifted_by_expressions(x, c: int):
    d = c + 1  # computed in host code from the argument
    out = torch.zeros_like(x)
    for t in hl.tile(x.size(0), block_size=8):
        out[t] = x[t.index - (c + 1)] + 10 * x[t.index - 2 * c] + 100 * x[t.index - d] + 1000 * x[t + (c - 1)]
    return out


def test_a_shift_computed_from_int_arguments_is_a_shifted_tile():
    """`x[t.index - (c + 1)]`, `2 * c`, `d = c + 1` read as gathers compiled (ShapeMismatch at the
    first position outside) and as shifts in reference mode (trial W); `t + (c - 1)` was refused
    with a proxy's repr."""
    x = torch.arange(1.0, 21.0)
    for c in (3, 2):
        expected = (_shifted(x, -(c + 1)) + 10 * _shifted(x, -2 * c) + 100 * _shifted(x, -(c + 1))
                    + 1000 * _shifted(x, c - 1))
        _, out = code_and_output(shifted_by_expressions, (x, c))
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(run_ref(shifted_by_expressions, (x, c)), expected)
