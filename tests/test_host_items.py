"""`.item()` of an argument's element in host code (frontend/host_items.py): read from the
data at each call, a constant of the compiled variant (a new value compiles a new one), as
Helion's jagged softmax sizes its output with `offsets[-1].item()`."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def first_rows_doubled(x_data, x_offsets):
    n = x_offsets[-1].item()  # int64 offsets, as torch makes them
    out = torch.zeros([n, x_data.size(1)], dtype=x_data.dtype, device=x_data.device)
    for t in hl.tile(n):
        out[t, :] = x_data[t, :] * 2
    return out


def test_an_element_read_on_the_host_sizes_the_output_and_keys_the_variant():
    x = torch.randn(40, 128)
    first_rows_doubled.reset()
    for offsets, variants in (([0, 3, 10, 30], 1), ([0, 7, 9, 30], 1), ([0, 5, 6, 40], 2), ([0, 1, 2, 30], 2)):
        offsets = torch.tensor(offsets)
        out = first_rows_doubled(x, offsets)
        torch.testing.assert_close(out, x[:offsets[-1]] * 2)
        assert first_rows_doubled.cache_size == variants  # the same value reuses its variant
    torch.testing.assert_close(run_ref(first_rows_doubled, (x, torch.tensor([0, 9]))), x[:9] * 2)


@pallasite.kernel
def scaled_window(x, params):
    start, stop = params[0, 0].item(), params[1][1].item()  # two ways to name an element
    out = torch.empty([stop - start, x.size(1)], dtype=x.dtype, device=x.device)
    for t in hl.tile(stop - start):
        out[t, :] = x[t.index + start, :]
    return out


def test_elements_of_2d_tensors():
    x = torch.randn(32, 128)
    params = torch.tensor([[3, 0], [0, 19]], dtype=torch.int32)
    code, out = code_and_output(scaled_window, (x, params))
    torch.testing.assert_close(out, x[3:19])
    torch.testing.assert_close(run_ref(scaled_window, (x, params)), x[3:19])


@pallasite.kernel
def item_of_a_sum(x, lengths):
    n = lengths.amax().item()
    out = torch.empty([n, x.size(1)], dtype=x.dtype, device=x.device)
    for t in hl.tile(n):
        out[t, :] = x[t, :]
    return out


def test_item_of_a_value_host_code_computes_is_refused_at_the_line():
    with pytest.raises(exc.UnsupportedOperation, match="only an element of a tensor argument") as info:
        item_of_a_sum(torch.randn(8, 128), torch.tensor([3, 4], dtype=torch.int32))
    assert "n = lengths.amax().item()" in str(info.value)


def test_an_element_past_the_end_or_without_data_is_an_argument_error():
    x = torch.randn(32, 128)
    first_rows_doubled.reset()  # a fresh kernel learns which elements it reads at its first bind
    with pytest.raises(exc.KernelArgumentError, match=r"x_offsets\[-1\]\.item\(\).*meta"):
        first_rows_doubled.bind((x.to("meta"), torch.tensor([0, 3]).to("meta"))).to_code()
    scaled_window.reset()
    with pytest.raises(exc.ShapeMismatch, match="out of bounds") as info:  # the first trace reads it
        scaled_window(x, torch.zeros(0, 2, dtype=torch.int32))
    assert "params[0, 0].item()" in str(info.value)
    scaled_window(x, torch.tensor([[3, 0], [0, 19]], dtype=torch.int32))  # learns the two elements
    with pytest.raises(exc.KernelArgumentError, match=r"params\[0, 0\]\.item\(\).*past the end") as info:
        scaled_window(x, torch.zeros(0, 2, dtype=torch.int32))  # read before any trace
    assert "start, stop = params[0, 0].item()" in str(info.value)  # the line that reads it


@pallasite.kernel
def first_rows_by_int(x, offsets):
    n = int(offsets[-1])  # the other spelling of offsets[-1].item()
    out = torch.empty([n, x.size(1)], dtype=x.dtype, device=x.device)
    for t in hl.tile(n):
        out[t, :] = x[t, :] * 2
    return out


@pallasite.kernel
def scaled_by_an_element(x, scale):
    s = scale[0].item()
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t, :] = x[t, :] * s
    return out


@pallasite.kernel
def window_between(x, p):
    a, b = p[0].item(), p[1].item()
    out = torch.empty([b - a, x.size(1)], dtype=x.dtype, device=x.device)
    for t in hl.tile(b - a):
        out[t, :] = x[t.index + a, :]
    return out


def test_int_of_an_element_and_the_errors_name_what_the_user_wrote():
    """Found by the trial: int(offsets[-1]) was a raw TypeError, a float element's refusal
    named '_t1', a negative size torch's raw RuntimeError."""
    x = torch.randn(64, 128)
    torch.testing.assert_close(first_rows_by_int(x, torch.tensor([0, 5, 30])), x[:30] * 2)
    with pytest.raises(exc.UnsupportedOperation, match=r"Tensor.item of scale\[0\] in host code") as info:
        scaled_by_an_element(x, torch.tensor([1.5]))
    assert "s = scale[0].item()" in str(info.value)
    with pytest.raises(exc.ShapeMismatch, match=r"size \[-2, 128\]: a size is negative") as info:
        window_between(x, torch.tensor([5, 3]))
    assert "out = torch.empty([b - a" in str(info.value)
