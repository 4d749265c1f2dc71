"""Scans along a dim of a tile: torch.cumsum/cumprod, hl.cumsum/cumprod, hl.associative_scan
with a user combine function (tuples too), and hl.reduce with a user combine function.

On a TPU each is a log-step scan of lane/sublane rotates and iota selects (Mosaic has
no scan primitive). A partial tile's padding sits at the end of the axis: a forward
scan never reads it, a reverse scan and a reduce only combine lanes below the valid
count. Interpret mode fills padding with NaN, so a leak would show in the results.
Each result matches torch and reference mode, in float32, bfloat16 and int32.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


def _tolerance(dtype):
    if dtype == torch.int32:
        return {"atol": 0, "rtol": 0}
    return {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 5e-2, "rtol": 2e-2}


def _input(shape, dtype, seed=0, near_one=False):
    """Random values; bfloat16 ones small integers, whose sums are exact in any order (a
    bfloat16 combine rounds each step, and a log-step scan adds in another order than
    torch's loop), or near 1 for products."""
    generator = torch.Generator().manual_seed(seed)
    if near_one and dtype == torch.int32:  # -1, 0, 1: torch's int64 products stay within int32
        return torch.randint(-1, 2, shape, generator=generator, dtype=torch.int32)
    if near_one:
        return (1 + 0.01 * torch.randn(*shape, generator=generator)).to(dtype)
    if dtype != torch.float32:
        return torch.randint(-5, 6, shape, generator=generator, dtype=torch.int32).to(dtype)
    return torch.randn(*shape, generator=generator)


def tiled(fn, x, blocks=(8, 128)):
    """`fn` applied to each (8, 128) tile of x, as the kernel sees them."""
    rows = []
    for i in range(0, x.shape[0], blocks[0]):
        rows.append(torch.cat([fn(x[i:i + blocks[0], j:j + blocks[1]]) for j in range(0, x.shape[1], blocks[1])], 1))
    return torch.cat(rows, 0)


def tile_map_kernel(fn):
    """`out[tm, tn] = fn(x[tm, tn])` over tiles of 8 x 128 (20 x 300: both tails partial)."""

    @pallasite.kernel
    def tile_map(x: torch.Tensor) -> torch.Tensor:
        m, n = x.size()
        out = torch.empty_like(x)
        for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
            out[tile_m, tile_n] = fn(x[tile_m, tile_n])
        return out

    return tile_map


def _flip_scan(scan, dim):
    return lambda v: scan(v.flip(dim)).flip(dim)


def _add(a, b):
    return a + b


def _running_max(a, b):
    return torch.maximum(a, b)


def _affine(a, b):
    """The composition of two affine maps x -> m * x + c (associative, not commutative)."""
    return b[0] * a[0], b[0] * a[1] + b[1]


TILE_SCANS = {
    # name: (kernel function, torch reference, dtypes)
    "cumsum_lanes": (lambda v: torch.cumsum(v, dim=1), lambda v: torch.cumsum(v, 1)),
    "cumsum_rows": (lambda v: v.cumsum(0), lambda v: v.cumsum(0)),
    "cumsum_negative_dim": (lambda v: torch.cumsum(v, -1), lambda v: torch.cumsum(v, -1)),
    "cumprod_lanes": (lambda v: torch.cumprod(v, 1), lambda v: torch.cumprod(v, 1)),
    "cumprod_rows": (lambda v: v.cumprod(dim=0), lambda v: v.cumprod(dim=0)),
    "hl_cumsum": (lambda v: hl.cumsum(v, 1), lambda v: torch.cumsum(v, 1)),
    "hl_cumsum_reverse_lanes": (lambda v: hl.cumsum(v, 1, reverse=True), _flip_scan(lambda v: v.cumsum(1), 1)),
    "hl_cumsum_reverse_rows": (lambda v: hl.cumsum(v, dim=0, reverse=True), _flip_scan(lambda v: v.cumsum(0), 0)),
    "hl_cumprod_reverse": (lambda v: hl.cumprod(v, 1, True), _flip_scan(lambda v: torch.cumprod(v, 1), 1)),
    "scan_add": (lambda v: hl.associative_scan(_add, v, dim=1), lambda v: torch.cumsum(v, 1)),
    "scan_max": (lambda v: hl.associative_scan(_running_max, v, 1), lambda v: torch.cummax(v, 1).values),
    "scan_max_reverse": (lambda v: hl.associative_scan(_running_max, v, 1, reverse=True),
                         _flip_scan(lambda v: torch.cummax(v, 1).values, 1)),
    "scan_max_reverse_rows": (lambda v: hl.associative_scan(_running_max, v, 0, reverse=True),
                              _flip_scan(lambda v: torch.cummax(v, 0).values, 0)),
}


SCAN_CASES = [pytest.param(name, dtype, id=f"{name}-{str(dtype)[6:]}") for name in TILE_SCANS
              for dtype in (torch.float32, torch.bfloat16, torch.int32)]


@pytest.mark.parametrize("name, dtype", SCAN_CASES)
def test_scan_of_a_partial_tile_matches_torch(name, dtype):
    """torch accumulates a bfloat16 cumsum/cumprod in float32, rounding each output once:
    so does the kernel."""
    fn, reference = TILE_SCANS[name]
    x = _input((20, 300), dtype, seed=1, near_one="cumprod" in name)
    kernel = tile_map_kernel(fn)
    out = kernel(x)
    torch.testing.assert_close(out, tiled(reference, x).to(dtype), **_tolerance(dtype))  # int64: int32 on TPU
    torch.testing.assert_close(out, run_ref(kernel, (x,)), **_tolerance(dtype))


# ------------------------------------------------------------ tuple scans --


def _affine_packed(a, b):
    """(m, c) pairs composing x -> m * x + c maps: associative, not commutative."""
    return b[0] * a[0], b[0] * a[1] + b[1]


def _affine_unpacked(m_a, c_a, m_b, c_b):
    return m_b * m_a, m_b * c_a + c_b


def _affine_reference(m, c, dim, reverse=False):
    """The sequential composition, element by element (torch's definition of the scan)."""
    if reverse:
        m_out, c_out = _affine_reference(m.flip(dim), c.flip(dim), dim)
        return m_out.flip(dim), c_out.flip(dim)
    ms, cs = [m.select(dim, 0)], [c.select(dim, 0)]
    for i in range(1, m.shape[dim]):
        mi, ci = m.select(dim, i), c.select(dim, i)
        ms.append(mi * ms[-1])
        cs.append(mi * cs[-1] + ci)
    return torch.stack(ms, dim), torch.stack(cs, dim)


def affine_scan_kernel(combine, dim, reverse):
    @pallasite.kernel
    def affine_scan(m: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows, cols = m.size()
        m_out, c_out = torch.empty_like(m), torch.empty_like(c)
        for tile_m, tile_n in hl.tile([rows, cols], block_size=[8, 128]):
            scanned_m, scanned_c = hl.associative_scan(combine, (m[tile_m, tile_n], c[tile_m, tile_n]), dim,
                                                       reverse=reverse)
            m_out[tile_m, tile_n] = scanned_m
            c_out[tile_m, tile_n] = scanned_c
        return m_out, c_out

    return affine_scan


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("combine", [_affine_packed, _affine_unpacked], ids=["packed", "unpacked"])
def test_tuple_scan_with_a_non_commutative_combine(combine, dim, reverse):
    """A first-order linear recurrence h = m * h + c, in both of Helion's combine forms; the
    argument order matters, so a swapped earlier/later pair would show."""
    m = _input((20, 300), torch.float32, seed=2, near_one=True)
    c = _input((20, 300), torch.float32, seed=3)
    kernel = affine_scan_kernel(combine, dim, reverse)
    m_out, c_out = kernel(m, c)
    blocks = [(slice(i, i + 8), slice(j, j + 128)) for i in range(0, 20, 8) for j in range(0, 300, 128)]
    for rows, cols in blocks:
        m_expected, c_expected = _affine_reference(m[rows, cols], c[rows, cols], dim, reverse)
        torch.testing.assert_close(m_out[rows, cols], m_expected, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(c_out[rows, cols], c_expected, rtol=1e-4, atol=1e-4)
    for out, ref in zip((m_out, c_out), run_ref(kernel, (m, c))):
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def _max_with_index(value_a, index_a, value_b, index_b):
    """A running (max, its first index) pair."""
    take_b = value_b > value_a
    return torch.where(take_b, value_b, value_a), torch.where(take_b, index_b, index_a)


@pallasite.kernel
def running_argmax(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m, n], dtype=torch.int32)
    for tile_m in hl.tile(m, block_size=8):
        values = x[tile_m, :]
        index = hl.arange(n)[None, :].expand(values.shape)
        _, best = hl.associative_scan(_max_with_index, (values, index), dim=1)
        out[tile_m, :] = best
    return out


def test_tuple_scan_of_values_and_indices():
    x = _input((12, 200), torch.float32, seed=4)
    expected = torch.cummax(x, 1).indices.to(torch.int32)
    torch.testing.assert_close(running_argmax(x), expected)
    torch.testing.assert_close(run_ref(running_argmax, (x,)), expected)


# --------------------------------------------------------------- hl.reduce --


def reduce_kernel(fn, out_columns):
    @pallasite.kernel
    def reduce_rows(x: torch.Tensor) -> torch.Tensor:
        m, n = x.size()
        out = torch.empty([m, out_columns], dtype=torch.float32)
        for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
            value = fn(x[tile_m, tile_n])
            out[tile_m, tile_n.id] = value if value.ndim == 1 else value[:, 0]
        return out

    return reduce_rows


REDUCES = {
    "max_default_other": (lambda v: hl.reduce(_running_max, v, dim=1), lambda v: v.amax(1)),
    "max_keep_dims": (lambda v: hl.reduce(_running_max, v, 1, keep_dims=True), lambda v: v.amax(1)),
    "sum_other": (lambda v: hl.reduce(_add, v, dim=-1, other=0.0), lambda v: v.sum(1)),
    "argmax_tuple": (lambda v: hl.reduce(_max_with_index, (v, v * 0 + hl.arange(128)[None, :].float()), 1)[1],
                     lambda v: v.argmax(1).float()),
}


@pytest.mark.parametrize("name", list(REDUCES))
def test_reduce_with_a_user_combine_over_a_partial_tile(name):
    """All-negative values: a padded lane filled with other=0 would win every max."""
    fn, reference = REDUCES[name]
    x = _input((20, 300), torch.float32, seed=5) - 10
    kernel = reduce_kernel(fn, 3)
    expected = torch.stack([reference(x[:, j:j + 128]) for j in range(0, 300, 128)], 1)
    out = kernel(x)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(kernel, (x,)), expected)


@pallasite.kernel
def tile_products(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([(m + 7) // 8, (n + 127) // 128], dtype=torch.float32)
    for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
        out[tile_m.id, tile_n.id] = hl.reduce(lambda a, b: a * b, x[tile_m, tile_n])
    return out


def test_reduce_over_every_dim_of_a_partial_tile():
    x = _input((20, 300), torch.float32, seed=6, near_one=True)
    expected = torch.stack([torch.stack([x[i:i + 8, j:j + 128].prod() for j in range(0, 300, 128)])
                            for i in range(0, 20, 8)])
    torch.testing.assert_close(tile_products(x), expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(run_ref(tile_products, (x,)), expected, rtol=1e-4, atol=1e-4)


@pallasite.kernel
def first_maxima(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m, 2], dtype=torch.int32)
    for tile_m in hl.tile(m, block_size=8):
        columns = hl.arange(n)[None, :].expand(tile_m, n)
        flat = tile_m.index[:, None] * n + columns
        _, best = hl.reduce(_max_with_index, (x[tile_m, :], columns), dim=1)
        _, first = hl.reduce(_max_with_index, (x[tile_m, :], flat))
        out[tile_m, 0] = best
        out[tile_m, 1] = first + best * 0
    return out


def test_reduce_gives_the_combine_the_earlier_elements_first():
    """Trial CC: a first-index argmax combine (keeps the earlier of equals: associative, not
    commutative) gave the last maximum compiled and the first in reference mode; both fold in
    order now, over every dim in row-major order."""
    x = torch.zeros(20, 130)
    x[:, 3] = x[:, 100] = 1
    x[7, 50] = 2  # the first tile's maximum over both dims
    x[16, 120] = x[17, 10] = 3
    per_tile = [7 * 130 + 50] * 8 + [8 * 130 + 3] * 8 + [16 * 130 + 120] * 4  # each row's tile's first maximum
    expected = torch.stack([x.argmax(1), torch.tensor(per_tile)], 1).int()
    torch.testing.assert_close(first_maxima(x), expected)
    torch.testing.assert_close(run_ref(first_maxima, (x,)), expected)


# ------------------------------------------------------------ inner loops --


@pallasite.kernel
def row_prefix_sums(x: torch.Tensor) -> torch.Tensor:
    """A running sum across the chunks of an inner loop: each chunk's scan plus the total
    carried from the chunks before it."""
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m, block_size=8):
        carried = hl.zeros([tile_m, 1], dtype=torch.float32)
        for tile_n in hl.tile(n, block_size=128):
            chunk = x[tile_m, tile_n].float()
            out[tile_m, tile_n] = (carried + torch.cumsum(chunk, dim=1)).to(x.dtype)
            carried = carried + chunk.sum(1, keepdim=True)
    return out


@pallasite.kernel
def reverse_scans_per_chunk(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m, block_size=8):
        for tile_n in hl.tile(n, block_size=128):
            chunk = x[tile_m, tile_n]
            suffix_max = hl.associative_scan(_running_max, chunk, 1, reverse=True)
            out[tile_m, tile_n] = suffix_max + hl.cumsum(chunk, 0, reverse=True)
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_scans_in_an_inner_loop(loop_type, dtype):
    x = _input((20, 300), dtype, seed=7)
    _, out = code_and_output(row_prefix_sums, (x,), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, torch.cumsum(x.float(), 1).to(dtype), **_tolerance(dtype))
    torch.testing.assert_close(out, run_ref(row_prefix_sums, (x,)), **_tolerance(dtype))
    _, out = code_and_output(reverse_scans_per_chunk, (x,), pallas_loop_type=loop_type)
    expected = tiled(lambda v: torch.cummax(v.flip(1), 1).values.flip(1) + v.flip(0).cumsum(0).flip(0).to(dtype), x)
    torch.testing.assert_close(out, expected, **_tolerance(dtype))
    torch.testing.assert_close(out, run_ref(reverse_scans_per_chunk, (x,)), **_tolerance(dtype))


# ------------------------------------------------------------------ ranks --


@pallasite.kernel
def vector_and_batch_scans(v: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    out_v = torch.empty_like(v)
    out_x = torch.empty_like(x)
    for tile in hl.tile(v.size(0), block_size=128):
        out_v[tile] = torch.cumsum(v[tile], 0)
    for tile_b in hl.tile(x.size(0), block_size=2):
        out_x[tile_b, :, :] = hl.cumsum(x[tile_b, :, :], 0, reverse=True) + torch.cumprod(x[tile_b, :, :] * 0 + 1, 1)
    return out_v, out_x


def test_scans_of_a_vector_and_along_the_leading_axis_of_a_3d_tile():
    v = _input((300,), torch.float32, seed=8)
    x = _input((5, 8, 128), torch.float32, seed=9)
    out_v, out_x = vector_and_batch_scans(v, x)
    torch.testing.assert_close(out_v, torch.cat([v[i:i + 128].cumsum(0) for i in range(0, 300, 128)]))
    expected = torch.cat([x[i:i + 2].flip(0).cumsum(0).flip(0) + 1 for i in range(0, 5, 2)])
    torch.testing.assert_close(out_x, expected)


# ----------------------------------------------------------------- errors --


def test_a_combine_changing_the_dtype_is_an_error_naming_the_line():
    kernel = tile_map_kernel(lambda v: hl.associative_scan(lambda a, b: (a + b).to(torch.int32), v, 1))
    with pytest.raises(exc.ShapeMismatch, match=r"combine function returned a \[8, 128\] torch.int32 value .* keep the dtype") as info:
        kernel(_input((20, 300), torch.float32))
    assert "test_scans.py" in str(info.value)


def test_scans_outside_a_kernel_say_where_they_belong():
    with pytest.raises(exc.UnsupportedSyntax, match="hl.associative_scan can only be used inside"):
        hl.associative_scan(_add, torch.zeros(4), 0)


def test_a_scan_is_log_step_rotates_in_the_generated_code():
    """128 lanes: 7 steps, each a rotate and a select (Mosaic has no cumsum primitive)."""
    kernel = tile_map_kernel(lambda v: torch.cumsum(v, dim=1))
    code, _ = code_and_output(kernel, (_input((20, 300), torch.float32),))
    body = code[code.index("def tile_map_kernel"):code.index("\ndef tile_map(")]
    assert body.count("pltpu.roll(") == 7 and "cumsum" not in body.replace("torch.cumsum", "")
    assert "scan_128 = jnp.where(scan_index >= 64" in body


@pallasite.kernel
def scan_with_a_local_combine(x):
    def mul_combine(a, b):
        return a * b

    out = torch.empty_like(x)
    for tile_m in hl.tile(x.size(0)):
        out[tile_m, :] = hl.associative_scan(mul_combine, x[tile_m, :], dim=1)
    return out


def test_a_combine_function_defined_in_the_kernel_body():
    """(trial G) A `def` in the kernel's body was refused as 'a return inside a FunctionDef
    statement in host code': its own return was taken for the kernel's."""
    x = torch.rand(8, 128) + 0.5
    torch.testing.assert_close(scan_with_a_local_combine(x), x.cumprod(1), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(run_ref(scan_with_a_local_combine, (x,)), x.cumprod(1), rtol=1e-4, atol=1e-5)
