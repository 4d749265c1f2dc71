"""The rest of `helion.language` (issue 22 §2): the function forms of tile attributes,
`hl.subscript`, masked loads and stores (`extra_mask`), and clear refusals where a TPU
has no equivalent (`hl.barrier`, symmetric memory, inline GPU code)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel(config=pallasite.Config(block_sizes=[64]))
def tile_facts(x):
    n = x.size(0)
    out = torch.empty([n, 4], dtype=torch.int32, device=x.device)
    for tile in hl.tile(n):
        begin = hl.tile_begin(tile) + hl.tile_index(tile) * 0
        out[tile, 0] = begin
        out[tile, 1] = hl.tile_end(tile) + hl.tile_index(tile) * 0
        out[tile, 2] = hl.tile_id(tile) * hl.tile_block_size(tile) + hl.tile_index(tile) * 0
        out[tile, 3] = hl.tile_index(tile)
    return out


def test_tile_attribute_functions_are_the_attributes():
    x = torch.zeros(150)
    rows = torch.arange(150)
    begins = rows // 64 * 64
    expected = torch.stack([begins, torch.clamp(begins + 64, max=150), begins, rows], 1).to(torch.int32)
    _, out = code_and_output(tile_facts, (x,))
    assert torch.equal(out, expected)
    assert torch.equal(run_ref(tile_facts, (x,)), expected)
    check_tpu_lowering(tile_facts, (x,))


@pallasite.kernel(config=pallasite.Config(block_sizes=[32]))
def outer_product(a, b):
    n = a.size(0)
    m = b.size(0)
    out = torch.empty([n, m], dtype=a.dtype, device=a.device)
    for tile in hl.tile(n):
        column = hl.subscript(a[tile], [slice(None), None])
        out[tile, :] = column * hl.subscript(b[:], [None, slice(None)])
    return out


def test_subscript_is_indexing():
    a, b = torch.randn(70), torch.randn(128)
    _, out = code_and_output(outer_product, (a, b))
    torch.testing.assert_close(out, a[:, None] * b[None, :])
    torch.testing.assert_close(run_ref(outer_product, (a, b)), out)


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 16]))
def jagged_row_sums(x, offsets, max_rows: int):
    """Sum each segment's rows, reading them with a masked load past the segment's end."""
    segments = offsets.size(0) - 1
    m = x.size(1)
    x_flat = x.view(-1)
    out = torch.zeros([segments, m], dtype=x.dtype, device=x.device)
    for tile_b in hl.tile(segments):
        starts = offsets[tile_b]
        lengths = offsets[tile_b.index + 1] - starts
        acc = hl.zeros([tile_b, m], dtype=torch.float32)
        for tile_k in hl.tile(0, max_rows):
            live = tile_k.index[None, :] < lengths[:, None]
            rows = starts[:, None] + tile_k.index[None, :]  # past the segment: any row, even past x
            flat = rows[:, :, None] * m + hl.arange(m)[None, None, :]
            values = hl.load(x_flat, [flat], extra_mask=live[:, :, None])
            acc = acc + values.sum(1)
        out[tile_b, :] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_masked_load_reads_zero_where_the_mask_is_false(loop_type):
    lengths = torch.tensor([3, 0, 5, 1, 7, 2, 4, 6, 1, 2])
    offsets = torch.cat([torch.zeros(1), lengths.cumsum(0)]).to(torch.int32)
    x = torch.randn(int(offsets[-1]), 16)
    args, config = (x, offsets, 32), {"pallas_loop_type": loop_type}
    expected = torch.stack([x[offsets[i]:offsets[i + 1]].sum(0) for i in range(len(lengths))])
    _, out = code_and_output(jagged_row_sums, args, **config)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(run_ref(jagged_row_sums, args, **config), out, rtol=1e-5, atol=1e-5)
    check_tpu_lowering(jagged_row_sums, args, **config)


@pallasite.kernel(config=pallasite.Config(block_sizes=[64]))
def positive_part_store(out, x):
    for tile in hl.tile(x.size(0)):
        values = x[tile]
        hl.store(out, [tile], values * 2, extra_mask=values > 0)
    return out


def test_a_masked_store_keeps_the_old_contents_where_the_mask_is_false():
    out, x = torch.full((150,), -7.0), torch.randn(150)
    expected = torch.where(x > 0, x * 2, out)
    compiled = out.clone()
    code_and_output(positive_part_store, (compiled, x))
    assert torch.equal(compiled, expected)
    reference = out.clone()
    run_ref(positive_part_store, (reference, x))
    assert torch.equal(reference, expected)


@pallasite.kernel(config=pallasite.Config(block_sizes=[64]))
def masked_scatter(out, x, idx):
    for tile in hl.tile(x.size(0)):
        hl.store(out, [idx[tile]], x[tile], extra_mask=x[tile] > 0)
    return out


def test_a_masked_store_through_an_index_tensor_writes_only_the_kept_lanes():
    generator = torch.Generator().manual_seed(0)
    x, idx = torch.randn(64, generator=generator), torch.randint(0, 16, (64,), generator=generator, dtype=torch.int32)
    expected = torch.zeros(16)
    for lane in range(64):  # the last kept lane naming a row wins
        if x[lane] > 0:
            expected[idx[lane]] = x[lane]
    _, compiled = code_and_output(masked_scatter, (torch.zeros(16), x, idx))
    assert torch.equal(compiled, expected)
    reference = torch.zeros(16)
    run_ref(masked_scatter, (reference, x, idx))
    assert torch.equal(reference, expected)


@pallasite.kernel(config=pallasite.Config(block_sizes=[64]))
def with_barrier(x):
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile]
        hl.barrier()
    return out


def test_barrier_says_what_a_tpu_does_instead():
    with pytest.raises(exc.UnsupportedOperation, match="second `for ... in hl.tile") as info:
        code_and_output(with_barrier, (torch.randn(64),))
    assert "hl.barrier()" in str(info.value)


@pallasite.kernel
def two_phases(x):
    """Helion's two-phase form (squeeze-and-excitation backward): the second loop reads
    what the first wrote, across tiles, after hl.barrier()."""
    m, n = x.size()
    doubled = torch.empty_like(x)
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([m, n]):
        doubled[tile_m, tile_n] = x[tile_m, tile_n] * 2.0
    hl.barrier()
    for tile_m in hl.tile(m):
        out[tile_m, :] = doubled[tile_m, :] - doubled[tile_m, :].sum(-1, keepdim=True) / n
    return out


def test_barrier_between_top_level_loops_is_the_order_they_already_run_in():
    x = torch.randn(24, 300)
    expected = 2 * x - (2 * x).sum(-1, keepdim=True) / 300
    code, out = code_and_output(two_phases, (x,), block_sizes=[8, 128, 8])
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(run_ref(two_phases, (x,)), expected, rtol=1e-5, atol=1e-5)
    assert code.count("pl.pallas_call(") == 2 and "barrier" not in code.split("def two_phases")[-1]


@pytest.mark.parametrize("name", ["signal", "wait", "StackTensor", "stacktensor_like", "inline_asm_elementwise",
                                  "inline_triton", "triton_kernel"])
def test_gpu_only_language_names_exist_and_refuse_with_what_to_write(name):
    with pytest.raises(exc.UnsupportedOperation, match="has no TPU equivalent"):
        getattr(hl, name)()


@pallasite.kernel
def repeated_rows(x, times: int):
    out = torch.empty([x.size(0) * times, x.size(1)], dtype=x.dtype)
    for r in hl.static_range(times):
        for tile_m, tile_n in hl.tile(x.size()):
            out[tile_m.index + r * x.size(0), tile_n] = x[tile_m, tile_n] * (r + 1)
    return out


def test_a_value_passed_as_hl_constexpr_is_a_constant_of_the_kernel():
    """`kernel(x, hl.constexpr(3))` (Helion's gemma3 stack passes its layer period so): the
    body sees the plain int (it sizes host tensors and a static_range); each value is its
    own variant, and reference mode sees the same."""
    x = torch.randn(16, 128)
    expected = torch.cat([x * (r + 1) for r in range(3)])
    torch.testing.assert_close(repeated_rows(x, hl.constexpr(3)), expected)
    torch.testing.assert_close(run_ref(repeated_rows, (x, hl.constexpr(3))), expected)
    torch.testing.assert_close(repeated_rows(x, hl.constexpr(2)), expected[:32])
    assert repeated_rows.name == "repeated_rows"


@pallasite.kernel
def added_k_times(x, k: int):
    out = torch.zeros_like(x)
    for t in hl.tile(x.size(0)):
        v = x[t, :]
        for _ in hl.static_range(k - 1):
            v = v + 1
        out[t, :] = v
    return out


@pytest.mark.parametrize("config", [{}, {"block_sizes": [8]}])
def test_a_static_range_of_an_int_argument_is_a_constant_of_the_variant(config):
    """A trial's finding: `hl.static_range(k)` of a plain int argument was refused compiled, while
    reference mode given a config ran it; k is a constant of the variant, as hl.specialize makes it."""
    x = torch.randn(16, 8)
    for k in (3, 1):
        for result in (code_and_output(added_k_times, (x, k), **config)[1], run_ref(added_k_times, (x, k), **config)):
            torch.testing.assert_close(result, x + (k - 1))


@pallasite.kernel
def ramp_and_zeros(x, w: int):
    out = torch.empty([x.size(0), w], dtype=torch.float32, device=x.device)
    for t in hl.tile(x.size(0)):
        out[t, :] = hl.zeros([t, w], dtype=torch.float32) + x[t][:, None] + hl.arange(w)[None, :] \
            + hl.rand([t, w], seed=3) * 0
    return out


@pytest.mark.parametrize("config", [{}, {"block_sizes": [8]}])
def test_an_int_argument_shapes_device_values_as_a_constant_of_the_variant(config):
    """Trial II: `hl.zeros([t, w])` and `hl.arange(w)` of an int argument were refused (naming
    an internal HostScalar), where slices and hl.static_range take it as a constant of the
    variant, as hl.specialize makes it."""
    x = torch.randn(20)
    for w in (4, 130):
        expected = x[:, None] + torch.arange(w)[None, :]
        for result in (code_and_output(ramp_and_zeros, (x, w), **config)[1], run_ref(ramp_and_zeros, (x, w), **config)):
            torch.testing.assert_close(result, expected)


@pallasite.kernel
def chunk_sums(x, chunk: int):
    n_chunks = x.size(0) // chunk  # uses chunk before the hl.specialize below (Helion's GDN)
    chunk = hl.specialize(chunk)
    out = torch.empty([n_chunks, x.size(1)], dtype=x.dtype)
    for c in hl.grid(n_chunks):
        for tile_n in hl.tile(x.size(1)):
            acc = hl.zeros([tile_n], dtype=torch.float32)
            for tile_r in hl.tile(c * chunk, c * chunk + chunk, block_size=chunk):
                acc = acc + x[tile_r, tile_n].sum(0)
            out[c, tile_n] = acc
    return out


def test_a_parameter_the_body_specializes_is_constant_from_the_first_line():
    x = torch.randn(64, 256)
    for chunk in (16, 32):
        expected = x.reshape(-1, chunk, 256).sum(1)
        torch.testing.assert_close(chunk_sums(x, chunk), expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(run_ref(chunk_sums, (x, chunk)), expected, rtol=1e-5, atol=1e-5)
