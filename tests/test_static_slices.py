"""Static slices of a whole tensor axis in device code (issue 22 §2): `x[t, :half]`,
`x[t, half:]`, `out[..., :112]`, `x[t, a:b]` with bounds known when compiling, read and
written. The axis's block is the whole axis and the access is a static sub-view of it
(`ref[:, a:b]`); bounds follow Python (negative from the end, None, clamped), a step other
than 1 and bounds only the data knows are clear errors."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.ir import StaticSlice
from pallasite.plan.loops import LOOP_TYPES
from pallasite.plan.plans import BlockKind, RefOffset
from pallasite.testing import code_and_output, run_ref


def _close(out, ref):
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pallasite.kernel
def rope_halves(x, cos, sin):
    """Helion's RoPE form: the two halves of the last dim, read and written."""
    m, d = x.shape
    half = d // 2
    out = torch.empty_like(x)
    for tm in hl.tile(m, block_size=8):
        x1 = x[tm, :half]
        x2 = x[tm, half:]
        c, s = cos[tm, :], sin[tm, :]
        out[tm, :half] = x1 * c - x2 * s
        out[tm, half:] = x2 * c + x1 * s
    return out


def _rope_torch(x, cos, sin):
    half = x.shape[1] // 2
    x1, x2 = x[:, :half], x[:, half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], 1)


@pytest.mark.parametrize("d", [256, 64])  # halves of whole vregs, and of one vreg's lanes
def test_rope_halves(d):
    x, cos, sin = torch.randn(20, d), torch.randn(20, d // 2), torch.randn(20, d // 2)
    code, out = code_and_output(rope_halves, (x, cos, sin))
    _close(out, _rope_torch(x, cos, sin))
    _close(run_ref(rope_halves, (x, cos, sin)), _rope_torch(x, cos, sin))
    assert f"x_ref[:, 0:{d // 2}]" in code and f"out_ref[:, {d // 2}:{d}]" in code
    assert "the static window" in code  # the generated code says what the access reads
    plan = rope_halves.bind((x, cos, sin)).plan()
    (call,) = plan.calls
    (x_operand,) = [op for op in call.inputs if op.symbol.name == "x"]
    assert x_operand.axes[1].kind is BlockKind.FULL and "static slice" in x_operand.axes[1].reason


@pallasite.kernel
def write_prefix(x, out):
    """`out[..., :112] = v`: the rest of `out` keeps its contents (zeros from the host)."""
    b, n, d = x.shape
    for tb in hl.tile(b, block_size=2):
        out[tb, :, :112] = x[tb, :, :112] * 2
    return out


def test_store_prefix_keeps_the_rest():
    x = torch.randn(3, 16, 128)
    out = torch.zeros(3, 16, 128)
    expected = torch.zeros(3, 16, 128)
    expected[..., :112] = x[..., :112] * 2
    _, result = code_and_output(write_prefix, (x, out.clone()))
    _close(result, expected)
    _close(run_ref(write_prefix, (x, out.clone())), expected)


@pallasite.kernel
def python_bounds(x):
    """Bounds as Python reads them: negative, None, past the end (clamped)."""
    m, n = x.shape
    out = torch.zeros([m, 3], dtype=x.dtype, device=x.device)
    for tm in hl.tile(m, block_size=8):
        last3 = x[tm, -3:]
        inner = x[tm, 1:-1].sum(1)
        clamped = x[tm, n - 2:n + 50].sum(1)  # Python clamps the stop to the size
        out[tm, :] = last3 + inner[:, None] + clamped[:, None]
    return out


def test_negative_none_and_clamped_bounds():
    x = torch.randn(13, 40)
    expected = x[:, -3:] + x[:, 1:-1].sum(1, keepdim=True) + x[:, -2:].sum(1, keepdim=True)
    _, out = code_and_output(python_bounds, (x,))
    _close(out, expected)
    _close(run_ref(python_bounds, (x,)), expected)
    index = [node.index for node in _loads(python_bounds, (x,))]
    assert (index[0][1], index[1][1], index[2][1]) == (StaticSlice(37, 40), StaticSlice(1, 39), StaticSlice(38, 40))


def _loads(kernel, args):
    from pallasite.ir import Load, walk_nodes

    plan = kernel.bind(args).plan()
    return [node for call in plan.calls for node in walk_nodes(call.call.loop.body) if isinstance(node, Load)]


@pallasite.kernel
def sublane_window(x):
    """A window of the second-to-last axis (rows 2:5), with a tile on the last."""
    r, n = x.shape
    out = torch.empty([3, n], dtype=x.dtype, device=x.device)
    for tn in hl.tile(n, block_size=128):
        out[:, tn] = x[2:5, tn] * 3
    return out


def test_window_of_rows():
    x = torch.randn(16, 300)
    _, out = code_and_output(sublane_window, (x,))
    _close(out, x[2:5] * 3)
    _close(run_ref(sublane_window, (x,)), x[2:5] * 3)


@pallasite.kernel
def specialized_width(x, w):
    m, n = x.shape
    k = hl.specialize(w.size(0))
    out = torch.empty([m, k], dtype=x.dtype, device=x.device)
    for tm in hl.tile(m, block_size=8):
        out[tm, :] = x[tm, :k] + w[None, :]
    return out


def test_hl_specialize_bound():
    x, w = torch.randn(16, 256), torch.randn(48)
    _, out = code_and_output(specialized_width, (x, w))
    _close(out, x[:, :48] + w)
    _close(run_ref(specialized_width, (x, w)), x[:, :48] + w)


@pallasite.kernel
def window_then_narrow(x):
    """A static window read as a block, then narrowed: the narrowing read adds its run to
    the window's start (one ref read, no copy)."""
    m, n = x.shape
    out = torch.empty([m, 2], dtype=x.dtype, device=x.device)
    for tm in hl.tile(m, block_size=8):
        blk = x[tm, 4:20]
        out[tm, :] = blk[:, 3:5] * 2
    return out


def test_window_then_narrowing_read():
    x = torch.randn(16, 128)
    code, out = code_and_output(window_then_narrow, (x,))
    _close(out, x[:, 7:9] * 2)
    _close(run_ref(window_then_narrow, (x,)), x[:, 7:9] * 2)
    assert "x_ref[:, 7:9]" in code


@pallasite.kernel
def swap_halves_inner(x):
    """Static windows under an inner loop: each k tile's halves are swapped into `out` and
    their products summed into a per-row total (k = 12: a partial last k tile)."""
    m, k, d = x.shape
    half = d // 2
    out = torch.empty_like(x)
    total = torch.empty([m, half], dtype=x.dtype, device=x.device)
    for tm in hl.tile(m, block_size=8):
        acc = hl.zeros([tm, half], dtype=torch.float32)
        for tk in hl.tile(k, block_size=8):
            a = x[tm, tk, :half]
            b = x[tm, tk, half:]
            out[tm, tk, :half] = b
            out[tm, tk, half:] = a
            acc = acc + (a * b).sum(1)
        total[tm, :] = acc
    return out, total


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_inner_loop_windows(loop_type):
    x = torch.randn(8, 12, 256)
    expected = (torch.cat([x[..., 128:], x[..., :128]], 2), (x[..., :128] * x[..., 128:]).sum(1))
    _, (out, total) = code_and_output(swap_halves_inner, (x,), pallas_loop_type=loop_type)
    _close(out, expected[0])
    _close(total, expected[1])
    ref_out, ref_total = run_ref(swap_halves_inner, (x,), pallas_loop_type=loop_type)
    _close(ref_out, expected[0])
    _close(ref_total, expected[1])


# ------------------------------------------------------------------ refusals --


def _slicing(fn):
    @pallasite.kernel
    def kernel(x, n):
        m = x.size(0)
        out = torch.empty([m, 64], dtype=x.dtype, device=x.device)
        for tm in hl.tile(m, block_size=8):
            out[tm, :] = fn(x, tm, n)
        return out

    return kernel


@pytest.mark.parametrize("fn, message", [
    (lambda x, tm, n: x[tm, ::2], "step 2"),
    (lambda x, tm, n: x[tm, n[0]:n[0] + 64], r"the slice <a device value>:<a device value> on axis 1 needs "
                                             "compile-time int bounds"),
    (lambda x, tm, n: x[tm, 70:70], "selects no element"),
])
def test_refused_slices(fn, message):
    x = torch.randn(8, 128)
    with pytest.raises(exc.IndexingError, match=message) as info:
        code_and_output(_slicing(fn), (x, torch.tensor([3], dtype=torch.int32)))
    assert "test_static_slices.py" in str(info.value)  # names the user's line


@pallasite.kernel(config=pallasite.Config(block_sizes=[8]))
def last_columns_first(x, h: int):
    out = torch.zeros_like(x)
    for t in hl.tile(x.size(0)):
        out[t, :h] = x[t, x.size(1) - h:]
    return out


@pytest.mark.parametrize("h", [3, 64])
def test_slice_bounds_from_an_int_argument_are_constants_of_the_variant(h):
    """A trial's finding: `x[t, n - h:]` with an int argument h was refused compiled (its message
    named an internal value) while reference mode ran it; h is a constant of the variant, as in
    a shifted tile's `t + c`."""
    x = torch.randn(37, 130, generator=torch.Generator().manual_seed(1))
    expected = torch.zeros_like(x)
    expected[:, :h] = x[:, -h:]
    _, result = code_and_output(last_columns_first, (x, h))
    assert torch.equal(result, expected)
    assert torch.equal(run_ref(last_columns_first, (x, h)), expected)


def test_ref_offsets_are_static_slices():
    x = torch.randn(16, 128)
    plan = window_then_narrow.bind((x,)).plan()
    (call,) = plan.calls
    (access,) = [a for a in call.accesses.values() if a.ref_name == "x_ref"]
    assert access.ref_index[1] == RefOffset((4,), 16)
