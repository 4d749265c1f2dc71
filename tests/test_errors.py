"""Bad input gets a clear `pallasite.exc` error, never a wrong answer.

Each test writes the kernel a user might write, calls it, and checks the error
type, that the message names the problem, and — for errors in kernel code —
that the error points at the user's offending source line.
"""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.runtime.chips import chip_info, default_chip


def line_of(kernel, text: str) -> int:
    """The file line number of the (single) line of `kernel`'s source containing `text`."""
    lines, first = inspect.getsourcelines(kernel.fn)
    matches = [first + i for i, line in enumerate(lines) if text in line]
    assert len(matches) == 1, f"{text!r} occurs {len(matches)} times in {kernel.fn.__name__}"
    return matches[0]


def assert_points_at(err: exc.PallasiteError, kernel, text: str) -> None:
    """The error carries the user's source line containing `text`, and shows it."""
    assert err.location is not None, f"no source location on: {err}"
    assert err.location.lineno == line_of(kernel, text)
    assert text in err.location.text
    assert text in str(err)


# ------------------------------------------------- unsupported device code --


@pallasite.kernel
def cummax_rows(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        out[tile_m, :] = torch.cummax(x[tile_m, :], dim=1).values
    return out


@pallasite.kernel
def sort_rows(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        out[tile_m, :] = torch.sort(x[tile_m, :], dim=1).values
    return out


@pytest.mark.parametrize(
    ("kernel", "op", "line"),
    [
        (cummax_rows, "cummax", "torch.cummax(x[tile_m, :], dim=1)"),
        (sort_rows, "sort", "torch.sort(x[tile_m, :], dim=1)"),
    ],
)
def test_unsupported_torch_op_in_device_code(kernel, op, line):
    x = torch.randn(16, 128)
    with pytest.raises(exc.UnsupportedOperation) as info:
        kernel(x)
    assert op in info.value.message
    assert "not supported" in info.value.message
    assert_points_at(info.value, kernel, line)


@pallasite.kernel
def while_in_device_loop(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        v = x[tile]
        while False:
            v = v + 1
        out[tile] = v
    return out


@pallasite.kernel
def if_on_device_value(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        v = x[tile]
        if v > 0:
            v = -v
        out[tile] = v
    return out


@pallasite.kernel
def return_in_device_loop(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile]
        return x
    return out


@pytest.mark.parametrize(
    ("kernel", "words", "line"),
    [
        (while_in_device_loop, ["While", "not supported"], "while False:"),
        (if_on_device_value, ["if on a device tensor", "torch.where"], "if v > 0:"),
        (return_in_device_loop, ["return inside a device loop"], "return x"),
    ],
)
def test_unsupported_syntax_in_device_code(kernel, words, line):
    x = torch.randn(256)
    with pytest.raises(exc.UnsupportedSyntax) as info:
        kernel(x)
    for word in words:
        assert word in info.value.message
    assert_points_at(info.value, kernel, line)


# --------------------------------------------------------- shape and index --


@pallasite.kernel
def carried_value_changes_shape(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m], dtype=x.dtype, device=x.device)
    for tile_m in hl.tile(m):
        acc = hl.zeros([tile_m], dtype=torch.float32)
        for tile_n in hl.tile(n, block_size=128):
            acc = acc[:, None] + x[tile_m, tile_n]
        out[tile_m] = acc.sum(1)
    return out


def test_loop_carried_value_changes_shape():
    x = torch.randn(16, 256)
    with pytest.raises(exc.ShapeMismatch) as info:
        carried_value_changes_shape(x)
    message = info.value.message
    assert "Loop-carried variable 'acc' is [16] torch.float32 before the loop" in message
    assert "[16, 128] torch.float32 after an iteration" in message
    assert_points_at(info.value, carried_value_changes_shape, "for tile_n in hl.tile(n, block_size=128):")


@pallasite.kernel
def store_row_sums_into_rows(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        out[tile_m, :] = x[tile_m, :].sum(1)
    return out


def test_store_shape_mismatch():
    x = torch.randn(16, 128)  # one block of all 16 rows by default
    with pytest.raises(exc.ShapeMismatch) as info:
        store_row_sums_into_rows(x)
    message = info.value.message
    assert "Cannot store a value of shape [16] into out[...] of shape [16, 128]" in message
    assert_points_at(info.value, store_row_sums_into_rows, "out[tile_m, :] = x[tile_m, :].sum(1)")


@pallasite.kernel
def copy_middle_columns(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m, 2], dtype=x.dtype, device=x.device)
    for tile_m in hl.tile(m):
        out[tile_m, :] = x[tile_m, 1:5:2]
    return out


def test_strided_slice_in_device_code():
    x = torch.randn(16, 128)
    with pytest.raises(exc.IndexingError) as info:
        copy_middle_columns(x)
    assert "1:5:2" in info.value.message and "step 2" in info.value.message
    assert_points_at(info.value, copy_middle_columns, "x[tile_m, 1:5:2]")


@pallasite.kernel
def add_whole_tensor(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] + y
    return out


def test_host_tensor_used_whole_in_device_code():
    x, y = torch.randn(256), torch.randn(256)
    with pytest.raises(exc.IndexingError) as info:
        add_whole_tensor(x, y)
    assert "Host tensor 'y' is used whole inside a device loop" in info.value.message
    assert "y[tile]" in info.value.message
    assert_points_at(info.value, add_whole_tensor, "out[tile] = x[tile] + y")


@pallasite.kernel
def keep_above_threshold_whole(x: torch.Tensor, thr: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.where(x[tile] > thr, x[tile], 0.0)
    return out


def test_a_0d_tensor_used_whole_is_told_to_read_its_value():
    x, thr = torch.randn(256), torch.tensor(0.5)
    with pytest.raises(exc.IndexingError) as info:
        keep_above_threshold_whole(x, thr)
    message = info.value.message
    assert "'thr' is a 0-d tensor" in message and "thr[()]" in message and "thr.item()" in message
    assert "thr[tile]" not in message  # a 0-d tensor has no axis to index with a tile
    assert_points_at(info.value, keep_above_threshold_whole, "torch.where(x[tile] > thr, x[tile], 0.0)")
    with pytest.raises(exc.IndexingError, match=r"0-d .* t\[\(\)\] \(or t.item\(\)\)"):  # reference mode too
        pallasite.testing.run_ref(keep_above_threshold_whole, (x, thr), block_sizes=[128])


@pallasite.kernel
def keep_above_threshold_read_in_host_code(x: torch.Tensor, thr: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    value = thr.item()
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.where(x[tile] > value, x[tile], 0.0)
    return out


def test_a_0d_tensor_read_in_host_code_is_told_where_to_read_it():
    with pytest.raises(exc.UnsupportedOperation) as info:
        keep_above_threshold_read_in_host_code(torch.randn(256), torch.tensor(0.5))
    assert "in host code" in info.value.message and "t[()] or t.item() there" in info.value.message
    assert_points_at(info.value, keep_above_threshold_read_in_host_code, "value = thr.item()")


@pallasite.kernel
def keep_above_threshold_indexed(x: torch.Tensor, thr: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.where(x[tile] > thr[()], x[tile], 0.0)
    return out


@pallasite.kernel
def keep_above_threshold_item(x: torch.Tensor, thr: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.where(x[tile] > thr.item(), x[tile], 0.0)
    return out


@pytest.mark.parametrize("kernel", [keep_above_threshold_indexed, keep_above_threshold_item])
def test_the_advised_reads_of_a_0d_tensor_work(kernel):
    x, thr = torch.randn(300), torch.tensor(0.25)
    expected = torch.where(x > thr, x, 0.0)
    torch.testing.assert_close(kernel(x, thr), expected)
    torch.testing.assert_close(pallasite.testing.run_ref(kernel, (x, thr)), expected)


@pallasite.kernel
def scale_to_runtime_length(x: torch.Tensor, n: int) -> torch.Tensor:
    out = torch.empty([n], dtype=x.dtype, device=x.device)
    for tile in hl.tile(n):
        out[tile] = x[tile] * 2
    return out


@pallasite.kernel
def scale_to_computed_length(x: torch.Tensor, n: int) -> torch.Tensor:
    out = torch.empty([n // 2 * 2], dtype=x.dtype, device=x.device)
    for tile in hl.tile(out.size(0)):
        out[tile] = x[tile] * 2
    return out


def test_runtime_scalar_used_as_shape():
    """A scalar argument that sizes a tensor is a constant of its variant, as Helion makes it
    (tests/test_host_inputs.py); a value computed from one still asks for hl.specialize."""
    x = torch.randn(256)
    torch.testing.assert_close(scale_to_runtime_length(x, 256), x * 2)
    with pytest.raises(exc.UnsupportedSyntax) as info:
        scale_to_computed_length(x, 256)
    assert "hl.specialize" in info.value.message
    assert_points_at(info.value, scale_to_computed_length, "out = torch.empty([n // 2 * 2]")


@pallasite.kernel
def relu_in_chunks(x: torch.Tensor, chunk: int) -> torch.Tensor:
    chunk = hl.specialize(chunk)
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0), block_size=chunk):
        out[tile] = torch.relu(x[tile])
    return out


def test_specialize_of_scalar_traced_by_jax_jit():
    x = jnp.linspace(-1.0, 1.0, 2048)
    np.testing.assert_allclose(relu_in_chunks.jax_fn(x, 1024), np.maximum(np.asarray(x), 0))
    with pytest.raises(exc.UnsupportedSyntax) as info:
        jax.jit(relu_in_chunks.jax_fn)(x, 1024)
    assert "traced by jax.jit" in info.value.message and "static_argnums" in info.value.message
    assert_points_at(info.value, relu_in_chunks, "chunk = hl.specialize(chunk)")
    # Made static, as the message says, it compiles.
    relu_jit = jax.jit(relu_in_chunks.jax_fn, static_argnums=1)
    np.testing.assert_allclose(relu_jit(x, 1024), np.maximum(np.asarray(x), 0))


@pallasite.kernel
def returns_device_value(x: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        doubled = x[tile] * 2
    return doubled


def test_device_value_returned_from_kernel():
    x = torch.randn(256)
    with pytest.raises(exc.DeviceValueInHostCode) as info:
        returns_device_value(x)
    assert "returns a value computed inside a device loop" in info.value.message
    assert_points_at(info.value, returns_device_value, "return doubled")


# ----------------------------------------------------------------- dtypes --


@pallasite.kernel
def double_it(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * 2
    return out


def test_64_bit_float_tensor_argument():
    x = torch.arange(256, dtype=torch.float64)
    with pytest.raises(exc.KernelArgumentError) as info:
        double_it(x)
    assert "torch.float64" in info.value.message
    assert "TPU has no 64-bit vectors; cast to float32." in info.value.message
    assert "'x'" in info.value.message
    torch.testing.assert_close(double_it(x.to(torch.float32)), x.to(torch.float32) * 2)  # the cast it asks for


def test_int64_data_tensor_argument():
    """An int64 tensor is accepted where it only indexes (tests/test_int64_indices.py); as data
    (here its copy would be an int64 output) it is refused at the line that needs 64 bits."""
    x = torch.arange(256, dtype=torch.int64)
    with pytest.raises(exc.UnsupportedDtype) as info:
        double_it(x)
    assert "TPU has no 64-bit vectors; cast to int32." in info.value.message
    assert_points_at(info.value, double_it, "out = torch.empty_like(x)")
    narrow = x.to(torch.int32)
    torch.testing.assert_close(double_it(narrow), narrow * 2)


@pallasite.kernel
def count_positives(x: torch.Tensor) -> torch.Tensor:
    counts = torch.zeros([x.size(0)], dtype=torch.int64, device=x.device)
    for tile in hl.tile(x.size(0)):
        counts[tile] = (x[tile] > 0).to(torch.int32)
    return counts


def test_int64_allocation_in_host_code():
    x = torch.randn(256)
    with pytest.raises(exc.UnsupportedDtype) as info:
        count_positives(x)
    assert "torch.int64" in info.value.message
    assert "TPU has no 64-bit vectors; cast to int32." in info.value.message
    assert_points_at(info.value, count_positives, "dtype=torch.int64")


# -------------------------------------------------------------- arguments --


def test_wrong_number_of_arguments():
    x = torch.randn(256)
    with pytest.raises(exc.KernelArgumentError) as info:
        double_it(x, x)
    assert "double_it" in info.value.message
    with pytest.raises(exc.KernelArgumentError):
        double_it()
    assert issubclass(exc.KernelArgumentError, TypeError)


def test_list_of_tensors_argument():
    x = torch.randn(256)
    with pytest.raises(exc.KernelArgumentError) as info:
        double_it([x, x])
    assert "list of tensors" in info.value.message
    assert "'x'" in info.value.message


def test_unhashable_argument():
    with pytest.raises(exc.KernelArgumentError) as info:
        double_it({"not": "a tensor"})
    assert "'x'" in info.value.message
    assert "dict" in info.value.message
    with pytest.raises(TypeError):  # KernelArgumentError is a TypeError too
        double_it({"not": "a tensor"})


# ---------------------------------------------------------------- configs --


def test_config_errors_are_value_errors():
    assert issubclass(exc.InvalidConfig, ValueError)
    assert issubclass(exc.IllegalBlockSize, ValueError)
    assert issubclass(exc.VmemOverflow, ValueError)


def test_unknown_config_key():
    with pytest.raises(exc.InvalidConfig) as info:
        pallasite.Config(foo=1)
    assert "Unknown config key 'foo'" in info.value.message
    assert "block_sizes" in info.value.message  # names the valid keys


def test_invalid_loop_type():
    with pytest.raises(ValueError) as info:
        pallasite.Config(pallas_loop_type="bogus")
    assert str(info.value).startswith("Invalid pallas_loop_type 'bogus'")
    assert isinstance(info.value, exc.InvalidConfig)


@pytest.mark.parametrize("bad", [[0], [-8], [8.0], 64, [True]])
def test_invalid_block_sizes_value(bad):
    with pytest.raises(exc.InvalidConfig) as info:
        pallasite.Config(block_sizes=bad)
    assert "block_sizes must be a list of positive ints" in info.value.message


@pytest.mark.parametrize("key", ["num_warps", "num_stages"])
def test_gpu_only_config_key_is_ignored_not_an_error(key):
    assert key not in pallasite.Config(**{key: 4})


def test_gpu_only_key_in_decorator_config_warns_naming_it():
    with pytest.warns(exc.IgnoredConfigKeys, match="num_warps"):

        @pallasite.kernel(config={"block_sizes": [256], "num_warps": 4})
        def warps(x: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x)
            for tile in hl.tile(x.size(0)):
                out[tile] = x[tile]
            return out


def test_misspelled_config_key():
    with pytest.raises(exc.InvalidConfig) as info:
        pallasite.Config(num_wraps=4)
    assert "Unknown config key 'num_wraps'" in info.value.message


def test_wrong_number_of_block_sizes():
    @pallasite.kernel(config=pallasite.Config(block_sizes=[8, 128, 128]))
    def add_2d(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile_m, tile_n in hl.tile(x.size()):
            out[tile_m, tile_n] = x[tile_m, tile_n] + y[tile_m, tile_n]
        return out

    x, y = torch.randn(16, 256), torch.randn(16, 256)
    with pytest.raises(exc.InvalidConfig) as info:
        add_2d(x, y)
    assert "3 entries" in info.value.message and "2 tunable block sizes" in info.value.message


@pallasite.kernel(config=pallasite.Config(block_sizes=[8, 100]))
def add_blocks(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.size()):
        out[tile_m, tile_n] = x[tile_m, tile_n] + y[tile_m, tile_n]
    return out


def test_an_illegal_block_size_keeps_the_axis_resident_and_says_why():
    """A block of 100 over a last dim of 300 is no TPU block: the axis stays resident."""
    x, y = torch.randn(16, 300), torch.randn(16, 300)
    torch.testing.assert_close(add_blocks(x, y), x + y)
    plan = add_blocks.bind((x, y)).plan()
    reasons = {op.symbol.name: op.axes[1].reason for op in (*plan.calls[0].inputs, *plan.calls[0].outputs)}
    assert set(reasons) == {"x", "y", "out"}
    assert all("a block of 100 is not a legal TPU block" in r and "multiple of 128" in r for r in reasons.values())
    for block_n in (128, 300):
        result = add_blocks.bind((x, y)).compile_config(pallasite.Config(block_sizes=[8, block_n]))(x, y)
        torch.testing.assert_close(result, x + y)


def test_a_resident_fallback_over_vmem_is_rejected_with_the_numbers():
    x = torch.empty(16, 4 * 2**20, device="meta")  # 256 MiB: no block of it is resident
    with pytest.raises(exc.VmemOverflow, match=r"estimated at \d+\.\d MiB, over the chip's \d+ MiB"):
        add_blocks.bind((x, x)).plan()


@pallasite.kernel
def row_copy(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        out[tile_m, :] = x[tile_m, :] + 1.0
    return out


def test_vmem_overflow():
    # Planned from shapes only: the (4096, 32768) float32 tensors are never allocated.
    x = torch.empty(4096, 32768, device="meta")
    bound = row_copy.bind((x,))
    with pytest.raises(exc.VmemOverflow) as info:
        bound.plan(pallasite.Config(block_sizes=[4096]))
    message = info.value.message
    capacity = chip_info(default_chip()).vmem_capacity_bytes
    assert re.search(r"estimated at \d+(\.\d)? MiB", message), message
    assert f"the chip's {capacity / 2**20:.0f} MiB VMEM" in message
    assert "smaller block sizes" in message
    assert isinstance(info.value, ValueError)
    assert_points_at(info.value, row_copy, "for tile_m in hl.tile(m):")
    # A block of 8 of the same rows fits.
    assert bound.plan(pallasite.Config(block_sizes=[8])).calls[0].vmem_bytes < capacity


# ---------------------------------------------------------------- backend --


def test_backend_triton_rejected():
    def body(x: torch.Tensor) -> torch.Tensor:
        return x

    with pytest.raises(exc.InvalidConfig) as info:
        pallasite.kernel(backend="triton")(body)
    assert "'triton'" in info.value.message and "'pallas'" in info.value.message


def test_backend_pallas_accepted():
    @pallasite.kernel(backend="pallas")
    def negate(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = -x[tile]
        return out

    x = torch.randn(1024)
    torch.testing.assert_close(negate(x), -x)


def test_a_vmem_limit_below_the_working_set_is_rejected():
    @pallasite.kernel(config=pallasite.Config(block_sizes=[8, 256], vmem_limit_bytes=1024))
    def copy_rows(x):
        out = torch.empty_like(x)
        for tile_m, tile_n in hl.tile(x.size()):
            out[tile_m, tile_n] = x[tile_m, tile_n]
        return out

    with pytest.raises(exc.VmemOverflow, match="vmem_limit_bytes=1024 is below"):
        copy_rows(torch.randn(96, 256))


@pallasite.kernel
def doubled(x):
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * 2
    return out


CAPTURED = {"scale": torch.randn(256)}


@pallasite.kernel
def scaled_by_captured(x):
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * CAPTURED["scale"][tile]
    return out


def test_a_complex_argument_names_complex_numbers_not_64_bits():
    with pytest.raises(exc.KernelArgumentError, match="complex"):
        doubled(torch.randn(256, dtype=torch.complex64))


def test_calling_a_kernel_on_meta_tensors_says_there_is_no_data():
    with pytest.raises(exc.KernelArgumentError, match="meta device"):
        doubled(torch.empty(256, device="meta"))
    doubled.bind((torch.empty(256, device="meta"),)).to_code()  # inspecting without data works


def test_a_tensor_in_a_captured_container_says_to_pass_it():
    # Tensors named by a global or closure variable are implicit arguments
    # (tests/test_captured_tensors.py); one inside a container cannot be re-read.
    with pytest.raises(exc.UnsupportedOperation, match="pass it to the kernel as an argument") as info:
        scaled_by_captured(torch.randn(256))
    assert 'CAPTURED["scale"][tile]' in str(info.value)


def test_a_pallasite_error_hides_pallasite_frames_unless_debugging(monkeypatch):
    import traceback

    package = str(Path(pallasite.__file__).parent)

    def internal_frames(err) -> int:
        return sum(1 for frame in traceback.extract_tb(err.__traceback__) if frame.filename.startswith(package))

    with pytest.raises(exc.UnsupportedOperation) as info:
        scaled_by_captured(torch.randn(256))
    assert internal_frames(info.value) <= 2  # the call and the frame that re-raises it
    monkeypatch.setenv("PALLASITE_DEBUG", "1")
    scaled_by_captured.reset()
    with pytest.raises(exc.UnsupportedOperation) as info:
        scaled_by_captured(torch.randn(256))
    assert internal_frames(info.value) > 3


@pallasite.kernel(config=pallasite.Config(block_sizes=[]))
def scaled_row(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    out = torch.empty([idx.size(0), x.size(1)], dtype=x.dtype, device=x.device)
    for g in hl.grid(idx.size(0)):
        out[g, :] = x[(idx[g] + 1) * 2 - (g - 1), :]
    return out


@pallasite.kernel(config=pallasite.Config(block_sizes=[]))
def scaled_constant_row(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty([4, x.size(1)], dtype=x.dtype, device=x.device)
    for g in hl.grid(4):
        out[g, :] = x[g * 2 // 2 - (1 - g), :]
    return out


def test_range_messages_keep_the_parentheses_of_the_index():
    """An index expression in a range message is parenthesized by precedence, so it reads
    as the user's expression (not `idx[g] + 1 * 2`)."""
    x = torch.randn(16, 128)
    with pytest.raises(exc.ShapeMismatch, match=r"\(idx\[g\] \+ 1\) \* 2 - \(g - 1\) is 18") as info:
        scaled_row(x, torch.tensor([1, 8, 2], dtype=torch.int32))
    assert info.value.location.lineno == line_of(scaled_row, "out[g, :] = x[")
    with pytest.raises(exc.ShapeMismatch, match=r"g \* 2 // 2 - \(1 - g\) covers \[-1, 5\]"):
        scaled_constant_row(torch.randn(4, 128))


def test_refusals_are_the_builtin_exceptions_python_code_catches():
    """Code written for Helion catches NotImplementedError for an op the backend lacks and
    TypeError for a dtype it cannot hold; pallasite's refusals are those too."""
    @pallasite.kernel
    def sorts(x):
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile, :] = torch.sort(x[tile, :], dim=-1).values
        return out

    with pytest.raises(NotImplementedError, match="sort"):
        sorts(torch.randn(8, 128))
    with pytest.raises(TypeError, match="float64"):
        sorts(torch.randn(8, 128, dtype=torch.float64))
    assert issubclass(exc.KernelArgumentError, TypeError) and issubclass(exc.InvalidConfig, ValueError)
