"""`if` on a device scalar inside a device loop: lax.cond / pl.when."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES, STRATEGIES
from pallasite.plan.plans import Memory
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref



def _rows(x: torch.Tensor, block: int):
    """(begin, end) of each row tile."""
    return [(b, min(b + block, x.shape[0])) for b in range(0, x.shape[0], block)]


@pallasite.kernel
def sign_select(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        v = x[t, :]
        if x[t.begin, 0] > 0:
            y = v * 2.0
        else:
            y = -v
        out[t, :] = y
    return out


def sign_select_torch(x, block):
    out = torch.empty_like(x)
    for b, e in _rows(x, block):
        out[b:e] = x[b:e] * 2.0 if x[b, 0] > 0 else -x[b:e]
    return out


def _signed_rows(m=256, n=128, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, n, generator=gen)
    x[::8, 0] = torch.tensor([1.0, -1.0]).repeat(m // 16)  # each 8-row tile starts with ±1
    return x


def test_if_else_merges_values_like_torch():
    x = _signed_rows()
    code, result = code_and_output(sign_select, (x,), block_sizes=[8])
    torch.testing.assert_close(result, sign_select_torch(x, 8))
    assert "lax.cond" in code and "if x[t.begin, 0] > 0:" in code


def test_if_else_agrees_with_reference_mode_and_lowers():
    x = _signed_rows()
    torch.testing.assert_close(run_ref(sign_select, (x,), block_sizes=[8]), sign_select_torch(x, 8))
    check_tpu_lowering(sign_select, (x,), block_sizes=[8])


@pallasite.kernel
def scale_if_positive_sum(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        v = x[t, :]
        y = v
        if v.sum() > 0 and not (t.begin >= 128):
            y = v * 3.0
        out[t, :] = y
    return out


def test_if_without_else_keeps_the_value_before():
    x = torch.randn(256, 128, generator=torch.Generator().manual_seed(1))
    _, result = code_and_output(scale_if_positive_sum, (x,), block_sizes=[8])
    expected = x.clone()
    for b, e in _rows(x, 8):
        if x[b:e].sum() > 0 and not b >= 128:
            expected[b:e] = x[b:e] * 3.0
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(scale_if_positive_sum, (x,), block_sizes=[8]), expected)
    check_tpu_lowering(scale_if_positive_sum, (x,), block_sizes=[8])


@pallasite.kernel
def conditional_stores(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for t in hl.tile(x.size(0)):
        if x[t.begin, 0] > 0 or y[t.begin, 0] > 0:
            out[t, :] = x[t, :] + y[t, :]
            if y[t.begin, 0] > 0:
                out[t, :] = out[t, :] * 2.0
        else:
            out[t, :] = y[t, :]
    return out


def conditional_stores_torch(x, y, block):
    out = torch.zeros_like(x)
    for b, e in _rows(x, block):
        if x[b, 0] > 0 or y[b, 0] > 0:
            out[b:e] = x[b:e] + y[b:e]
            if y[b, 0] > 0:
                out[b:e] = out[b:e] * 2.0
        else:
            out[b:e] = y[b:e]
    return out


def test_stores_under_conditions_and_nested_ifs():
    x, y = _signed_rows(seed=2), _signed_rows(seed=3).flip(0).contiguous()
    code, result = code_and_output(conditional_stores, (x, y), block_sizes=[8])
    expected = conditional_stores_torch(x, y, 8)
    torch.testing.assert_close(result, expected)
    assert "pl.when" in code
    torch.testing.assert_close(run_ref(conditional_stores, (x, y), block_sizes=[8]), expected)
    check_tpu_lowering(conditional_stores, (x, y), block_sizes=[8])


@pallasite.kernel
def nested_values(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        v = x[t, :]
        s = v.sum()
        if s > 0:
            if x[t.begin, 0] > 0:
                y = v + 1.0
            else:
                y = v - 1.0
            z = y * 2.0
        else:
            y = v
            z = v
        out[t, :] = y + z
    return out


def test_nested_ifs_merge_values():
    x = _signed_rows(seed=4)
    _, result = code_and_output(nested_values, (x,), block_sizes=[8])
    expected = torch.empty_like(x)
    for b, e in _rows(x, 8):
        v = x[b:e]
        if v.sum() > 0:
            y = v + 1.0 if x[b, 0] > 0 else v - 1.0
            z = y * 2.0
        else:
            y = z = v
        expected[b:e] = y + z
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(nested_values, (x,), block_sizes=[8]), expected)


@pallasite.kernel
def masked_row_sums(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, k = x.size()
    sums = torch.empty([m], dtype=torch.float32)
    copied = torch.zeros_like(x)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tk in hl.tile(k):
            block = x[tm, tk]
            if x[tm.begin, tk.begin] > 0:
                acc = acc + block.sum(-1)
                copied[tm, tk] = block
        sums[tm] = acc
    return sums, copied


def masked_row_sums_torch(x, bm, bk):
    sums = torch.zeros(x.shape[0])
    copied = torch.zeros_like(x)
    for b, e in _rows(x, bm):
        for kb in range(0, x.shape[1], bk):
            if x[b, kb] > 0:
                sums[b:e] += x[b:e, kb:kb + bk].sum(-1)
                copied[b:e, kb:kb + bk] = x[b:e, kb:kb + bk]
    return sums, copied


def _block_starts_signed(m=64, k=512, seed=5):
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(seed))
    sign = 1.0
    for b in range(0, m, 8):
        for kb in range(0, k, 128):
            x[b, kb] = sign
            sign = -sign
        sign = -sign
    return x


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_if_inside_an_inner_loop(loop_type):
    x = _block_starts_signed()
    config = dict(block_sizes=[8, 128], pallas_loop_type=loop_type)
    _, (sums, copied) = code_and_output(masked_row_sums, (x,), **config)
    expected_sums, expected_copied = masked_row_sums_torch(x, 8, 128)
    torch.testing.assert_close(sums, expected_sums, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(copied, expected_copied)
    ref_sums, ref_copied = run_ref(masked_row_sums, (x,), **config)
    torch.testing.assert_close(ref_sums, expected_sums, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ref_copied, expected_copied)
    # a tensor accessed under a condition is never streamed tile by tile
    plan = masked_row_sums.bind((x,)).plan(pallasite.Config(**config))
    assert all(op.memory is not Memory.HBM for op in (*plan.calls[0].inputs, *plan.calls[0].outputs))
    check_tpu_lowering(masked_row_sums, (x,), **config)


# ------------------------------------------------------------------ host and errors --


@pallasite.kernel
def host_condition(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        if x.size(1) > 64:
            out[t, :] = x[t, :] * 2.0
        else:
            out[t, :] = x[t, :]
    return out


def test_if_on_a_host_value_picks_a_branch_while_tracing():
    x = torch.randn(64, 128)
    code, result = code_and_output(host_condition, (x,), block_sizes=[8])
    torch.testing.assert_close(result, x * 2.0)
    assert "lax.cond" not in code and "pl.when" not in code


@pallasite.kernel
def tensor_condition(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        v = x[t, :]
        if v > 0:
            v = -v
        out[t, :] = v
    return out


@pallasite.kernel
def branches_disagree(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        v = x[t, :]
        if x[t.begin, 0] > 0:
            v = v.sum(-1)
        out[t, 0] = v
    return out


@pallasite.kernel
def host_value_in_branch(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        scale = 1.0
        if x[t.begin, 0] > 0:
            scale = 2.0
        out[t, :] = x[t, :] * scale
    return out


@pytest.mark.parametrize(("kernel", "error", "words", "line"), [
    (tensor_condition, exc.UnsupportedSyntax, ["torch.where", "scalar"], "if v > 0:"),
    (branches_disagree, exc.ShapeMismatch, ["'v'", "branch"], "if x[t.begin, 0] > 0:"),
    (host_value_in_branch, exc.UnsupportedSyntax, ["'scale'", "hl.full"], "if x[t.begin, 0] > 0:"),
])
def test_device_ifs_that_cannot_compile(kernel, error, words, line):
    x = torch.randn(64, 128)
    with pytest.raises(error) as info:
        code_and_output(kernel, (x,), block_sizes=[8])
    for word in words:
        assert word in info.value.message
    assert line in str(info.value)


@pallasite.kernel
def flagged_row_sums(x: torch.Tensor, flags: torch.Tensor, bias: float) -> torch.Tensor:
    m, k = x.size()
    sums = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tk in hl.tile(k):
            block = x[tm, tk]  # read every step: streamed by fori_loop / emit_pipeline
            if flags[tm.id, tk.id] > 0 and bias > 0.0:
                acc = acc + block.sum(-1)
            elif tk.begin < 128:
                acc = acc - 1.0
        sums[tm] = acc
    return sums


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_if_beside_a_streamed_tensor_and_on_runtime_scalars(loop_type):
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(64, 512, generator=gen)
    flags = torch.randint(-1, 2, (8, 4), generator=gen, dtype=torch.int32)
    config = dict(block_sizes=[8, 128], pallas_loop_type=loop_type)
    for bias in (1.0, -1.0):
        expected = torch.zeros(64)
        for i in range(8):
            for j in range(4):
                if flags[i, j] > 0 and bias > 0.0:
                    expected[i * 8:i * 8 + 8] += x[i * 8:i * 8 + 8, j * 128:j * 128 + 128].sum(-1)
                elif j * 128 < 128:
                    expected[i * 8:i * 8 + 8] -= 1.0
        _, result = code_and_output(flagged_row_sums, (x, flags, bias), **config)
        torch.testing.assert_close(result, expected, atol=1e-4, rtol=1e-4)
        ref = run_ref(flagged_row_sums, (x, flags, bias), **config)
        torch.testing.assert_close(ref, expected, atol=1e-4, rtol=1e-4)
    plan = flagged_row_sums.bind((x, flags, 1.0)).plan(pallasite.Config(**config))
    x_operand = next(op for op in plan.calls[0].inputs if op.symbol.name == "x")
    assert (x_operand.memory is Memory.HBM) == STRATEGIES[loop_type].streams
    check_tpu_lowering(flagged_row_sums, (x, flags, 1.0), **config)


@pallasite.kernel
def double_at_edges(x: torch.Tensor, first: int) -> torch.Tensor:
    """`and`/`or` of device scalars in a plain assignment (Helion's blockwise fp8 GEMM:
    `boundary = (...) or last or (tile_k.end >= k)`), host operands short-circuiting."""
    m, n = x.shape
    out = torch.zeros([m], dtype=torch.float32)
    for tm in hl.tile(m, block_size=8):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tn in hl.tile(n, block_size=128):
            acc = acc + x[tm, tn].sum(-1)
            edge = (tn.end >= n) or (tn.begin == first) or False
            inner = (tn.begin > 0) and not edge and True
            if edge:
                acc = acc * 2
            if inner:
                acc = acc + 1
        out[tm] = acc
    return out


def double_at_edges_torch(x, first):
    acc = torch.zeros(x.shape[0])
    n = x.shape[1]
    for b in range(0, n, 128):
        acc = acc + x[:, b:b + 128].sum(-1)
        edge = b + 128 >= n or b == first
        if edge:
            acc = acc * 2
        if b > 0 and not edge:
            acc = acc + 1
    return acc


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_and_or_of_device_scalars_in_an_assignment(loop_type):
    # small integers: every sum is exact, whatever order the kernel adds in
    x = torch.randint(-4, 5, (16, 640), generator=torch.Generator().manual_seed(3)).float()
    expected = double_at_edges_torch(x, 256)
    _, result = code_and_output(double_at_edges, (x, 256), pallas_loop_type=loop_type)
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(double_at_edges, (x, 256), pallas_loop_type=loop_type), expected)
