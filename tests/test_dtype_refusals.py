"""An op torch refuses for its operands' dtype (`F.gelu` of an int tile, `x & 1` of a float
one, an int tile to a negative power, the mean of ints) is an `exc.UnsupportedDtype` at the
user's line in both modes, with torch's reason. The compiled kernel used to run such ops
(their shape rule ran on meta tensors, which check no dtype): `F.gelu(int)` computed in int32
and returned [0, 0, ..., 1, 2], others crashed in JAX with a raw TypeError (trial E)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import check_tpu_lowering, run_ref


def _unary(fn):
    @pallasite.kernel
    def kernel(x):
        out = torch.empty([x.size(0)], dtype=torch.float32, device=x.device)
        for t in hl.tile(x.size(0)):
            out[t] = fn(x[t]).float()
        return out
    return kernel


INT_REFUSED = {
    "gelu": F.gelu, "softplus": F.softplus, "silu": F.silu, "logsigmoid": F.logsigmoid,
    "hardswish": F.hardswish, "hypot": lambda v: torch.hypot(v, v), "lerp": lambda v: torch.lerp(v, v, 0.5),
    "round_decimals": lambda v: torch.round(v, decimals=1), "negative_power": lambda v: v ** -1,
    "mean": lambda v: v.mean(0, keepdim=True).expand(v.size(0)),
}
FLOAT_REFUSED = {"bitwise_and": lambda v: v & 1, "shift": lambda v: v << 1}


@pytest.mark.parametrize("name", sorted(INT_REFUSED))
def test_a_float_only_op_of_an_int_tile_is_refused_in_both_modes(name):
    kernel, x = _unary(INT_REFUSED[name]), torch.arange(-4, 4, dtype=torch.int32)
    with pytest.raises(exc.UnsupportedDtype, match="int32"):
        kernel(x)
    with pytest.raises(exc.UnsupportedDtype, match="int32"):
        run_ref(kernel, (x,))


@pytest.mark.parametrize("name", sorted(FLOAT_REFUSED))
def test_an_integer_only_op_of_a_float_tile_is_refused_in_both_modes(name):
    kernel, x = _unary(FLOAT_REFUSED[name]), torch.ones(8)
    with pytest.raises(exc.UnsupportedDtype, match="float32"):
        kernel(x)
    with pytest.raises(exc.UnsupportedDtype, match="float32"):
        run_ref(kernel, (x,))


def test_the_same_ops_of_accepted_dtypes_still_run():
    x = torch.linspace(-3, 3, 8)
    torch.testing.assert_close(_unary(INT_REFUSED["gelu"])(x), F.gelu(x))
    torch.testing.assert_close(_unary(INT_REFUSED["negative_power"])(x), x ** -1)
    i = torch.arange(-4, 4, dtype=torch.int32)
    torch.testing.assert_close(_unary(FLOAT_REFUSED["bitwise_and"])(i), (i & 1).float())


@pallasite.kernel
def int_accumulated_float_dot(x, y):
    m, n = x.size(0), y.size(1)
    out = torch.empty([m, n], dtype=torch.int32, device=x.device)
    for tm, tn in hl.tile([m, n]):
        acc = hl.zeros([tm, tn], dtype=torch.int32)
        acc = hl.dot(x[tm, :], y[:, tn], acc=acc)
        out[tm, tn] = acc
    return out


def test_a_float_dot_into_an_integer_accumulator_is_refused():
    x, y = torch.randn(16, 128), torch.randn(128, 32)
    with pytest.raises(exc.UnsupportedDtype, match="acc"):
        int_accumulated_float_dot(x, y)
    with pytest.raises(exc.UnsupportedDtype, match="acc"):
        run_ref(int_accumulated_float_dot, (x, y))


def test_argmax_of_a_bool_tile_is_refused_in_both_modes():
    """(trial I) torch refuses argmax of bool ("does not support bool input"): the compiled kernel
    ran it and reference mode raised ShapeMismatch."""
    kernel, x = _unary(lambda v: v.argmax(0, keepdim=True).expand(v.size(0))), torch.arange(8) % 3 == 0
    with pytest.raises(exc.UnsupportedDtype, match="bool"):
        kernel(x)
    with pytest.raises(exc.UnsupportedDtype, match="bool"):
        run_ref(kernel, (x,))


@pallasite.kernel
def clamped_bools(x, y):
    out = torch.empty([2, x.size(0)], dtype=torch.bool, device=x.device)
    for t in hl.tile(x.size(0)):
        out[0, t] = torch.clamp(x[t], min=y[t])
        out[1, t] = torch.clamp(x[t], max=y[t])
    return out


def test_clamp_of_bool_tiles_lowers():
    """(trial I) torch.clamp of bool tiles ran in interpret mode but did not lower (Mosaic has no
    bool max/min): it is an or with the low and an and with the high (torch takes one bound only)."""
    x, y = torch.arange(16) % 2 == 0, torch.arange(16) % 3 == 0
    expected = torch.stack([torch.clamp(x, min=y), torch.clamp(x, max=y)])
    torch.testing.assert_close(clamped_bools(x, y), expected)
    check_tpu_lowering(clamped_bools, (x, y))
