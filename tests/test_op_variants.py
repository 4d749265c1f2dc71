"""More spellings of existing ops in device code (issue #7 §5): one-sided clamps,
`Tensor.new_*` allocations, and the matmul family's `beta`/`alpha`/`out_dtype`."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref



def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def pointwise_kernel(op, out_dtype: torch.dtype = torch.float32):
    @pallasite.kernel
    def pointwise(x, y):
        out = torch.empty(x.shape, dtype=out_dtype)
        for tile_m, tile_n in hl.tile(x.shape, block_size=[8, 128]):
            out[tile_m, tile_n] = op(x[tile_m, tile_n], y[tile_m, tile_n])
        return out

    return pointwise


# ------------------------------------------------------------------ clamps --

CLAMPS = {
    "Tensor.clamp_min": lambda x, y: x.clamp_min(-0.25),
    "Tensor.clamp_max": lambda x, y: x.clamp_max(0.5),
    "torch.clamp_min": lambda x, y: torch.clamp_min(x, 0.0),
    "torch.clamp_max": lambda x, y: torch.clamp_max(x, y),
    "clamp_min tensor": lambda x, y: x.clamp_min(y),
    "clamp_max int": lambda x, y: torch.clamp_max(x, 1),
}


@pytest.mark.parametrize("spelling", CLAMPS)
def test_one_sided_clamps(spelling):
    op = CLAMPS[spelling]
    x, y = torch.randn(8, 256, generator=_gen(0)), torch.randn(8, 256, generator=_gen(1))
    _, result = code_and_output(pointwise_kernel(op), (x, y))
    torch.testing.assert_close(result, op(x, y))


def test_one_sided_clamp_of_integers_and_lowering():
    x = torch.randint(-50, 50, (8, 128), dtype=torch.int32, generator=_gen(2))
    kernel = pointwise_kernel(lambda a, b: torch.clamp_max(a.clamp_min(-3), b), torch.int32)
    _, result = code_and_output(kernel, (x, x.flip(1)))
    torch.testing.assert_close(result, torch.clamp_max(x.clamp_min(-3), x.flip(1)))
    check_tpu_lowering(kernel, (x, x.flip(1)), chips=("v5e",))


# --------------------------------------------------------------- new_* ------


@pallasite.kernel
def new_allocations(x):
    m, n = x.size()
    out = torch.empty([4, m, n], dtype=torch.float32)
    for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
        v = x[tile_m, tile_n]
        zeros = v.new_zeros([tile_m, tile_n])
        ones = v.new_ones([tile_m, tile_n], dtype=torch.float32)
        full = x.new_full([tile_m, 1], 2.5)  # a host tensor's new_* works too
        empty = v.new_empty([tile_m, tile_n])
        assert zeros.dtype == v.dtype and full.dtype == x.dtype and ones.dtype == torch.float32
        out[0, tile_m, tile_n] = zeros + v
        out[1, tile_m, tile_n] = ones.sum(1, keepdim=True) + v * 0
        out[2, tile_m, tile_n] = full + v * 0
        out[3, tile_m, tile_n] = empty.new_zeros((tile_m, tile_n)) + v.new_full([8, 128], 1.0).sum() * 0
    return out


def test_new_allocations_in_device_code_shaped_by_tiles_and_ints():
    """`ones.sum(1)` over a partial tile counts only its valid lanes: the allocation's
    axes are sized by tiles, so the mask planner knows their padding."""
    x = torch.randn(12, 200, generator=_gen(3))
    _, result = code_and_output(new_allocations, (x,))
    expected = torch.stack([x, torch.where(torch.arange(200) < 128, 128.0, 72.0).expand(12, 200),
                            torch.full((12, 200), 2.5), torch.zeros(12, 200)])
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(new_allocations, (x,)), expected)
    check_tpu_lowering(new_allocations, (x,), chips=("v7x",))


@pallasite.kernel
def positive_row_sums(x):
    m, n = x.size()
    out = torch.empty([m], dtype=torch.float32)
    for tile_m in hl.tile(m):
        acc = x.new_zeros([tile_m])
        for tile_n in hl.tile(n):
            acc = acc + x[tile_m, tile_n].clamp_min(0.0).sum(1)
        out[tile_m] = acc.clamp_max(40.0)
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_new_zeros_accumulator_and_clamps_in_an_inner_loop(loop_type):
    x = torch.randn(16, 300, generator=_gen(6))
    config = dict(block_sizes=[16, 128], pallas_loop_type=loop_type)
    _, result = code_and_output(positive_row_sums, (x,), **config)
    torch.testing.assert_close(result, x.clamp_min(0).sum(1).clamp_max(40.0))
    check_tpu_lowering(positive_row_sums, (x,), chips=("v6e",), **config)


def test_new_allocation_errors_say_what_to_write():
    @pallasite.kernel
    def bad_size(x):
        out = torch.empty_like(x)
        for tile_m in hl.tile(x.size(0)):
            out[tile_m, :] = x[tile_m, :] + x[tile_m, :].new_zeros([tile_m, 1.5])
        return out

    with pytest.raises(exc.UnsupportedOperation, match=r"(?s)tiles and ints.*at .*test_op_variants.py"):
        code_and_output(bad_size, (torch.randn(8, 128),))


# ------------------------------------------------------------ matmul family --


def _product_kernel(spelling: str, out_dtype: torch.dtype):
    """`out[tile_m, tile_n]` accumulates one product per inner tile in `spelling`'s form."""

    @pallasite.kernel
    def product(bias, x, y):
        m, k = x.size()
        _, n = y.size()
        out = torch.empty([m, n], dtype=out_dtype)
        for tile_m, tile_n in hl.tile([m, n]):
            acc = bias[tile_m, tile_n].to(torch.float32)
            for tile_k in hl.tile(k):
                a, b = x[tile_m, tile_k], y[tile_k, tile_n]
                if spelling == "addmm beta alpha":
                    acc = torch.addmm(acc, a, b, beta=0.5, alpha=2.0)
                elif spelling == "addmm beta=0":
                    acc = acc + torch.addmm(acc, a, b, beta=0)
                elif spelling == "baddbmm beta alpha":
                    acc = torch.baddbmm(acc[None], a[None], b[None], beta=0.5, alpha=2.0)[0]
                elif spelling == "mm out_dtype":
                    acc = acc + torch.mm(a, b, out_dtype=torch.float32)
                elif spelling == "bmm out_dtype":
                    acc = acc + torch.bmm(a[None], b[None], out_dtype=torch.float32)[0]
                elif spelling == "addmm out_dtype":
                    acc = torch.addmm(acc, a, b, out_dtype=torch.float32)
                elif spelling == "baddbmm out_dtype":
                    acc = torch.baddbmm(acc[None], a[None], b[None], out_dtype=torch.float32, alpha=2)[0]
                else:  # hl.dot with a bf16 accumulator and an f32 result
                    acc = hl.dot(a, b, acc=acc.to(torch.bfloat16), out_dtype=torch.float32)
            out[tile_m, tile_n] = acc.to(out_dtype)
        return out

    return product


def _expected_product(spelling: str, bias: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    acc = bias.float()
    for k in range(0, x.shape[1], 128):
        a, b = x[:, k:k + 128].float(), y[k:k + 128].float()
        if "beta alpha" in spelling:
            acc = 0.5 * acc + 2.0 * (a @ b)
        elif spelling == "addmm beta=0":
            acc = acc + a @ b
        elif spelling == "baddbmm out_dtype":
            acc = acc + 2.0 * (a @ b)
        elif spelling == "hl.dot":
            acc = acc.bfloat16().float() + a @ b
        else:
            acc = acc + a @ b
    return acc


PRODUCTS = ["addmm beta alpha", "addmm beta=0", "baddbmm beta alpha", "mm out_dtype", "bmm out_dtype",
            "addmm out_dtype", "baddbmm out_dtype", "hl.dot"]


@pytest.mark.parametrize("spelling", PRODUCTS)
def test_matmul_family_scales_and_out_dtype(spelling):
    g = _gen(4)
    bias, x, y = torch.randn(128, 128, generator=g), torch.randn(128, 200, generator=g), torch.randn(200, 128, generator=g)
    x, y = x.bfloat16(), y.bfloat16()
    kernel = _product_kernel(spelling, torch.float32)
    _, result = code_and_output(kernel, (bias, x, y), block_sizes=[128, 128, 128])
    torch.testing.assert_close(result, _expected_product(spelling, bias, x, y), atol=2e-2, rtol=1e-2)
    torch.testing.assert_close(run_ref(kernel, (bias, x, y), block_sizes=[128, 128, 128]), result,
                               atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_out_dtype_products_under_every_loop_type(loop_type):
    g = _gen(5)
    bias, x, y = torch.randn(128, 128, generator=g), torch.randn(128, 300, generator=g), torch.randn(300, 128, generator=g)
    x, y = x.bfloat16(), y.bfloat16()
    config = dict(block_sizes=[128, 128, 128], pallas_loop_type=loop_type)
    for spelling in ("baddbmm out_dtype", "addmm beta alpha"):
        kernel = _product_kernel(spelling, torch.bfloat16)
        _, result = code_and_output(kernel, (bias, x, y), **config)
        assert result.dtype == torch.bfloat16
        expected = _expected_product(spelling, bias, x, y).bfloat16()
        torch.testing.assert_close(result, expected, atol=0.25, rtol=2e-2)
    check_tpu_lowering(kernel, (bias, x, y), chips=("v6e",), **config)


def test_an_out_dtype_torch_refuses_says_what_to_write():
    x = torch.randn(128, 128).bfloat16()

    def kernel_of(op):
        @pallasite.kernel
        def product(x):
            out = torch.empty([128, 128], dtype=torch.float32)
            for tile_m in hl.tile(128, block_size=128):
                out[tile_m, :] = op(x[tile_m, :], x[:, :])
            return out

        return product

    with pytest.raises(exc.UnsupportedDtype, match=r"(?s)out_dtype=torch.float16.*float32.*at .*test_op_variants"):
        code_and_output(kernel_of(lambda a, b: torch.mm(a, b, out_dtype=torch.float16)), (x,))
