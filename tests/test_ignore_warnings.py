"""Host code that computes on whole tensors is said once (`exc.TensorOperationInWrapper`, as
Helion says it), and a kernel's `ignore_warnings=[...]` setting silences the warning
classes it lists for that kernel only (issue #22)."""
from __future__ import annotations

import warnings

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import run_ref

X, Y = torch.randn(16, 128), torch.randn(16, 128)


def _scaled_add(**settings):
    @pallasite.kernel(**{"config": {"block_sizes": [8]}, **settings})
    def scaled_add(x, y):
        doubled = x * 2.0  # host code: a whole-tensor op outside the device loop
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile, :] = doubled[tile, :] + y[tile, :]
        return out
    return scaled_add


def _recorded(fn, *args, **kwargs) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fn(*args, **kwargs)
    return list(record)


def _host_op_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, exc.TensorOperationInWrapper)]


def test_a_host_tensor_operation_is_said_once_naming_its_line():
    kernel = _scaled_add()
    record = _recorded(kernel, X, Y)
    messages = _host_op_warnings(record)
    assert len(messages) == 1, messages
    assert "doubled = x * 2.0" in messages[0] and "scaled_add" in messages[0]
    assert record[0].filename == __file__  # attributed to the caller's line, not pallasite's
    assert _host_op_warnings(_recorded(kernel, X, Y)) == []  # once per kernel and line
    assert _host_op_warnings(_recorded(kernel, X[:8], Y[:8])) == []  # a new signature: same line


def test_ignore_warnings_silences_the_host_operation_warning_and_changes_nothing_else():
    kernel = _scaled_add(ignore_warnings=[exc.TensorOperationInWrapper])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = kernel(X, Y)
        code = kernel.bind((X, Y)).to_code()
    torch.testing.assert_close(out, X * 2.0 + Y)
    torch.testing.assert_close(run_ref(kernel, (X, Y)), out)
    assert code == _scaled_add().bind((X, Y)).to_code()


def test_a_base_class_in_ignore_warnings_silences_its_subclasses():
    kernel = _scaled_add(ignore_warnings=(exc.PallasiteWarning,), persistent_reserved_sms=2)
    record = _recorded(kernel, X, Y)
    assert not [w for w in record if issubclass(w.category, exc.PallasiteWarning)]


def test_ignore_warnings_covers_the_warnings_said_at_decoration():
    def decorate(**settings):
        return _scaled_add(config={"block_sizes": [8], "num_stages": 3}, **settings)

    assert [w for w in _recorded(decorate) if issubclass(w.category, exc.IgnoredConfigKeys)]
    assert not _recorded(decorate, ignore_warnings=[exc.IgnoredConfigKeys])


def test_one_kernels_ignore_warnings_do_not_silence_another_kernel():
    quiet = _scaled_add(ignore_warnings=[exc.TensorOperationInWrapper])
    loud = _scaled_add()
    assert _host_op_warnings(_recorded(quiet, X, Y)) == []
    assert len(_host_op_warnings(_recorded(loud, X, Y))) == 1


def test_allocations_views_and_device_loops_are_not_host_operations():
    @pallasite.kernel(config={"block_sizes": [8]})
    def copy_rows(x):
        flat = x.view(-1)  # a view
        out = torch.zeros_like(x)  # an allocation
        for tile in hl.tile(x.size(0)):
            out[tile, :] = x[tile, :] * 3.0
        return out, flat

    record = _recorded(copy_rows, X)
    assert _host_op_warnings(record) == []
    out, flat = copy_rows(X)
    torch.testing.assert_close(out, X * 3.0)
    torch.testing.assert_close(flat, X.view(-1))


@pytest.mark.parametrize("value", [exc.TensorOperationInWrapper, ["TensorOperationInWrapper"], [ValueError]])
def test_ignore_warnings_takes_a_list_of_warning_classes(value):
    with pytest.raises(exc.InvalidConfig, match="ignore_warnings=.*a list of warning classes"):
        _scaled_add(ignore_warnings=value)


def test_the_warning_class_is_documented_and_a_pallasite_warning():
    assert issubclass(exc.TensorOperationInWrapper, exc.PallasiteWarning)
    assert issubclass(exc.TensorOperationInWrapper, Warning)
    assert "not fused" in exc.TensorOperationInWrapper.__doc__
