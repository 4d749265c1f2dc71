"""Inner tile loops with the 'unroll' strategy: resident blocks, carried values, masks."""
from __future__ import annotations

import math

import pytest
import torch

import pallasite
import pallasite.language as hl
from plan_helpers import matmul
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output


def test_matmul_bf16_non_divisible_k_masks_the_contraction():
    torch.manual_seed(0)
    x, y = torch.randn(256, 300).bfloat16(), torch.randn(300, 128).bfloat16()
    _, result = code_and_output(matmul, (x, y), block_sizes=[128, 128, 128])
    torch.testing.assert_close(result, x.float() @ y.float(), atol=1e-2, rtol=1e-2)
    plan = matmul.bind((x, y)).plan(pallasite.Config(block_sizes=[128, 128, 128]))
    call = plan.calls[0]
    (loop_plan,) = call.inner_loops.values()
    assert loop_plan.strategy == "unroll" and loop_plan.static_trips == (3,)
    x_operand = next(op for op in call.inputs if op.symbol.name == "x")
    assert [a.kind for a in x_operand.axes] == ["tile", "resident"]
    assert x_operand.axes[1].size == 384  # every K tile fits the resident block
    masks = [m for ms in call.masks.values() for m in ms]
    assert {(m.axis, m.fill) for m in masks} == {(1, 0), (0, 0)}  # x's and y's K axes


def test_matmul_lowers_to_mosaic():
    x, y = torch.randn(256, 300).bfloat16(), torch.randn(300, 128).bfloat16()
    check_tpu_lowering(matmul, (x, y), block_sizes=[128, 128, 128])


@pallasite.kernel
def attention(q, k, v):
    bh, s, d = q.size()
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(d)
    for tile_b, tile_q in hl.tile([bh, s], block_size=[1, None]):
        m_i = hl.full([tile_b, tile_q], float("-inf"), dtype=torch.float32)
        l_i = hl.zeros([tile_b, tile_q], dtype=torch.float32)
        acc = hl.zeros([tile_b, tile_q, d], dtype=torch.float32)
        qb = q[tile_b, tile_q, :]
        for tile_k in hl.tile(s):
            kb = k[tile_b, tile_k, :]
            vb = v[tile_b, tile_k, :]
            qk = torch.bmm(qb, kb.transpose(1, 2)) * scale
            m_new = torch.maximum(m_i, torch.amax(qk, -1))
            p = torch.exp(qk - m_new[:, :, None])
            alpha = torch.exp(m_i - m_new)
            l_i = l_i * alpha + torch.sum(p, -1)
            acc = acc * alpha[:, :, None] + torch.bmm(p.to(vb.dtype), vb)
            m_i = m_new
        out[tile_b, tile_q, :] = (acc / l_i[:, :, None]).to(out.dtype)
    return out


def test_flash_attention_online_softmax_with_partial_kv_tile():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 200, 64) for _ in range(3))
    _, result = code_and_output(attention, (q, k, v), block_sizes=[128, 128])
    expected = torch.softmax(q @ k.transpose(1, 2) / 8.0, -1) @ v
    torch.testing.assert_close(result, expected, atol=1e-4, rtol=1e-4)
    check_tpu_lowering(attention, (q, k, v), block_sizes=[128, 128], chips=("v6e",))


@pallasite.kernel
def jagged_mean(x, offsets):
    n, d = x.size()
    b = offsets.size(0) - 1
    out = torch.empty([b, d], dtype=x.dtype, device=x.device)
    for g in hl.grid(b):
        start = offsets[g]
        end = offsets[g + 1]
        acc = hl.zeros([d], dtype=torch.float32)
        for tile in hl.tile(start, end):
            acc = acc + x[tile, :].sum(0)
        count = torch.clamp(end - start, min=1)
        out[g, :] = acc / count
    return out


def test_jagged_mean_with_unaligned_data_dependent_bounds():
    torch.manual_seed(0)
    x = torch.randn(300, 128)
    offsets = torch.tensor([0, 5, 5, 140, 300], dtype=torch.int32)
    code, result = code_and_output(jagged_mean, (x, offsets), block_sizes=[64])
    expected = torch.stack([
        x[offsets[i]:offsets[i + 1]].sum(0) / max(int(offsets[i + 1] - offsets[i]), 1) for i in range(4)
    ])
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)
    assert "lax.fori_loop" in code
    plan = jagged_mean.bind((x, offsets)).plan(pallasite.Config(block_sizes=[64]))
    call = plan.calls[0]
    assert next(op for op in call.inputs if op.symbol.name == "offsets").memory == "smem"
    (loop_plan,) = call.inner_loops.values()
    assert loop_plan.static_trips is None
    check_tpu_lowering(jagged_mean, (x, offsets), block_sizes=[64], chips=("v5e",))


@pallasite.kernel
def center_rows(x):
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        total = hl.zeros([tile_m], dtype=torch.float32)
        for tile_n in hl.tile(n):
            total = total + x[tile_m, tile_n].sum(1)
        mean = total / n
        for tile_n in hl.tile(n):
            out[tile_m, tile_n] = x[tile_m, tile_n] - mean[:, None]
    return out


def test_two_sibling_inner_loops_two_pass_centering():
    torch.manual_seed(0)
    x = torch.randn(64, 300)
    _, result = code_and_output(center_rows, (x,), block_sizes=[32, 128, 128])
    torch.testing.assert_close(result, x - x.mean(1, keepdim=True), atol=1e-5, rtol=1e-5)


def test_carried_value_changing_dtype_is_rejected():
    @pallasite.kernel
    def bad(x):
        m, k = x.size()
        out = torch.empty([m], dtype=torch.float32, device=x.device)
        for tile_m in hl.tile(m):
            acc = hl.zeros([tile_m], dtype=torch.bfloat16)
            for tile_k in hl.tile(k):
                acc = acc + x[tile_m, tile_k].sum(1)
            out[tile_m] = acc
        return out

    with pytest.raises(exc.ShapeMismatch, match="Loop-carried variable 'acc'"):
        bad(torch.randn(16, 256))


# ------------------------------------------------------ fori_loop strategy --


def test_fori_loop_streams_operands_from_hbm_double_buffered():
    torch.manual_seed(0)
    x, y = torch.randn(256, 300).bfloat16(), torch.randn(300, 128).bfloat16()
    config = dict(block_sizes=[128, 128, 128], pallas_loop_type="fori_loop")
    _, result = code_and_output(matmul, (x, y), **config)
    torch.testing.assert_close(result, x.float() @ y.float(), atol=1e-2, rtol=1e-2)
    call = matmul.bind((x, y)).plan(pallasite.Config(**config)).calls[0]
    (loop_plan,) = call.inner_loops.values()
    assert loop_plan.strategy == "fori_loop"
    assert {(s.symbol.name, s.direction) for s in loop_plan.streams} == {("x", "in"), ("y", "in")}
    assert all(s.prefetches_next_tile for s in loop_plan.streams)  # tile j+1 in flight during tile j
    assert {op.symbol.name: op.memory for op in call.inputs} == {"x": "hbm", "y": "hbm"}
    # K=300 in tiles of 128: the host pads K to 384 so the last DMA window stays in bounds.
    assert {op.symbol.name: op.padded_shape for op in call.inputs} == {"x": (256, 384), "y": (384, 128)}
    check_tpu_lowering(matmul, (x, y), chips=("v5e",), **config)


def test_fori_loop_writes_output_tiles_back_asynchronously():
    torch.manual_seed(0)
    x = torch.randn(64, 300)
    config = dict(block_sizes=[32, 128, 128], pallas_loop_type="fori_loop")
    _, result = code_and_output(center_rows, (x,), **config)
    torch.testing.assert_close(result, x - x.mean(1, keepdim=True), atol=1e-5, rtol=1e-5)
    call = center_rows.bind((x,)).plan(pallasite.Config(**config)).calls[0]
    streams = [s for p in call.inner_loops.values() for s in p.streams]
    # x is read by both sibling loops, so it stays resident; out is streamed back per tile.
    assert [(s.symbol.name, s.direction) for s in streams] == [("out", "out")]
    assert [op.memory for op in call.inputs] == ["vmem_block"]


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_attention_and_jagged_per_loop_type(loop_type):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 200, 64) for _ in range(3))
    _, result = code_and_output(attention, (q, k, v), block_sizes=[128, 128], pallas_loop_type=loop_type)
    torch.testing.assert_close(result, torch.softmax(q @ k.transpose(1, 2) / 8.0, -1) @ v, atol=1e-4, rtol=1e-4)
    x = torch.randn(300, 128)
    offsets = torch.tensor([0, 5, 5, 140, 300], dtype=torch.int32)
    _, result = code_and_output(jagged_mean, (x, offsets), block_sizes=[64], pallas_loop_type=loop_type)
    expected = torch.stack([
        x[offsets[i]:offsets[i + 1]].sum(0) / max(int(offsets[i + 1] - offsets[i]), 1) for i in range(4)
    ])
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)
    check_tpu_lowering(jagged_mean, (x, offsets), block_sizes=[64], pallas_loop_type=loop_type, chips=("v7x",))


# -------------------------------------------------- emit_pipeline strategy --


def test_emit_pipeline_keeps_carried_values_in_vmem_scratch():
    torch.manual_seed(0)
    x, y = torch.randn(256, 300).bfloat16(), torch.randn(300, 128).bfloat16()
    config = dict(block_sizes=[128, 128, 128], pallas_loop_type="emit_pipeline")
    _, result = code_and_output(matmul, (x, y), **config)
    torch.testing.assert_close(result, x.float() @ y.float(), atol=1e-2, rtol=1e-2)
    call = matmul.bind((x, y)).plan(pallasite.Config(**config)).calls[0]
    (loop_plan,) = call.inner_loops.values()
    assert loop_plan.strategy == "emit_pipeline"
    assert {s.symbol.name for s in loop_plan.streams} == {"x", "y"}
    assert loop_plan.carried_refs == ("tile_k_acc_ref",)
    assert {(s.name, s.kind) for s in call.scratch} == {("tile_k_acc_ref", "vmem"), ("tile_k_step_ref", "smem")}
    check_tpu_lowering(matmul, (x, y), chips=("v6e",), **config)


def test_emit_pipeline_with_data_dependent_begin_reads_real_tiles_from_a_resident_block():
    """A pipeline's index maps count in blocks, so a loop starting at offsets[g] cannot stream
    through it: its tiles stay the user's (offsets[g] + j * 64) and x stays resident."""
    x = torch.randn(300, 128)
    offsets = torch.tensor([0, 5, 5, 140, 300], dtype=torch.int32)
    config = pallasite.Config(block_sizes=[64], pallas_loop_type="emit_pipeline")
    call = jagged_mean.bind((x, offsets)).plan(config).calls[0]
    (loop_plan,) = call.inner_loops.values()
    assert loop_plan.strategy == "emit_pipeline" and loop_plan.streams == ()
    x_operand = next(op for op in call.inputs if op.symbol.name == "x")
    assert x_operand.memory == "vmem_block" and x_operand.axes[0].kind == "resident"
    _, result = code_and_output(jagged_mean, (x, offsets), **config)
    expected = torch.stack([x[b:e].sum(0) / max(e - b, 1) for b, e in zip(offsets[:-1].tolist(), offsets[1:].tolist())])
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)


def test_baddbmm_accumulates_bf16_products_into_f32():
    @pallasite.kernel
    def bmm_acc(a, b):
        batch, m, k = a.size()
        _, _, n = b.size()
        out = torch.empty([batch, m, n], dtype=torch.float32, device=a.device)
        for tile_b, tile_m, tile_n in hl.tile([batch, m, n], block_size=[1, None, None]):
            acc = hl.zeros([tile_b, tile_m, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(k):
                acc = torch.baddbmm(acc, a[tile_b, tile_m, tile_k], b[tile_b, tile_k, tile_n])
            out[tile_b, tile_m, tile_n] = acc
        return out

    torch.manual_seed(0)
    a, b = torch.randn(2, 128, 256).bfloat16(), torch.randn(2, 256, 128).bfloat16()
    _, result = code_and_output(bmm_acc, (a, b), block_sizes=[128, 128, 128])
    torch.testing.assert_close(result, a.float() @ b.float(), atol=1e-2, rtol=1e-2)


@pallasite.kernel
def block_sums(x):
    b, m, n = x.size()
    out = torch.empty([b], dtype=torch.float32, device=x.device)
    for tile_b in hl.tile(b):
        total = hl.zeros([tile_b], dtype=torch.float32)
        for tile_m in hl.tile(m):
            for tile_n in hl.tile(n):
                total = total + x[tile_b, tile_m, tile_n].sum(2).sum(1)
        out[tile_b] = total
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_three_levels_of_nesting(loop_type):
    torch.manual_seed(0)
    x = torch.randn(8, 40, 300)
    config = dict(block_sizes=[8, 16, 128], pallas_loop_type=loop_type)
    _, result = code_and_output(block_sums, (x,), **config)
    torch.testing.assert_close(result, x.sum((1, 2)), atol=1e-3, rtol=1e-4)
    plan = block_sums.bind((x,)).plan(pallasite.Config(**config))
    assert [p.strategy for p in plan.calls[0].inner_loops.values()] == [loop_type, loop_type]
    check_tpu_lowering(block_sums, (x,), chips=("v6e",), **config)


def test_schedule_metrics_compare_resident_and_streamed_matmul():
    from pallasite.plan.metrics import schedule_metrics

    x, y = torch.randn(256, 256).bfloat16(), torch.randn(256, 128).bfloat16()
    bound = matmul.bind((x, y))
    resident = schedule_metrics(bound.plan(pallasite.Config(block_sizes=[128, 128, 128])))
    streamed = schedule_metrics(bound.plan(pallasite.Config(block_sizes=[128, 128, 128], pallas_loop_type="fori_loop")))
    minimum = 256 * 256 * 2 + 256 * 128 * 2 + 256 * 128 * 4
    # Resident: x's row block is reused across the single n step, y's block never changes.
    assert resident.hbm_bytes == resident.min_hbm_bytes == minimum
    assert resident.exposed_dma_waits == 3  # the first x, y blocks and the last out block
    # Streamed: y's K tiles are copied again for each of the two row blocks.
    assert streamed.hbm_bytes == minimum + 256 * 128 * 2
    assert streamed.exposed_dma_waits == 1 + 2 * 2  # out, plus the first tile of x and y per run


def test_default_config_streams_when_resident_blocks_overflow_vmem():
    # K = 2**22 bf16: a resident (256, K) row block of x alone is 2 GiB, over any chip's VMEM.
    x = torch.empty(256, 2**22, dtype=torch.bfloat16, device="meta")
    y = torch.empty(2**22, 256, dtype=torch.bfloat16, device="meta")
    bound = matmul.bind((x, y))
    with pytest.raises(exc.VmemOverflow, match=r"estimated at .* MiB, over TPU .*'s .* MiB of VMEM"):
        bound.plan(pallasite.Config(block_sizes=[256, 256, 512], pallas_loop_type="unroll"))
    config = bound.config_spec.default_config()
    assert config["pallas_loop_type"] == "fori_loop"
    bound.plan(config)  # plans without overflowing


def test_default_config_keeps_resident_inner_loops_when_they_fit():
    x, y = torch.randn(256, 300), torch.randn(300, 128)
    assert matmul.bind((x, y)).config_spec.default_config()["pallas_loop_type"] == "unroll"


@pallasite.kernel
def prefix_sums(x, lengths, bias):
    b, n, d = x.size()
    out = torch.empty([b, d], dtype=torch.float32, device=x.device)
    for g in hl.grid(b):
        shift = bias[g]
        acc = hl.zeros([d], dtype=torch.float32)
        for tile in hl.tile(0, lengths[g]):
            acc = acc + x[g, tile, :].sum(0)
        out[g, :] = acc + shift
    return out


@pallasite.kernel
def window_sum(x):
    m, k = x.size()
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        acc = hl.zeros([tile_m], dtype=torch.float32)
        for tile_k in hl.tile(128, 300):
            acc = acc + x[tile_m, tile_k].sum(1)
        out[tile_m] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_lengths_bound_table_lookup_and_non_zero_begin(loop_type):
    torch.manual_seed(0)
    x = torch.randn(3, 200, 128)
    lengths = torch.tensor([0, 77, 200], dtype=torch.int32)
    bias = torch.tensor([1.0, 2.0, 3.0])
    _, result = code_and_output(prefix_sums, (x, lengths, bias), block_sizes=[64], pallas_loop_type=loop_type)
    expected = torch.stack([x[i, :int(lengths[i])].sum(0) + bias[i] for i in range(3)])
    torch.testing.assert_close(result, expected, atol=1e-4, rtol=1e-5)
    call = prefix_sums.bind((x, lengths, bias)).plan(
        pallasite.Config(block_sizes=[64], pallas_loop_type=loop_type)).calls[0]
    assert {op.symbol.name: op.memory for op in call.inputs if op.symbol.name != "x"} == {
        "lengths": "smem", "bias": "smem"}
    check_tpu_lowering(prefix_sums, (x, lengths, bias), block_sizes=[64], pallas_loop_type=loop_type,
                       chips=("v6e",))

    y = torch.randn(16, 300)
    _, result = code_and_output(window_sum, (y,), block_sizes=[16, 128], pallas_loop_type=loop_type)
    torch.testing.assert_close(result, y[:, 128:300].sum(1), atol=1e-4, rtol=1e-5)


def _matmul_with(spelling):
    @pallasite.kernel
    def product(x, y):
        m, k = x.size()
        _, n = y.size()
        out = torch.empty([m, n], dtype=torch.float32, device=x.device)
        for tile_m, tile_n in hl.tile([m, n]):
            acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(k):
                a, b = x[tile_m, tile_k], y[tile_k, tile_n]
                if spelling == "mm":
                    acc = acc + torch.mm(a, b).to(torch.float32)
                elif spelling == "matmul":
                    acc = acc + torch.matmul(a, b).to(torch.float32)
                elif spelling == "@":
                    acc = acc + (a @ b).to(torch.float32)
                elif spelling == "bmm":
                    acc = acc + torch.bmm(a[None, :, :], b[None, :, :])[0].to(torch.float32)
                elif spelling == "hl.dot":
                    acc = hl.dot(a, b, acc=acc)
                else:
                    acc = hl.dot(a, b, acc=acc, out_dtype=torch.float32)
            out[tile_m, tile_n] = acc
        return out

    return product


@pytest.mark.parametrize("spelling", ["mm", "matmul", "@", "bmm", "hl.dot", "hl.dot out_dtype"])
def test_every_matmul_spelling_in_an_inner_loop(spelling):
    torch.manual_seed(0)
    x, y = torch.randn(128, 200), torch.randn(200, 128)
    _, result = code_and_output(_matmul_with(spelling), (x, y), block_sizes=[128, 128, 128])
    torch.testing.assert_close(result, x @ y, atol=1e-3, rtol=1e-3)


@pallasite.kernel
def add_column_offsets(x, offsets):
    out = torch.empty_like(x)
    for tile_m in hl.tile(x.size(0)):
        for tile_n in hl.tile(x.size(1)):
            out[tile_m, tile_n] = x[tile_m, tile_n] + tile_n.begin  # an int begin joins a float value
            offsets[tile_n.id] = tile_n.begin  # and is stored into a float tensor
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_an_inner_tiles_begin_is_a_value_under_every_loop_type(loop_type):
    # Unrolled, the begin is a Python int in the generated code: `.astype` on it used to
    # raise AttributeError out of the kernel.
    x = torch.randn(8, 384)
    offsets = torch.zeros(3)
    _, out = code_and_output(add_column_offsets, (x, offsets), block_sizes=[8, 128], pallas_loop_type=loop_type)
    torch.testing.assert_close(out, x + torch.arange(384).div(128, rounding_mode="floor") * 128.0)
    assert offsets.tolist() == [0.0, 128.0, 256.0]


@pallasite.kernel
def a_loop_variable_name_used_again(x, w):
    """Helion's squeeze-and-excitation net: a nested loop reuses an earlier loop's variable
    name (`tile_k`); inside it, the name is the nested loop's tile, never a value carried
    from the earlier loop."""
    m, k = x.shape
    c = torch.empty([m, k], dtype=torch.float32)
    out = torch.empty([m, 128], dtype=torch.float32)
    for tile_m in hl.tile(m):
        for tile_k in hl.tile(k):
            c[tile_m, tile_k] = torch.relu(x[tile_m, tile_k])
        for tile_n in hl.tile(128):
            acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(k):
                acc = acc + x[tile_m, tile_k] @ w[tile_k, tile_n]
            out[tile_m, tile_n] = acc
    return c, out


def test_a_nested_loop_reusing_a_loop_variable_name():
    x, w = torch.randn(16, 256), torch.randn(256, 128)
    _, (c, out) = code_and_output(a_loop_variable_name_used_again, (x, w), block_sizes=[8, 128, 128, 128])
    torch.testing.assert_close(c, torch.relu(x))
    torch.testing.assert_close(out, x @ w, rtol=1e-4, atol=1e-4)
