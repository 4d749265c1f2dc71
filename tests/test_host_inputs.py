"""Host-code inputs as Helion programs write them (issue #22 §1): list arguments
(`normalized_shape`), a scalar argument that sizes host tensors without `hl.specialize`,
and torch's view ops on whole tensors (`view_as`, `reshape_as`, `unflatten`, ...)."""
from __future__ import annotations

import jax
import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def layer_norm(x, normalized_shape, weight, bias, eps: float = 1e-5):
    m, n = x.size()
    assert list(normalized_shape) == [n], f"normalized_shape {normalized_shape} does not match {n}"
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m in hl.tile(m):
        row = x[tile_m, :].to(torch.float32)
        mean = row.mean(-1, keepdim=True)
        centered = row - mean
        var = (centered * centered).mean(-1, keepdim=True)
        out[tile_m, :] = (centered * torch.rsqrt(var + eps) * weight[:] + bias[:]).to(out.dtype)
    return out


@pytest.mark.parametrize("shape", [[256], (256,), torch.Size([256])])
def test_a_list_argument_as_helion_layer_norm_takes_normalized_shape(shape):
    generator = torch.Generator().manual_seed(0)
    x, weight, bias = torch.randn(32, 256, generator=generator), torch.randn(256), torch.randn(256)
    _, out = code_and_output(layer_norm, (x, shape, weight, bias))
    expected = torch.nn.functional.layer_norm(x, [256], weight, bias)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(run_ref(layer_norm, (x, shape, weight, bias)), out, atol=1e-5, rtol=1e-5)


def test_a_list_argument_is_part_of_the_variant_key_by_its_contents():
    x, weight, bias = torch.randn(8, 256), torch.randn(256), torch.randn(256)
    layer_norm.reset()
    layer_norm(x, [256], weight, bias)
    layer_norm(x, [256], weight, bias)  # an equal list: the same variant
    assert layer_norm.cache_size == 1
    with pytest.raises(AssertionError, match=r"normalized_shape \[128\]"):
        layer_norm(x, [128], weight, bias)  # another list: traced again (and checked by the kernel)


def test_a_list_of_tensors_where_sizes_are_expected_is_a_clear_error():
    """A list of tensors is an argument now (tests/test_tensor_list_arguments.py); compared with
    sizes it has no truth value while compiling, as a tensor would have none in eager torch."""
    x, weight, bias = torch.randn(8, 256), torch.randn(256), torch.randn(256)
    with pytest.raises(exc.UnsupportedSyntax, match="truth value") as info:
        layer_norm(x, [weight], weight, bias)
    assert "normalized_shape" in str(info.value)


# ------------------------------------------------ a scalar that sizes host tensors --


@pallasite.kernel
def padded_rows(x, rows: int):
    """Helion's flex/fp8 attention pass such sizes as plain ints."""
    m, n = x.size()
    out = torch.zeros([rows, n], dtype=x.dtype, device=x.device)
    for tile_m in hl.tile(m):
        out[tile_m, :] = x[tile_m, :] * 2.0
    return out


def test_a_scalar_sizing_a_host_tensor_needs_no_hl_specialize():
    x = torch.randn(16, 128)
    padded_rows.reset()
    for rows in (16, 40, 16):
        _, out = code_and_output(padded_rows, (x, rows))
        expected = torch.zeros(rows, 128)
        expected[:16] = x * 2
        assert torch.equal(out, expected)
        assert torch.equal(run_ref(padded_rows, (x, rows)), out)
    assert padded_rows.bind((x, 16)).specialized == {"rows"}  # as if hl.specialize'd: one variant per value
    padded_rows(x, 16)
    padded_rows(x, 40)
    assert padded_rows.cache_size == 2


@pallasite.kernel(static_shapes=True)
def scaled_by_reciprocal(x, n: int):
    """Helion's ragged attention: `inv_max_seq_len = 1.0 / float(max_seq_len)` in host code."""
    out = torch.empty_like(x)
    inverse = 1.0 / float(n)
    for t in hl.tile(x.size(0)):
        out[t] = x[t] * inverse
    return out


def test_float_of_a_scalar_argument_needs_no_hl_specialize():
    """It was refused compiled (asking for hl.specialize) and ran in reference mode (trial Q)."""
    x = torch.randn(300)
    for n in (4, 7):
        _, out = code_and_output(scaled_by_reciprocal, (x, n), block_sizes=[128])
        torch.testing.assert_close(out, x * (1.0 / n))
        torch.testing.assert_close(run_ref(scaled_by_reciprocal, (x, n), block_sizes=[128]), out)
    assert scaled_by_reciprocal.bind((x, 4)).specialized == {"n"}


def test_a_scalar_traced_by_jax_jit_cannot_size_a_host_tensor():
    x = jax.numpy.ones((16, 128))
    with pytest.raises(exc.UnsupportedSyntax, match="rows"):
        jax.jit(padded_rows.jax_fn)(x, 32)


# ------------------------------------------------------- view ops in host code --


VIEWS = {
    "x.view_as(y)": lambda x, y: x.view_as(y),
    "x.reshape_as(y)": lambda x, y: x.reshape_as(y),
    "x[:1].expand_as(x)": lambda x, y: x[:1].expand_as(x),
    "x.unflatten(1, (2, 128)).flatten(1)": lambda x, y: x.unflatten(1, (2, 128)).flatten(1),
    "x.flatten().unflatten(0, (16, 128))": lambda x, y: x.flatten().unflatten(0, (16, 128)),
    "x.movedim(1, 0)": lambda x, y: x.movedim(1, 0),
    "x.moveaxis(0, -1)": lambda x, y: x.moveaxis(0, -1),
    "x.narrow(0, 2, 4)": lambda x, y: x.narrow(0, 2, 4),
    "x.narrow(1, 128, 128)": lambda x, y: x.narrow(1, 128, 128),
    "x.split(3)[1]": lambda x, y: x.split(3)[1],
    "x.split([2, 6], dim=0)[1]": lambda x, y: x.split([2, 6], dim=0)[1],
    "x.chunk(2, dim=1)[1]": lambda x, y: x.chunk(2, dim=1)[1],
    "x.unbind(0)[3][None]": lambda x, y: x.unbind(0)[3][None],
}


def _doubling_kernel(expression: str):
    """A kernel doubling `z = <expression>` (written to a file: pallasite reads kernel sources)."""
    import importlib.util
    import pathlib
    import tempfile

    source = ("import torch\nimport pallasite\nimport pallasite.language as hl\n\n\n@pallasite.kernel\n"
              "def doubled(x, y):\n"
              f"    z = {expression}\n"
              "    out = torch.empty(z.size(), dtype=z.dtype, device=z.device)\n"
              "    for tile in hl.tile(z.size(0)):\n"
              "        out[tile, :] = z[tile, :] * 2.0\n"
              "    return out\n")
    path = pathlib.Path(tempfile.mkdtemp(prefix="pallasite_views_")) / "views_kernel.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"views_kernel_{abs(hash(expression))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.doubled


@pytest.mark.parametrize("expression", list(VIEWS))
def test_view_ops_in_host_code(expression):
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 256, generator=generator), torch.randn(16, 128, generator=generator)
    kernel = _doubling_kernel(expression)
    expected = VIEWS[expression](x, y) * 2
    _, out = code_and_output(kernel, (x, y))
    assert torch.equal(out, expected)
    assert torch.equal(run_ref(kernel, (x, y)), expected)


@pallasite.kernel
def halves_of_rows(x, y):
    m = x.size(0)
    out = torch.empty([m, 128], dtype=x.dtype, device=x.device)
    for tile in hl.tile(m):
        block = x[tile, :]
        left, right = block.split(128, dim=1)
        last = block.narrow(1, 128, 128)
        first = block.chunk(2, dim=1)[0]
        other = y[tile, :].view_as(left).movedim(0, 1).moveaxis(1, 0)
        out[tile, :] = left + right * 2.0 + last + first + other
    return out


@pytest.mark.parametrize("block", [8, 16])
def test_the_same_view_ops_on_device_values(block):
    """On a loaded block they are narrowing reads and views like any subscript or reshape."""
    generator = torch.Generator().manual_seed(2)
    x, y = torch.randn(16, 256, generator=generator), torch.randn(16, 128, generator=generator)
    expected = 2 * x[:, :128] + 3 * x[:, 128:] + y
    _, out = code_and_output(halves_of_rows, (x, y), block_sizes=[block])
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(run_ref(halves_of_rows, (x, y), block_sizes=[block]), expected)


@pallasite.kernel
def reciprocal_of_a_scaled(x, a: float):
    scale = float(a)
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = 1.0 / (x[t] * scale)
    return out


def test_specialized_floats_key_by_their_bits():
    """0.0 and -0.0 are equal but two constants (1 / 0.0 is inf, 1 / -0.0 is -inf): the
    second call reused the first's variant (trial R); nan, never equal to itself, compiled a
    new variant at every call."""
    x = torch.ones(128)
    reciprocal_of_a_scaled.reset()
    assert reciprocal_of_a_scaled(x, 0.0)[0] == float("inf")
    assert reciprocal_of_a_scaled(x, -0.0)[0] == float("-inf")
    assert reciprocal_of_a_scaled.cache_size == 2
    for _ in range(3):
        assert reciprocal_of_a_scaled(x, float("nan")).isnan().all()
    assert reciprocal_of_a_scaled.cache_size == 3
