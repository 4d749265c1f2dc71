"""Numbers, signs and index dtypes as torch treats them (trial U's findings), in both modes."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import code_and_output, run_ref


def _both_modes(kernel, args, **config):
    _, compiled = code_and_output(kernel, args, **config)
    return compiled, run_ref(kernel, args, **config)


@pallasite.kernel
def past_int32_beside_floats(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        v = x[t] + 2**31 - torch.where(x[t] > 2.5, x[t], 2**40) * 2**-40 + (x[t] >= 2**31).float()
        out[t] = torch.clamp(v, max=2**33)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_number_past_int32_beside_a_float_is_torchs_float(dtype):
    """`x + 2**31` of a float tile crashed compiled (JAX parsed the literal as int32)."""
    x = torch.arange(5, dtype=torch.float32).to(dtype)
    expected = torch.clamp(x + 2**31 - torch.where(x > 2.5, x, 2**40) * 2**-40 + (x >= 2**31).float(), max=2**33)
    for result in _both_modes(past_int32_beside_floats, (x,)):
        torch.testing.assert_close(result, expected.to(dtype))


@pallasite.kernel
def where_past_int8(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = torch.where(x[t] > 0, x[t], 300)
    return out


@pallasite.kernel
def clamp_past_float(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = torch.clamp(x[t], max=1e40)
    return out


@pytest.mark.parametrize("kernel, x", [(where_past_int8, torch.tensor([1, -2, 3], dtype=torch.int8)),
                                       (clamp_past_float, torch.arange(3.0))])
def test_a_number_torch_cannot_convert_is_refused_in_both_modes(kernel, x):
    """torch refuses 300 beside int8 in a where and 1e40 in a float32 clamp; compiled had
    wrapped 300 to 44."""
    with pytest.raises(exc.UnsupportedDtype, match="without overflow"):
        code_and_output(kernel, (x,))
    with pytest.raises(exc.UnsupportedDtype, match="without overflow"):
        run_ref(kernel, (x,))


@pallasite.kernel
def signed_zero_fills(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = 1.0 / hl.full([t], -0.0, dtype=torch.float32) + torch.copysign(x[t], torch.full_like(x[t], -0.0))
    return out


def test_a_negative_zero_fill_keeps_its_sign():
    x = torch.arange(1.0, 5.0)
    for result in _both_modes(signed_zero_fills, (x,)):
        torch.testing.assert_close(result, torch.full((4,), -math.inf))


@pallasite.kernel
def builtin_min_max(x):
    out = torch.empty([x.size(0)], dtype=x.dtype)
    for g in hl.grid(x.size(0)):
        out[g] = min(x[g, 0], x[g, 1]) + max(x[g, 0], 0.5)
    return out


def test_builtin_min_max_of_device_values_propagate_nan_in_both_modes():
    """Reference mode ran Python's min (2.0 for min(2.0, nan)); the compiled kernel's is torch.minimum."""
    x = torch.tensor([[2.0, math.nan], [math.nan, 1.0], [3.0, 1.0]])
    expected = torch.minimum(x[:, 0], x[:, 1]) + torch.maximum(x[:, 0], torch.tensor(0.5))
    for result in _both_modes(builtin_min_max, (x,)):
        torch.testing.assert_close(result, expected, equal_nan=True)


@pallasite.kernel
def keepdim_into_a_scalar_slot(x):
    m, n = x.size()
    out = torch.empty([m], dtype=x.dtype)
    rows = torch.empty([m, n], dtype=x.dtype)
    for g in hl.grid(m):
        out[g] = x[g, :].amax(0, keepdim=True)
        rows[g, :] = x[g, :][None, :] * 2
    return out, rows


def test_a_value_with_leading_unit_dims_fits_a_smaller_slot_as_in_torch():
    """torch drops a stored value's leading unit dims; compiled refused `[1]` into a 0-d slot."""
    x = torch.randn(5, 7)
    for out, rows in _both_modes(keepdim_into_a_scalar_slot, (x,)):
        torch.testing.assert_close(out, x.amax(1))
        torch.testing.assert_close(rows, x * 2)


@pallasite.kernel
def rounded_divisions(a, b):
    out = torch.empty_like(a)
    for t in hl.tile(a.size(0)):
        out[t] = torch.div(a[t], b[t], rounding_mode="trunc") - torch.div(a[t], b[t], rounding_mode="floor")
    return out


def test_int32_min_divided_by_minus_one_does_not_stop_reference_mode():
    """torch's int32 kernel stops the process (SIGFPE); both modes wrap as the compiled kernel."""
    a = torch.tensor([-2**31, 7, -7], dtype=torch.int32)
    b = torch.tensor([-1, 2, 2], dtype=torch.int32)
    for result in _both_modes(rounded_divisions, (a, b)):
        torch.testing.assert_close(result, torch.tensor([0, 0, 1], dtype=torch.int32))


@pallasite.kernel
def gather_by(x, index):
    out = torch.empty([x.size(0), index.size(1)], dtype=x.dtype)
    for t in hl.tile(x.size(0)):
        out[t, :] = torch.gather(x[t, :], 1, index[t, :])
    return out


@pallasite.kernel
def paired_by(x, index):
    out = torch.empty([x.size(0)], dtype=x.dtype)
    for t in hl.tile(x.size(0)):
        out[t] = x[t.index, index[t]]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.int16, torch.bool])
def test_an_index_of_a_dtype_torch_refuses_is_refused_in_both_modes(dtype):
    """A float index read garbage compiled (2.7 gave column 0); torch refuses it."""
    x = torch.arange(20.0).reshape(4, 5)
    index = torch.ones((4, 3)).to(dtype)
    with pytest.raises(exc.UnsupportedDtype, match="int32/int64 for index"):
        code_and_output(gather_by, (x, index))
    with pytest.raises(exc.UnsupportedDtype, match="int32/int64 for index"):
        run_ref(gather_by, (x, index))


def test_a_narrow_index_paired_with_a_tile_is_refused_in_both_modes():
    x = torch.arange(20.0).reshape(4, 5)
    index = torch.tensor([0, 1, 2, 3], dtype=torch.int8)
    with pytest.raises(exc.IndexingError, match="int8"):
        code_and_output(paired_by, (x, index))
    with pytest.raises(exc.IndexingError, match="int8"):
        run_ref(paired_by, (x, index))


@pallasite.kernel
def half_fills(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = torch.clamp(x[t], max=70000.0) + torch.full_like(x[t], 70000.0)
    return out


def test_float16_numbers_past_its_range_are_refused_in_both_modes():
    """clamp(max=70000.) and full_like(70000.) of float16 ran compiled (inf); torch refuses them."""
    x = torch.ones(4, dtype=torch.float16)
    with pytest.raises(exc.UnsupportedDtype, match="without overflow"):
        code_and_output(half_fills, (x,))
    with pytest.raises(exc.UnsupportedDtype, match="without overflow"):
        run_ref(half_fills, (x,))


@pallasite.kernel
def zero_d_total(x):
    out = torch.zeros([], dtype=x.dtype)
    for t in hl.tile(1):
        out[()] = x[:].sum()
    return out


@pallasite.kernel
def zero_d_added(x, out):
    for t in hl.tile(1):
        out[()] = out[()] + x[:].sum()
    return out


def test_a_0d_output_whose_contents_are_kept():
    """A 0-d output starting from its contents crashed compiled (`out_ref[0]` of a 0-d ref, trial W)."""
    x = torch.randn(16)
    for result in _both_modes(zero_d_total, (x,)):
        torch.testing.assert_close(result, x.sum())
    _, added = code_and_output(zero_d_added, (x, torch.tensor(1.5)))
    torch.testing.assert_close(added, 1.5 + x.sum())
    torch.testing.assert_close(run_ref(zero_d_added, (x, torch.tensor(1.5))), 1.5 + x.sum())


@pallasite.kernel
def where_by_argument(x, v: int, hi: float):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = torch.clamp(torch.where(x[t] > 0, x[t], v), max=hi)
    return out


def test_a_runtime_number_torch_cannot_convert_is_refused_at_the_call():
    """where(x8 > 0, x8, v) with v = 300 passed at run time wrapped to 44 compiled (trial W)."""
    x = torch.tensor([1, -2, 3, -4], dtype=torch.int8)
    for result in _both_modes(where_by_argument, (x, 5, 100.0)):
        torch.testing.assert_close(result, torch.clamp(torch.where(x > 0, x, 5), max=100))
    with pytest.raises(exc.UnsupportedDtype, match="without overflow"):
        where_by_argument(x, 300, 100.0)
    with pytest.raises(exc.UnsupportedDtype, match="without overflow"):
        run_ref(where_by_argument, (x, 300, 100.0))
    h = torch.ones(4, dtype=torch.float16)
    with pytest.raises(exc.UnsupportedDtype, match="without overflow"):
        where_by_argument(h, 1, 70000.0)


@pallasite.kernel
def like_factories(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = torch.ones_like(x[t]) + torch.zeros_like(x[t]) + torch.full_like(x[t], 2.0) + x[t].new_ones([t])
    return out


def test_like_factories_without_a_fill_argument():
    """torch.ones_like in device code crashed (TypeError) after the full_like fill check (fuzz seed 16416)."""
    x = torch.randn(20).to(torch.float16)
    for result in _both_modes(like_factories, (x,)):
        torch.testing.assert_close(result, torch.full_like(x, 4.0))


@pallasite.kernel
def where_number_argument(x, v: float):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = torch.where(x[t] > 0, x[t], v)
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_16_bit_where_takes_a_runtime_number_as_torchs_where_does(dtype):
    """torch.where of float16 turns 1e5 into inf (it does not refuse it, as clamp does); the
    per-call check had used full_like's rule and refused it (trial X)."""
    x = torch.tensor([-1.0, 2.0, -3.0, 4.0]).to(dtype)
    expected = torch.where(x > 0, x, 1e39 if dtype == torch.bfloat16 else 1e5)
    for result in _both_modes(where_number_argument, (x, 1e39 if dtype == torch.bfloat16 else 1e5)):
        torch.testing.assert_close(result, expected)


@pallasite.kernel
def filled_past_the_dtype(x, fill: hl.constexpr):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t].masked_fill(x[t] > 0, fill)
    return out


@pytest.mark.parametrize("dtype, fill", [(torch.int8, 300.0), (torch.float16, 70000.0), (torch.int32, math.inf)])
def test_masked_fill_of_a_number_the_dtype_cannot_hold_is_refused_in_both_modes(dtype, fill):
    """int8 masked_fill(300.) saturated compiled, int32 masked_fill(inf) raised a plain OverflowError
    (trial X); torch refuses the number."""
    x = torch.tensor([-1, 2, -3, 4]).to(dtype)
    with pytest.raises(exc.UnsupportedDtype, match="without overflow|cannot convert"):
        code_and_output(filled_past_the_dtype, (x, fill))
    with pytest.raises(exc.UnsupportedDtype, match="without overflow|cannot convert"):
        run_ref(filled_past_the_dtype, (x, fill))
    torch.testing.assert_close(run_ref(filled_past_the_dtype, (x, 7.0)), x.masked_fill(x > 0, 7.0))


@pallasite.kernel
def filled_by_an_argument(x, v: float):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = torch.full_like(x[t], v) + x[t].new_full(x[t].shape, v) + hl.full([t], v, dtype=x.dtype)
    return out


@pallasite.kernel
def masked_by_an_argument(x, v: float):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t].masked_fill(x[t] > 0, v)
    return out


@pytest.mark.parametrize("kernel", [filled_by_an_argument, masked_by_an_argument])
@pytest.mark.parametrize("dtype, number", [(torch.int8, 300), (torch.float16, 1e5), (torch.bfloat16, 1e39)])
def test_a_runtime_number_the_dtype_cannot_hold_is_refused_at_each_call(kernel, dtype, number):
    """A number passed at run time into full_like/new_full/hl.full of int8 wrapped (300 -> 44)
    and of float16 became inf compiled, and masked_fill's took where's rule (inf); torch refuses
    them, as reference mode does. The same compiled kernel takes a number that fits."""
    x = torch.tensor([-1, 2, -3, 4]).to(dtype)
    with pytest.raises(exc.UnsupportedDtype, match="without overflow") as compiled:
        code_and_output(kernel, (x, number))
    assert "v = " in str(compiled.value)
    with pytest.raises(exc.UnsupportedDtype, match="without overflow"):
        run_ref(kernel, (x, number))
    fits = 5
    expected = torch.full_like(x, fits) * 3 if kernel is filled_by_an_argument else x.masked_fill(x > 0, fits)
    for result in _both_modes(kernel, (x, fits)):
        torch.testing.assert_close(result, expected)


@pallasite.kernel
def scaled_by_arguments(x, k: int, f: float):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] * k + x[t] * f - f
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_32_bit_scalar_argument_beside_a_16_bit_tile_is_not_rounded_first(dtype):
    """`x * v` of float16 with v = -70000 passed at run time gave -inf (v rounded to float16
    first); torch computes in float32 and rounds the result (trial X)."""
    x = torch.tensor([0.5, -0.25, 0.9, 0.1]).to(dtype)
    expected = x * -70000 + x * 70000.5 - 70000.5
    for result in _both_modes(scaled_by_arguments, (x, -70000, 70000.5)):
        torch.testing.assert_close(result, expected)


@pallasite.kernel
def sums_and_remainders_by_an_argument(x, s: float):
    added = torch.empty_like(x)
    taken = torch.empty_like(x)
    left = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        added[t] = x[t] + s
        taken[t] = s - x[t]
        left[t] = x[t] % s
    return added, taken, left


@pytest.mark.parametrize("dtype, number", [(torch.float16, 1 / 3), (torch.bfloat16, 0.1)])
def test_a_16_bit_sum_or_remainder_takes_the_argument_rounded_as_torch_does(dtype, number):
    """torch's +, - and % of a 16-bit tensor take a float argument rounded to 16 bits (its *
    and / do not): compiled used the float32 number, `x % (1/3)` of float16 was off by the
    whole divisor (trial Z)."""
    x = torch.tensor([1.0, 2.0, 3.0, -0.10400390625, -0.1044921875, 0.5]).to(dtype)
    expected = (x + number, number - x, x % number)
    for result in _both_modes(sums_and_remainders_by_an_argument, (x, number)):
        for got, want in zip(result, expected):
            assert torch.equal(got, want), (got, want)


@pallasite.kernel
def parameters_from_arguments(x, s: float, d: int):
    out = torch.empty_like(x)
    sums = torch.empty([x.size(0)], dtype=x.dtype)
    for t in hl.tile(x.size(0)):
        v = x[t, :]
        out[t, :] = (F.leaky_relu(v, s) + F.hardtanh(v, -s, s) + F.softplus(v, beta=s)
                     + torch.addcmul(v, v, v, value=s) + torch.add(v, v, alpha=s))
        sums[t] = v.sum(d)
    return out, sums


def test_an_op_parameter_from_an_argument_is_a_constant_of_the_variant():
    """A float argument as leaky_relu's slope, elu's alpha, addcmul's value was refused with an
    internal name and no line, and an int argument as a reduction dim (trial Z): each is a
    number of the generated code, made a constant of the variant as hl.specialize would."""
    x = torch.randn(16, 32)
    for s, d in ((0.5, 1), (2.0, -1)):
        expected = (F.leaky_relu(x, s) + F.hardtanh(x, -s, s) + F.softplus(x, beta=s)
                    + torch.addcmul(x, x, x, value=s) + torch.add(x, x, alpha=s), x.sum(d))
        for result in _both_modes(parameters_from_arguments, (x, s, d)):
            for got, want in zip(result, expected):
                torch.testing.assert_close(got, want)


@pallasite.kernel
def slope_from_data(x, slopes):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = F.leaky_relu(x[t], slopes[0])
    return out


def test_an_op_parameter_read_from_a_tensor_is_a_clear_error():
    with pytest.raises(exc.UnsupportedOperation, match="negative_slope must be a number known when compiling") as info:
        code_and_output(slope_from_data, (torch.randn(8), torch.tensor([0.1])))
    assert "F.leaky_relu(x[t], slopes[0])" in str(info.value)


@pytest.mark.parametrize("number", [300.0, math.inf, math.nan])
def test_a_float_argument_masked_into_int8_is_refused_at_each_call(number):
    """masked_fill of an int8 tile by a float argument saturated (300.0, inf: 127) or gave 0
    (nan) compiled: its where is float, cast back to int8 (trial AA). torch refuses."""
    x = torch.tensor([5, -3, 7, -1], dtype=torch.int8)
    for run in (lambda: code_and_output(masked_by_an_argument, (x, number)),
                lambda: run_ref(masked_by_an_argument, (x, number))):
        with pytest.raises(exc.UnsupportedDtype):
            run()
    for result in _both_modes(masked_by_an_argument, (x, 5.0)):
        torch.testing.assert_close(result, x.masked_fill(x > 0, 5.0))


@pallasite.kernel
def scaled_sums_by_alpha(a, b, s: float):
    added = torch.empty_like(a)
    taken = torch.empty_like(a)
    for t in hl.tile(a.size(0)):
        added[t] = torch.add(a[t], b[t], alpha=s)
        taken[t] = torch.sub(a[t], b[t], alpha=1234.567)
    return added, taken


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_16_bit_add_takes_its_alpha_in_the_tensors_dtype(dtype):
    """torch.add(a, b, alpha=1234.567) of float16 differed in half the lanes by up to 4.0
    (alpha used in float32; torch rounds it to float16 first, trial AA)."""
    torch.manual_seed(0)
    a, b = torch.randn(1024).to(dtype), torch.randn(1024).to(dtype)
    expected = (torch.add(a, b, alpha=1234.567), torch.sub(a, b, alpha=1234.567))
    for result in _both_modes(scaled_sums_by_alpha, (a, b, 1234.567)):
        for got, want in zip(result, expected):
            assert torch.equal(got, want)


@pallasite.kernel
def bounded_by_arguments(x, s: float):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = F.hardtanh(x[t], s, -s)
    return out


def test_op_parameters_from_arguments_get_torchs_own_checks():
    """hardtanh(v, s, -s) with s = 0.5 (min > max) returned -1 everywhere compiled; torch raises
    (trial AA). The op is bound again with the numbers, so torch's checks run on them."""
    x = torch.randn(16)
    for run in (lambda: code_and_output(bounded_by_arguments, (x, 0.5)),
                lambda: run_ref(bounded_by_arguments, (x, 0.5))):
        with pytest.raises(exc.ShapeMismatch, match="min_val cannot be greater than max_val"):
            run()
    for result in _both_modes(bounded_by_arguments, (x, -0.5)):
        torch.testing.assert_close(result, F.hardtanh(x, -0.5, 0.5))


@pallasite.kernel
def threshold_value_argument(x, v: float):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = F.threshold(x[t], 0.5, v)
    return out


@pallasite.kernel
def power_argument(x, v: float):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] ** v
    return out


@pallasite.kernel
def hardshrink_argument(x, v: float):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = F.hardshrink(x[t], v)
    return out


@pallasite.kernel
def logit_argument(x, v: float):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = torch.logit(x[t], eps=v)
    return out


@pallasite.kernel
def power_literal(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] ** 1e5
    return out


_NUMBER_TAKERS = [(threshold_value_argument, lambda x, v: F.threshold(x, 0.5, v)),
                  (power_argument, lambda x, v: x ** v), (hardshrink_argument, lambda x, v: F.hardshrink(x, v)),
                  (logit_argument, lambda x, v: torch.logit(x, eps=v))]


@pytest.mark.parametrize("kernel, torch_fn", _NUMBER_TAKERS)
def test_a_number_argument_torch_cannot_convert_to_float16_is_refused_in_both_modes(kernel, torch_fn):
    """Trial EE: float16 threshold's value, a power, hardshrink's lambda and logit's eps given
    1e5 as an argument: torch refuses the number; compiled answered (inf, [0, inf], zeros,
    NaN) and reference mode raised a bare TypeError for the power (torch turns a TypeError
    under Tensor.__pow__ into NotImplemented). A number that fits runs as torch does."""
    x = torch.tensor([0.05, 0.3, -0.7, 2.0]).half()
    with pytest.raises(RuntimeError, match="without overflow"):
        torch_fn(x, 1e5)
    # reference mode given block sizes runs without the compiler (else its config resolution traces)
    for run in (lambda: code_and_output(kernel, (x, 1e5)), lambda: run_ref(kernel, (x, 1e5), block_sizes=[4])):
        with pytest.raises(exc.UnsupportedDtype, match="without overflow"):
            run()
    for result in _both_modes(kernel, (x, 0.25)):
        torch.testing.assert_close(result, torch_fn(x, 0.25), equal_nan=True)


def test_a_power_literal_float16_cannot_hold_is_refused_in_reference_mode_too():
    x = torch.tensor([0.5, 2.0]).half()
    for run in (lambda: power_literal(x), lambda: run_ref(power_literal, (x,), block_sizes=[2])):
        with pytest.raises(exc.UnsupportedDtype, match="without overflow"):
            run()
