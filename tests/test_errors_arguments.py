"""Bad arguments, dtypes, configs and settings get a clear `pallasite.exc` error (the
kernel-code errors are in test_errors.py)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.runtime.chips import chip_figures, chip_info, default_chip
from pallasite.testing import run_ref

from source_lines import assert_points_at, line_of


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
    (here its values doubled and stored) it is refused at the line that needs 64 bits."""
    x = torch.arange(256, dtype=torch.int64)
    with pytest.raises(exc.UnsupportedDtype) as info:
        double_it(x)
    assert "TPU has no 64-bit vectors" in info.value.message
    assert "stores integers computed from its values" in info.value.message
    assert_points_at(info.value, double_it, "out[tile] = x[tile] * 2")
    narrow = x.to(torch.int32)
    torch.testing.assert_close(double_it(narrow), narrow * 2)


@pallasite.kernel
def count_positives(x: torch.Tensor) -> torch.Tensor:
    counts = torch.zeros([x.size(0)], dtype=torch.int64, device=x.device)
    for tile in hl.tile(x.size(0)):
        counts[tile] = (x[tile] > 0).to(torch.int32)
    return counts


def test_int64_allocation_in_host_code_is_returned_as_int64():
    """Held as int32 in the kernel, widened when returned (tests/test_int64_outputs.py)."""
    x = torch.randn(256)
    counts = count_positives(x)
    assert counts.dtype == torch.int64
    torch.testing.assert_close(counts, (x > 0).long())


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
    """A list of tensors is an argument (tests/test_tensor_list_arguments.py): used as one
    tensor, it fails as in eager torch, at the user's line."""
    x = torch.randn(256)
    with pytest.raises(TypeError, match="must be Tensor, not list") as info:
        double_it([x, x])
    assert "test_errors_arguments.py" in "".join(getattr(info.value, "__notes__", []))


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
    """A Config holds a key it does not know (a user tunable's name, as Helion's Config does);
    the kernel it meets refuses it at decoration, naming the valid keys."""
    config = pallasite.Config(foo=1)
    with pytest.raises(exc.InvalidConfig) as info:

        @pallasite.kernel(config=config)
        def copy(x: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x)
            for tile in hl.tile(x.size(0)):
                out[tile] = x[tile]
            return out

    assert "Unknown config key 'foo'" in info.value.message
    assert "block_sizes" in info.value.message  # names the valid keys
    assert "this kernel's: none" in info.value.message


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
    with pytest.raises(exc.VmemOverflow, match=r"estimated at \d+\.\d MiB, over TPU \w+'s \d+ MiB of VMEM"):
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
    assert f"TPU {chip_figures().name}'s {capacity / 2**20:.0f} MiB of VMEM" in message
    assert "smaller block sizes" in message
    assert isinstance(info.value, ValueError)
    assert_points_at(info.value, row_copy, "for tile_m in hl.tile(m):")
    # A block of 8 of the same rows fits.
    assert bound.plan(pallasite.Config(block_sizes=[8])).calls[0].vmem_bytes < capacity


def test_a_vmem_overflow_at_the_smallest_tiles_says_to_loop_over_the_whole_axes():
    """A trial's finding: rows of 3M floats in tiles of 8 said "use smaller block sizes"."""
    x = torch.empty(16, 3_000_000, device="meta")
    with pytest.raises(exc.VmemOverflow) as info:
        row_copy.bind((x,)).plan(pallasite.Config(block_sizes=[8]))
    message = info.value.message
    assert "smaller block sizes" not in message
    assert "the tiled axes are down to one sublane tile" in message and "hl.tile(n)" in message


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
    def medians(x):
        out = torch.empty([x.size(0)], dtype=x.dtype)
        for tile in hl.tile(x.size(0)):
            out[tile] = torch.median(x[tile, :], dim=-1).values
        return out

    with pytest.raises(NotImplementedError, match="median"):
        medians(torch.randn(8, 128))
    with pytest.raises(TypeError, match="float64"):
        medians(torch.randn(8, 128, dtype=torch.float64))
    assert issubclass(exc.KernelArgumentError, TypeError) and issubclass(exc.InvalidConfig, ValueError)


@pallasite.kernel
def scaled_by_keywords(x, *, alpha: float = 2.0, shift: int = 0, bias: torch.Tensor | None = None):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] * alpha + shift + (bias[t] if bias is not None else 0.0)
    return out


def test_keyword_only_parameters_bind_as_python_binds_them():
    """`def k(x, *, alpha=2.0)` was refused ('takes 1 arguments, got 2', trial V)."""
    x, bias = torch.randn(100), torch.randn(100)
    torch.testing.assert_close(scaled_by_keywords(x), x * 2)
    torch.testing.assert_close(scaled_by_keywords(x, alpha=3.0, shift=2, bias=bias), x * 3 + 2 + bias)
    torch.testing.assert_close(run_ref(scaled_by_keywords, (x,), {"alpha": 0.5}), x * 0.5)
    with pytest.raises(exc.KernelArgumentError, match="positional"):
        scaled_by_keywords(x, 3.0)
