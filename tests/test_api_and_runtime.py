"""The public API and the runtime: decorator forms, binding and compile caches,
generated code, `pallasite.testing`, `jax_fn` inside `jax.jit`, in-place
updates, and kernels written exactly as for Helion."""
from __future__ import annotations

import importlib.util
import inspect
import os
import textwrap
import traceback

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import check_tpu_lowering, code_and_output


def source_line(kernel, text: str) -> tuple[int, str]:
    """(file line number, stripped text) of the one line of `kernel`'s source containing `text`."""
    lines, first = inspect.getsourcelines(kernel.fn)
    matches = [(first + i, line.strip()) for i, line in enumerate(lines) if text in line]
    assert len(matches) == 1
    return matches[0]


@pallasite.kernel
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([m, n]):
        out[tile_m, tile_n] = x[tile_m, tile_n] + y[tile_m, tile_n]
    return out


@pallasite.kernel
def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * factor
    return out


@pallasite.kernel
def row_softmax(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        row = x[tile_m, :]
        e = torch.exp(row - torch.amax(row, dim=1, keepdim=True))
        out[tile_m, :] = e / torch.sum(e, dim=1, keepdim=True)
    return out


# ---------------------------------------------------------------- decorator --


def test_bare_decorator():
    assert isinstance(add, pallasite.Kernel)
    assert add.fn.__name__ == "add" and add.__name__ == "add"
    assert "hl.tile([m, n])" in inspect.getsource(add.fn)
    x, y = torch.randn(16, 256), torch.randn(16, 256)
    torch.testing.assert_close(add(x, y), x + y)


def test_decorator_with_config():
    config = pallasite.Config(block_sizes=[8, 128])

    @pallasite.kernel(config=config)
    def add_blocked(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile_m, tile_n in hl.tile(x.size()):
            out[tile_m, tile_n] = x[tile_m, tile_n] + y[tile_m, tile_n]
        return out

    x, y = torch.randn(24, 384), torch.randn(24, 384)
    torch.testing.assert_close(add_blocked(x, y), x + y)
    bound = add_blocked.bind((x, y))
    assert [c.config for c in bound._compiled.values()] == [config]
    assert [axis.num_blocks for axis in bound.plan(config).calls[0].grid] == [3, 3]


def test_decorator_with_configs_and_helion_settings():
    configs = [pallasite.Config(block_sizes=[128]), pallasite.Config(block_sizes=[256])]

    @pallasite.kernel(configs=configs, static_shapes=True, autotune_effort="none")
    def negate(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = -x[tile]
        return out

    x = torch.randn(1000)
    torch.testing.assert_close(negate(x), -x)
    (compiled,) = negate.bind((x,))._compiled.values()
    assert compiled.config in configs


def test_decorator_rejects_bad_settings():
    with pytest.raises(exc.InvalidConfig, match="autotune_effort"):
        pallasite.kernel(autotune_effort="forever")(add.fn)
    with pytest.raises(exc.InvalidConfig, match="static_shapes='no'"):
        pallasite.kernel(static_shapes="no")(add.fn)
    with pytest.raises(exc.InvalidConfig, match="Unknown kernel settings: colour"):
        pallasite.kernel(colour="blue")(add.fn)


# ------------------------------------------------------------------ binding --


def test_bind_is_cached_per_signature():
    x, y = torch.randn(16, 256), torch.randn(16, 256)
    bound = add.bind((x, y))
    assert isinstance(bound, pallasite.BoundKernel)
    assert add.bind((torch.zeros(16, 256), torch.ones(16, 256))) is bound  # values don't matter
    assert add.bind((torch.randn(32, 256), torch.randn(32, 256))) is not bound  # shape does
    assert add.bind((x.bfloat16(), y.bfloat16())) is not bound  # dtype does
    torch.testing.assert_close(bound(x, y), x + y)


def test_reset_forgets_bound_kernels():
    @pallasite.kernel
    def double(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile] * 2
        return out

    x = torch.randn(1024)
    torch.testing.assert_close(double(x), x * 2)
    before = double.bind((x,))
    double.reset()
    after = double.bind((x,))
    assert after is not before
    assert after._compiled == {}
    torch.testing.assert_close(double(x), x * 2)


def test_to_code_quotes_user_source():
    x, y = torch.randn(16, 256), torch.randn(16, 256)
    bound = add.bind((x, y))
    code = bound.to_code(pallasite.Config(block_sizes=[8, 128]))
    assert isinstance(code, str)
    assert "pl.pallas_call(" in code
    lineno, text = source_line(add, "out[tile_m, tile_n] = ")
    assert f"# {os.path.basename(__file__)}:{lineno}: {text}" in code
    lineno, text = source_line(add, "for tile_m, tile_n in hl.tile")
    assert f"# {os.path.basename(__file__)}:{lineno}: {text}" in code
    compile(code, "<generated>", "exec")  # valid Python


def test_compile_config_returns_callable():
    x, y = torch.randn(40, 256), torch.randn(40, 256)
    bound = add.bind((x, y))
    compiled = bound.compile_config(pallasite.Config(block_sizes=[16, 128]))
    assert isinstance(compiled, pallasite.CompiledKernel)
    assert "pl.pallas_call(" in compiled.code
    torch.testing.assert_close(compiled(x, y), x + y)
    assert bound.compile_config({"block_sizes": [16, 128]}) is compiled


@pytest.mark.parametrize("shape", [(37, 300), (8, 1000)])
def test_default_config_for_odd_2d_shapes(shape):
    x, y = torch.randn(shape), torch.randn(shape)
    bound = add.bind((x, y))
    config = bound.config_spec.default_config()
    block_m, block_n = config.block_sizes
    assert block_m == shape[0] or block_m % 8 == 0
    assert block_n == shape[1] or block_n % 128 == 0
    torch.testing.assert_close(bound.compile_config(config)(x, y), x + y)


def test_default_config_for_odd_1d_shape():
    x = torch.randn(5000)
    bound = scale.bind((x, 0.5))
    (block,) = bound.config_spec.default_config().block_sizes
    assert block == 5000 or block % 1024 == 0 or (block >= 128 and block & (block - 1) == 0)
    torch.testing.assert_close(scale(x, 0.5), x * 0.5)


@pallasite.kernel
def row_statistics(x):
    m, n = x.shape
    y = torch.empty_like(x)
    mean = torch.empty([m], dtype=torch.float32, device=x.device)
    for tm in hl.tile(m):
        v = x[tm, :]
        mean[tm] = v.mean(-1)
        y[tm, :] = v - v.mean(-1, keepdim=True)
    return y, mean


def test_the_default_config_shrinks_below_the_aligned_sizes_to_fit_vmem():
    """A trial's finding: rows of 24000 floats with a 1-D per-row output. The aligned sizes
    of `mean`'s 1-D block (128 and up) all overflowed v7x's VMEM, and the default stopped
    there (VmemOverflow) though 64 rows plan (the planner keeps `mean` resident)."""
    x = torch.empty(256, 24000)
    bound = row_statistics.bind((x,))
    (block,) = bound.config_spec.default_config().block_sizes
    assert block < 128
    bound.plan(bound.config_spec.default_config())  # it fits


# ------------------------------------------------------- pallasite.testing --


def test_code_and_output_with_block_sizes():
    x, y = torch.randn(24, 256), torch.randn(24, 256)
    code, result = code_and_output(add, (x, y), block_sizes=[8, 128])
    assert "pl.pallas_call(" in code
    assert "block_sizes=[8, 128]" in code
    torch.testing.assert_close(result, x + y)


def test_code_and_output_with_helion_block_size_spelling():
    x = torch.randn(1024)
    code, result = code_and_output(scale, (x, 3.0), block_size=256)
    assert "block_sizes=[256]" in code
    torch.testing.assert_close(result, x * 3.0)


def test_code_and_output_default_config():
    x = torch.randn(40, 384)
    code, result = code_and_output(row_softmax, (x,))
    assert "pl.pallas_call(" in code
    torch.testing.assert_close(result, torch.softmax(x, dim=1))


def test_print_code_env(monkeypatch, capfd):
    monkeypatch.setenv("PALLASITE_PRINT_CODE", "1")

    @pallasite.kernel
    def add_one(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile] + 1.0
        return out

    x = torch.randn(1024)
    torch.testing.assert_close(add_one(x), x + 1.0)
    printed = capfd.readouterr().err
    assert "generated code for add_one" in printed
    assert "pl.pallas_call(" in printed
    assert "out[tile] = x[tile] + 1.0" in printed


# ------------------------------------------------------------ compile cache --


def test_repeat_call_does_not_recompile():
    x, y = torch.randn(16, 256), torch.randn(16, 256)
    add.reset()
    torch.testing.assert_close(add(x, y), x + y)
    bound = add.bind((x, y))
    (compiled,) = bound._compiled.values()
    x2, y2 = torch.randn(16, 256), torch.randn(16, 256)
    torch.testing.assert_close(add(x2, y2), x2 + y2)
    assert add.bind((x2, y2)) is bound
    assert list(bound._compiled.values()) == [compiled]
    assert compiled._jitted._cache_size() == 1


def test_scalar_value_change_does_not_recompile():
    x = torch.randn(2048)
    scale.reset()
    torch.testing.assert_close(scale(x, 2.0), x * 2.0)
    torch.testing.assert_close(scale(x, -0.25), x * -0.25)
    bound = scale.bind((x, 7.0))
    assert len(scale._bound) == 1
    (compiled,) = bound._compiled.values()
    assert compiled._jitted._cache_size() == 1


# ------------------------------------------------------------------ jax_fn --


def test_jax_fn_inside_jit():
    x, y = np.random.default_rng(0).standard_normal((2, 24, 256), dtype=np.float32)

    @jax.jit
    def add_then_double(a, b):
        return add.jax_fn(a, b) * 2

    result = add_then_double(jnp.asarray(x), jnp.asarray(y))
    assert isinstance(result, jax.Array)
    np.testing.assert_allclose(np.asarray(result), (x + y) * 2, rtol=1e-6)


def test_two_kernels_in_one_jit():
    x, y = np.random.default_rng(1).standard_normal((2, 16, 256), dtype=np.float32)

    @jax.jit
    def softmax_of_sum(a, b):
        return row_softmax.jax_fn(add.jax_fn(a, b))

    result = softmax_of_sum(jnp.asarray(x), jnp.asarray(y))
    expected = torch.softmax(torch.from_numpy(x + y), dim=1)
    torch.testing.assert_close(torch.from_numpy(np.array(result)), expected)


def test_jax_fn_scalar_argument_inside_jit():
    x = np.random.default_rng(3).standard_normal(2048, dtype=np.float32)
    scale_jit = jax.jit(scale.jax_fn)  # `factor` reaches the kernel as a traced Python float
    np.testing.assert_allclose(np.asarray(scale_jit(jnp.asarray(x), 2.0)), x * 2.0, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(scale_jit(jnp.asarray(x), -0.5)), x * -0.5, rtol=1e-6)
    assert scale_jit._cache_size() == 1  # a new scalar value is not a new trace


# ---------------------------------------------------------- in-place update --


@pallasite.kernel
def add_into(acc: torch.Tensor, x: torch.Tensor) -> None:
    for tile_m, tile_n in hl.tile(acc.size()):
        acc[tile_m, tile_n] = acc[tile_m, tile_n] + x[tile_m, tile_n]


def test_in_place_update_is_seen_by_torch_caller():
    acc, x = torch.randn(24, 256), torch.randn(24, 256)
    expected = acc + x
    assert add_into(acc, x) is None
    torch.testing.assert_close(acc, expected)


def test_in_place_update_is_aliased_in_plan():
    acc, x = torch.randn(24, 256), torch.randn(24, 256)
    plan = add_into.bind((acc, x)).plan(pallasite.Config(block_sizes=[8, 128]))
    (call,) = plan.calls
    assert [op.symbol.name for op in call.inputs] == ["acc", "x"]
    assert [op.symbol.name for op in call.outputs] == ["acc"]
    assert call.aliases == {0: 0}  # input 0 (acc) is output 0


def test_in_place_update_through_jax_fn():
    acc, x = np.random.default_rng(2).standard_normal((2, 24, 256), dtype=np.float32)
    result, updated = jax.jit(add_into.jax_fn)(jnp.asarray(acc), jnp.asarray(x))
    assert result is None
    assert set(updated) == {"acc"}
    np.testing.assert_allclose(np.asarray(updated["acc"]), acc + x, rtol=1e-6)


# -------------------------------------------------------- Helion kernels --

HELION_KERNELS = '''
import torch

import pallasite as helion
import pallasite.language as hl


@helion.kernel(config=helion.Config(block_sizes=[32, 128]))
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile] + y[tile]
    return out


@helion.kernel(autotune_effort="none")
def softmax(x: torch.Tensor) -> torch.Tensor:
    n, _m = x.size()
    out = torch.empty_like(x)
    for tile_n in hl.tile(n):
        values = x[tile_n, :]
        amax = torch.amax(values, dim=1, keepdim=True)
        exp = torch.exp(values - amax)
        sum_exp = torch.sum(exp, dim=1, keepdim=True)
        out[tile_n, :] = exp / sum_exp
    return out


@helion.kernel(autotune_effort="none")
def batch_scale(x: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    b, m, n = x.size()
    out = torch.empty_like(x)
    for i in hl.grid(b):
        out[i, :, :] = x[i, :, :] * scales[i]
    return out


@helion.kernel(autotune_effort="none")
def chunked_relu(x: torch.Tensor, chunk: int) -> torch.Tensor:
    (n,) = x.size()
    chunk = hl.specialize(chunk)
    out = torch.empty_like(x)
    for tile in hl.tile(n, block_size=chunk):
        out[tile] = torch.relu(x[tile])
    return out
'''


@pytest.fixture(scope="module")
def helion_module(tmp_path_factory):
    path = tmp_path_factory.mktemp("helion_kernels") / "helion_style_kernels.py"
    path.write_text(textwrap.dedent(HELION_KERNELS))
    spec = importlib.util.spec_from_file_location("helion_style_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_helion_add(helion_module):
    x, y = torch.randn(100, 300), torch.randn(100, 300)
    torch.testing.assert_close(helion_module.add(x, y), x + y)


def test_helion_softmax(helion_module):
    x = torch.randn(50, 256)
    torch.testing.assert_close(helion_module.softmax(x), torch.softmax(x, dim=1))


def test_helion_grid(helion_module):
    x, scales = torch.randn(3, 16, 128), torch.randn(3)
    torch.testing.assert_close(helion_module.batch_scale(x, scales), x * scales[:, None, None])


def test_helion_specialize(helion_module):
    x = torch.randn(4096)
    torch.testing.assert_close(helion_module.chunked_relu(x, 1024), torch.relu(x))
    torch.testing.assert_close(helion_module.chunked_relu(x, 2048), torch.relu(x))
    # hl.specialize makes the chunk part of the signature: one bound kernel per value.
    kernel = helion_module.chunked_relu
    assert kernel.bind((x, 1024)) is not kernel.bind((x, 2048))
    assert kernel.bind((x, 1024)).plan().calls[0].grid[0].num_blocks == 4


# ------------------------------------------------------------ TPU lowering --


@pallasite.kernel
def row_argmax(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m], dtype=torch.int32, device=x.device)
    for tile_m in hl.tile(m):
        out[tile_m] = torch.argmax(x[tile_m, :], dim=1).to(torch.int32)
    return out


def test_an_integer_argmax_lowers_as_max_then_first_index():
    # Mosaic's argmax takes float32 only: an int32 argmax (exact past 2^24, where a cast
    # to float32 would round) is a max, a compare and a min of the indices holding it.
    x = torch.stack([torch.randperm(256, dtype=torch.int32) * 70000 for _ in range(16)])
    x[:, 200] = x.amax(1)  # a repeated maximum: the first index wins, as in torch
    torch.testing.assert_close(row_argmax(x), torch.argmax(x, dim=1).to(torch.int32))
    codes = check_tpu_lowering(row_argmax, (x,), chips=["v5e"])
    assert "integer_arg_extreme(" in codes["v5e"]


def test_check_tpu_lowering_reports_mosaic_rejection():
    # A kernel with remote copies runs on every device of a mesh; lowered as one device's
    # kernel outside jax.shard_map, Mosaic rejects it: the check names the kernel, the
    # chip and Mosaic's reason.
    from examples.ring_all_gather import ring_all_gather, shard_inputs

    args = shard_inputs()
    with pytest.raises(exc.TpuLoweringFailed) as info:
        check_tpu_lowering(ring_all_gather, args, chips=["v5e"])
    assert "ring_all_gather did not lower to Mosaic for TPU v5e" in info.value.message
    assert "shard_map" in info.value.message
    # As every device of a mesh runs it, it lowers.
    codes = check_tpu_lowering(ring_all_gather, args, chips=["v5e"], mesh_shape=(1,))
    assert "pltpu.make_async_remote_copy(" in codes["v5e"]


def test_helion_decorator_spellings_use_default_config_and_print_output_code(capfd):
    @pallasite.kernel(use_default_config=True, print_output_code=True)
    def double(x):
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile] * 2
        return out

    x = torch.randn(1024)
    torch.testing.assert_close(double(x), x * 2)
    assert double.autotune_effort == "none"
    assert "pl.pallas_call" in capfd.readouterr().err


@pallasite.kernel
def lanes_of_64(x):
    """A body written for a block size of 64 along tk (`hl.zeros([tm, 64])`)."""
    m, n = x.size()
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tm in hl.tile(m):
        acc = hl.zeros([tm, 64], dtype=torch.float32)
        for tk in hl.tile(n):
            acc = acc + x[tm, tk]
        out[tm] = acc.sum(1)
    return out


def test_code_and_output_traces_the_kernel_at_the_config_it_is_given():
    """It traced at the default block sizes first (tk's whole 128: [16, 128] into [16, 64]) and
    refused a kernel the config runs; its errors had pallasite's frames, a call's have none."""
    x = torch.randn(16, 128)
    _, out = code_and_output(lanes_of_64, (x,), block_sizes=[8, 64])
    torch.testing.assert_close(out, x.reshape(16, 2, 64).sum(1).sum(1))
    with pytest.raises(exc.ShapeMismatch) as refused:  # the config it is given is the one refused
        code_and_output(lanes_of_64, (x,), block_sizes=[8, 32])
    frames = traceback.extract_tb(refused.value.__traceback__)
    assert len([f for f in frames if "/pallasite/" in f.filename]) <= 2  # the entry and _for_user, as a call's


def test_helions_host_helpers_are_pallasites():
    """`helion.cdiv` and `helion.next_power_of_2` (block sizes in host code) under `import
    pallasite as helion` (a trial: they did not exist outside the corpus harness)."""
    assert pallasite.cdiv(70, 32) == 3 and pallasite.cdiv(64, 32) == 2
    assert [pallasite.next_power_of_2(n) for n in (0, 1, 2, 3, 70, 128)] == [1, 1, 2, 4, 128, 128]



def test_check_tpu_lowering_plans_the_default_config_for_each_chip():
    # Rows of 500000 floats: 8 of them overflow v7x's 64 MiB of VMEM at every default block,
    # v5e's 128 MiB hold them. The default config is the one a call on that chip runs: it
    # was resolved once, at the default chip (v7x), so v5e's check raised v7x's overflow.
    from examples.softmax import softmax

    x = torch.empty(64, 500_000)
    codes = check_tpu_lowering(softmax, (x,), chips=["v5e"])
    assert "pl.pallas_call(" in codes["v5e"]
    with pytest.raises(exc.VmemOverflow, match="over TPU 7x's 64 MiB of VMEM"):
        check_tpu_lowering(softmax, (x,), chips=["v5e", "v7x"])
