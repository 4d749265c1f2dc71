"""A partial tile's axis meets a fixed-size axis of its block's size (plan/extents.py).

Device values have their blocks' shapes, so `x[tm, tn]` (block 128, range [0, 100)) and
`out[tm, :]` (128 wide) looked alike: compiled, storing one into the other or adding them
used the block's padded tail as data (the stored columns 100..127 held garbage), where
eager PyTorch — and reference mode — raise a shape mismatch on the short tile. Both ways
now refuse it at the user's line; where the block divides the dim every tile is full and
the program runs, as in torch."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.config import FOLDED_LOOP_TYPE
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


def _kernel(form: str, width: int, loop_type: str):
    """The kernel with its config given: a call compiles just that config (the default
    config's blocks cover the 100 columns whole, where the frontend sees the mismatch)."""
    @pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128], pallas_loop_type=loop_type))
    def kernel(x):
        m = x.size(0)
        out = torch.zeros([m, 128], dtype=x.dtype, device=x.device)
        for tm in hl.tile(m):
            for tn in hl.tile(width):
                if form == "store":
                    out[tm, :] = x[tm, tn]
                elif form == "store_slice_of_the_block":
                    out[tm, :] = x[tm, tn][:, 0:128]
                elif form == "store_static_slice":
                    out[tm, 0:128] = x[tm, tn] * 2
                elif form == "add":
                    out[tm, :] = x[tm, tn] + out[tm, :]
                else:  # a fixed-size value into the tile (x in place)
                    x[tm, tn] = hl.zeros([tm, 128], dtype=x.dtype) + 1
        return out
    return kernel


REFUSED = ["store", "store_slice_of_the_block", "store_static_slice", "add"]
FORMS = REFUSED + ["fixed_into_tile"]


@pytest.mark.parametrize("form", REFUSED)
@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_partial_tile_beside_a_fixed_axis_is_refused_as_torch_refuses_it(form, loop_type):
    kernel, x = _kernel(form, 100, loop_type), torch.randn(16, 256)
    with pytest.raises(exc.ShapeMismatch) as compiled:
        kernel(x)
    assert "tile 'tn', whose last tile holds 100 of its block's 128" in str(compiled.value)
    assert "test_partial_tile_shapes.py" in str(compiled.value)  # the user's line
    with pytest.raises(exc.ShapeMismatch):  # eager PyTorch refuses it too
        run_ref(kernel, (x,))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_full_tiles_of_the_same_width_run_as_in_torch(form, loop_type):
    kernel, x = _kernel(form, 256, loop_type), torch.randn(16, 256)
    x_ref = x.clone()
    out = kernel(x)
    torch.testing.assert_close(out, run_ref(kernel, (x_ref,)))
    torch.testing.assert_close(x, x_ref)
    if form == "fixed_into_tile":
        assert torch.equal(x, torch.ones(16, 256))
        return
    expected = {"store": x[:, 128:], "store_slice_of_the_block": x[:, 128:], "store_static_slice": 2 * x[:, 128:],
                "add": x[:, :128] + x[:, 128:]}[form]
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_value_of_the_blocks_size_is_cut_to_a_partial_tile(loop_type):
    """`x[tm, tn] = hl.zeros([tm, 128]) + 1` with tn's tile 100 wide: the value is cut to the
    tile, in reference mode too (a block-sized value beside a tile, as Helion writes)."""
    kernel, x = _kernel("fixed_into_tile", 100, loop_type), torch.randn(16, 256)
    x_ref, expected = x.clone(), x.clone()
    expected[:, :100] = 1
    kernel(x)
    run_ref(kernel, (x_ref,))
    assert torch.equal(x, expected) and torch.equal(x_ref, expected)


@pallasite.kernel
def two_tiles_of_one_range(x):
    """Two loops over one static range: with a single (partial) tile their extents are equal;
    with two, a full tile of one meets the short tile of the other."""
    out = torch.zeros_like(x)
    for tm in hl.tile(x.size(0)):
        for ta in hl.tile(x.size(1)):
            for tb in hl.tile(x.size(1)):
                out[tm, ta] = x[tm, ta] + x[tm, tb]
    return out


def test_two_tiles_whose_range_is_one_tile_agree():
    x = torch.randn(8, 100)
    _, out = code_and_output(two_tiles_of_one_range, (x,), block_sizes=[8, 128, 128])
    torch.testing.assert_close(out, 2 * x)


def test_two_tiles_of_different_extents_are_refused():
    x = torch.randn(8, 200)
    with pytest.raises(exc.ShapeMismatch, match="tile 'ta'.*tile 'tb'"):
        code_and_output(two_tiles_of_one_range, (x,), block_sizes=[8, 128, 128])
    with pytest.raises(exc.ShapeMismatch):  # the 72 positions of tb's last tile into ta's 128
        run_ref(two_tiles_of_one_range, (x,), block_sizes=[8, 128, 128])


@pallasite.kernel
def broadcast_row(x, bias):
    """A size-1 axis broadcasts against a partial tile, as in torch."""
    out = torch.empty_like(x)
    for tm, tn in hl.tile(x.size()):
        out[tm, tn] = x[tm, tn] + bias[None, tn] + x[tm, tn].sum(1, keepdim=True)
    return out


def test_a_unit_axis_broadcasts_against_a_partial_tile():
    x, bias = torch.randn(20, 100), torch.randn(100)
    _, out = code_and_output(broadcast_row, (x, bias), block_sizes=[8, 128])
    torch.testing.assert_close(out, x + bias[None, :] + x.sum(1, keepdim=True))


@pallasite.kernel
def nested_segment_products(x, y, offsets):
    """Helion's nested hl.tile(start, end) over one segment twice: the two tiles' extents agree
    on every pair only when the segment's length is a block multiple (or a single tile)."""
    a, b = hl.specialize(x.size(1)), hl.specialize(x.size(2))
    segments = offsets.size(0) - 1
    out = torch.zeros([segments, a, b], dtype=x.dtype, device=x.device)
    for seg in hl.grid(segments):
        start, end = offsets[seg], offsets[seg + 1]
        acc = hl.zeros([1, a, b], dtype=x.dtype)
        for tile_i in hl.tile(start, end):
            for tile_j in hl.tile(start, end):
                acc = acc + (x[tile_i, :, :] * y[tile_j, :, :]).sum(dim=0).unsqueeze(0)
        out[seg, :, :] = acc.squeeze(0)
    return out


def _segment_products(x, y, offsets, block):
    out = torch.zeros(len(offsets) - 1, *x.shape[1:])
    for seg in range(len(offsets) - 1):
        s, e = int(offsets[seg]), int(offsets[seg + 1])
        for i in range(s, e, block):
            for j in range(s, e, block):
                out[seg] += (x[i:min(i + block, e)] * y[j:min(j + block, e)]).sum(0)
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_ranges_from_data_whose_tiles_agree_run(loop_type):
    x, y = torch.randn(128, 8, 128), torch.randn(128, 8, 128)
    offsets = torch.tensor([0, 64, 80, 96], dtype=torch.int32)  # lengths 64, 16 and 16: blocks of 32 agree
    _, out = code_and_output(nested_segment_products, (x, y, offsets), block_sizes=[32, 32],
                             pallas_loop_type=loop_type)
    torch.testing.assert_close(out, _segment_products(x, y, offsets, 32), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(run_ref(nested_segment_products, (x, y, offsets), block_sizes=[32, 32]), out,
                               rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_ranges_from_data_whose_tiles_differ_raise_in_interpret_mode(loop_type):
    """A 48-row segment in blocks of 32: tile_i's full tile meets tile_j's 16 rows, where eager
    PyTorch raises; so does reference mode (it cut the 32 rows to 16, as it cuts a block-sized
    value to a partial tile, before loads marked the axes with their tiles)."""
    x, y = torch.randn(128, 8, 128), torch.randn(128, 8, 128)
    offsets = torch.tensor([0, 64, 112], dtype=torch.int32)
    with pytest.raises(exc.ShapeMismatch, match="the ranges hold 48 and 48 positions"):
        code_and_output(nested_segment_products, (x, y, offsets), block_sizes=[32, 32], pallas_loop_type=loop_type)
    with pytest.raises(RuntimeError, match="must match the size"):  # the program in eager PyTorch
        x[64:96] * y[96:112]
    with pytest.raises(exc.ShapeMismatch, match="tile 'tile_i' .32 positions. and tile 'tile_j' .16."):
        run_ref(nested_segment_products, (x, y, offsets), block_sizes=[32, 32])


def _lookahead(extra: int, loop_type: str):
    @pallasite.kernel(config=pallasite.Config(block_sizes=[64, 64], pallas_loop_type=loop_type))
    def lookahead(x):
        """Each row tile's columns up to `extra` past its end: a range computed from the tile."""
        m, n = x.shape
        out = torch.zeros([m, 64], dtype=x.dtype, device=x.device)
        for tm in hl.tile(m):
            for tn in hl.tile(0, min(n, tm.end + extra)):
                out[tm, :] = x[tm, tn]
        return out
    return lookahead


@pytest.mark.parametrize("loop_type", [*LOOP_TYPES, FOLDED_LOOP_TYPE])
def test_a_range_computed_from_the_outer_tile_is_decided_when_planning(loop_type):
    """`hl.tile(0, tm.end + 16)` ends 16 past a block at every program: its last tile holds 16
    of 64 columns, stored into 64 — refused when planning (evaluated at every program, as a
    fold's range is), under every loop type, folded too; ending at tm.end, every tile is full."""
    x = torch.randn(128, 256)
    with pytest.raises(exc.ShapeMismatch, match="tile 'tn'.*a fixed number of positions"):
        _lookahead(16, loop_type).bind((x,)).plan()
    with pytest.raises(exc.ShapeMismatch):
        run_ref(_lookahead(16, loop_type), (x,))
    kernel = _lookahead(0, loop_type)
    expected = torch.cat([x[0:64, 0:64], x[64:128, 64:128]])  # each row tile's last column tile
    torch.testing.assert_close(kernel(x), expected)
    torch.testing.assert_close(run_ref(kernel, (x,)), expected)


def _scatter(value_tile: str, loop_type: str):
    @pallasite.kernel(config=pallasite.Config(block_sizes=[128, 128], pallas_loop_type=loop_type))
    def scatter(x, idx):
        """A scatter's target axis is its index vector's lanes: the value must be as long."""
        out = torch.zeros([300], dtype=x.dtype, device=x.device)
        for ta in hl.tile(idx.size(0)):
            for tb in hl.tile(x.size(0)):
                out[idx[ta]] = x[ta] if value_tile == "ta" else x[tb]
        return out
    return scatter


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_scatter_of_another_tiles_values_is_refused_where_their_extents_differ(loop_type):
    x, idx = torch.randn(200), torch.randperm(300)[:200].to(torch.int32)
    with pytest.raises(exc.ShapeMismatch, match="tile 'tb'.*the target's is tile 'ta'"):
        _scatter("tb", loop_type)(x, idx)
    with pytest.raises(exc.ShapeMismatch):  # 72 values into 128 positions
        run_ref(_scatter("tb", loop_type), (x, idx))
    expected = torch.zeros(300).index_put_((idx.long(),), x)
    torch.testing.assert_close(_scatter("ta", loop_type)(x, idx), expected)
    torch.testing.assert_close(run_ref(_scatter("ta", loop_type), (x, idx)), expected)


@pallasite.kernel
def contract_two_tiles(x, y):
    """x[tm, ta] @ y[tb, tn] over every (ta, tb) pair of one range: torch multiplies only
    where the two tiles' extents agree."""
    m, k = x.shape
    out = torch.zeros([m, y.size(1)], dtype=torch.float32, device=x.device)
    for tm, tn in hl.tile([m, y.size(1)]):
        acc = hl.zeros([tm, tn], dtype=torch.float32)
        for ta in hl.tile(k):
            for tb in hl.tile(k):
                acc = acc + x[tm, ta] @ y[tb, tn]
        out[tm, tn] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_matmul_contracting_two_tiles_of_different_extents_is_refused(loop_type):
    config = {"block_sizes": [8, 128, 128, 128], "pallas_loop_type": loop_type}
    x, y = torch.randn(8, 200), torch.randn(200, 128)
    with pytest.raises(exc.ShapeMismatch, match="contracted axes of x.* tile 'ta'.* tile 'tb'"):
        code_and_output(contract_two_tiles, (x, y), **config)
    with pytest.raises(exc.ShapeMismatch, match="contracts tile 'ta' .128 positions. with tile 'tb' .72."):
        run_ref(contract_two_tiles, (x, y), **config)
    x, y = torch.randn(8, 100), torch.randn(100, 128)  # one tile each, of 100: they agree
    _, out = code_and_output(contract_two_tiles, (x, y), **config)
    torch.testing.assert_close(out, x @ y, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(run_ref(contract_two_tiles, (x, y), **config), out, rtol=1e-4, atol=1e-4)


@pallasite.kernel(config=pallasite.Config(block_sizes=[64]))
def mismatched_dot(a, b):
    """K of 32 against 48 rows: a shape error in torch, compiled and in reference mode (which cut
    b to 32 rows, as it cuts a block-sized operand to a short tile, a trial found)."""
    out = torch.empty([a.size(0), b.size(1)], device=a.device)
    for tm in hl.tile(a.size(0)):
        out[tm, :] = hl.dot(a[tm, :], b[:, :])
    return out


def test_a_contraction_of_mismatched_fixed_sizes_is_refused_both_ways():
    a, b = torch.randn(100, 32), torch.randn(48, 16)
    with pytest.raises(exc.ShapeMismatch, match="same reduction dim"):
        mismatched_dot(a, b)
    with pytest.raises(exc.ShapeMismatch, match=r"contracts a slice of a tensor \(32 positions\) with a slice of a tensor \(48\)"):
        run_ref(mismatched_dot, (a, b))


def _slice_beside_tile(form: str, loop_type: str):
    @pallasite.kernel(config=pallasite.Config(block_sizes=[64, 64], pallas_loop_type=loop_type))
    def slice_beside_tile(x, y):
        """A slice of a tensor (a fixed part of it, not a block-sized value) beside a tile."""
        m, n = y.size()
        out = torch.zeros_like(y)
        for tm in hl.tile(m):
            for tn in hl.tile(n):
                if form == "add":
                    out[tm, tn] = x[tm, :64] + y[tm, tn]
                else:
                    out[tm, tn] = x[tm, 0:64] * 2
        return out
    return slice_beside_tile


@pytest.mark.parametrize("form", ["add", "store"])
@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_slice_of_a_tensor_beside_a_partial_tile_is_refused_both_ways(form, loop_type):
    """A trial: x[tm, :64] + y[tm, tn] with tn's last tile 36 wide ran both ways on x[:, :36]
    (the slice cut as a block-sized value is); torch raises. Where every tile is full, it runs."""
    x, y = torch.randn(100, 64), torch.randn(100, 100)
    kernel = _slice_beside_tile(form, loop_type)
    with pytest.raises(exc.ShapeMismatch, match="tile 'tn', whose last tile holds 36 of its block's 64"):
        kernel(x, y)
    with pytest.raises(exc.ShapeMismatch):
        run_ref(kernel, (x, y))
    y = torch.randn(100, 128)
    expected = (x + y[:, 64:]) if form == "add" else x * 2
    torch.testing.assert_close(kernel(x, y)[:, 64:], expected)
    torch.testing.assert_close(run_ref(kernel, (x, y))[:, 64:], expected)
