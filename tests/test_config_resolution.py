"""One config resolution: `to_code()`, `plan()` and a plain call agree (issue #6 §1).

The config a call runs is resolved in one place — an explicit config, else the
decorator's `config=`, else `configs[0]`, else the default — so `to_code()`
with no argument shows exactly the module a plain call compiles.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from plan_helpers import add_kernel as _add_kernel, matmul


def _module_run_by_a_call(kernel, args, capfd, monkeypatch) -> str:
    """The generated module a plain call compiles, as PALLASITE_PRINT_CODE prints it."""
    monkeypatch.setenv("PALLASITE_PRINT_CODE", "1")
    capfd.readouterr()
    kernel(*args)
    printed = capfd.readouterr().err
    header, _, module = printed.partition("\n")
    assert header.startswith("# pallasite: generated code for")
    return module.rstrip("\n") + "\n"


ARGS = (torch.randn(256, 512), torch.randn(256, 512))


@pytest.mark.parametrize("options", [
    {"config": pallasite.Config(block_sizes=[128, 128])},
    {},
    {"configs": [pallasite.Config(block_sizes=[64, 256]), pallasite.Config(block_sizes=[128, 128])]},
], ids=["decorator_config", "default_config", "configs_list"])
def test_to_code_shows_the_module_a_plain_call_runs(options, capfd, monkeypatch):
    kernel = _add_kernel(**options)
    shown = kernel.bind(ARGS).to_code()
    assert _module_run_by_a_call(kernel, ARGS, capfd, monkeypatch) == shown


def test_decorator_config_is_what_to_code_and_plan_use():
    kernel = _add_kernel(config=pallasite.Config(block_sizes=[128, 128]))
    bound = kernel.bind(ARGS)
    assert "block_sizes=[128, 128]" in bound.to_code()
    assert [axis.dim.block_size for axis in bound.plan().calls[0].grid] == [128, 128]
    assert bound.resolve_config().block_sizes == [128, 128]


def test_to_code_of_a_kernel_whose_default_only_fits_streamed():
    # A resident (256, K) row block of x would be 2 GiB: only fori_loop fits VMEM.
    x = torch.empty(256, 2**22, dtype=torch.bfloat16, device="meta")
    y = torch.empty(2**22, 256, dtype=torch.bfloat16, device="meta")
    bound = matmul.bind((x, y))
    code = bound.to_code()  # used to raise VmemOverflow: to_code planned `unroll`
    assert "pallas_loop_type='fori_loop'" in code
    assert bound.plan().calls[0].inner_loops  # the same resolution


def test_an_explicit_partial_config_is_completed_and_checked():
    bound = _add_kernel().bind(ARGS)
    assert bound.resolve_config({"block_sizes": [8, 128]}).block_sizes == [8, 128]
    with pytest.raises(pallasite.exc.InvalidConfig, match="block_sizes has 1 entries"):
        bound.resolve_config({"block_sizes": [8]})


@pallasite.kernel(config=pallasite.Config(block_sizes=[8]))
def rows_broadcast(x):
    m, n = x.size()
    out = torch.empty([m, 128], dtype=x.dtype)
    for tile in hl.tile(m):
        out[tile, :] = x[tile, 0][:, None].expand(8, 128)  # written for the declared block of 8
    return out


def test_the_discovery_trace_uses_the_declared_block_sizes():
    x = torch.randn(24, 128)
    torch.testing.assert_close(rows_broadcast(x), x[:, :1].expand(24, 128))
    assert rows_broadcast.bind((x,)).resolve_config().block_sizes == [8]


def test_a_partial_explicit_config_completes_the_decorators_config():
    """`compile_config({"pallas_loop_type": ...})` keeps the kernel's own block sizes."""
    @pallasite.kernel(config=pallasite.Config(block_sizes=[16, 128, 64]))
    def mm(x, y):
        out = torch.empty([x.size(0), y.size(1)], dtype=torch.float32)
        for tm, tn in hl.tile([x.size(0), y.size(1)]):
            acc = hl.zeros([tm, tn], dtype=torch.float32)
            for tk in hl.tile(x.size(1)):
                acc = torch.addmm(acc, x[tm, tk], y[tk, tn])
            out[tm, tn] = acc
        return out

    x, y = torch.randn(32, 128), torch.randn(128, 256)
    bound = mm.bind((x, y))
    for loop_type in ("unroll", "fori_loop"):
        config = bound.resolve_config({"pallas_loop_type": loop_type})
        assert config.block_sizes == [16, 128, 64] and config["pallas_loop_type"] == loop_type
        torch.testing.assert_close(bound.compile_config({"pallas_loop_type": loop_type})(x, y), x @ y,
                                   rtol=1e-4, atol=1e-4)
    assert bound.resolve_config({"block_sizes": [8, 128, 128]}).block_sizes == [8, 128, 128]

    too_few = _add_kernel(config=pallasite.Config(block_sizes=[16]))
    with pytest.raises(pallasite.exc.InvalidConfig, match="block_sizes has 1 entries"):
        too_few.bind(ARGS).resolve_config({"pallas_loop_type": "unroll"})


@pallasite.kernel(autotune_effort="none")
def _rows_in_fours(x):
    b_size, t_size, d_size = x.size()
    out = torch.empty([b_size, d_size], dtype=torch.float32, device=x.device)
    for b in hl.grid(b_size):
        acc = hl.zeros([d_size], dtype=torch.float32)
        for tt in hl.tile(t_size):
            blk = x[b, tt, :]
            for ts in hl.tile(tt.end - tt.begin, block_size=4):
                acc = acc + blk[ts.index].sum(0)
        out[b, :] = acc
    return out


def test_the_default_config_skips_block_sizes_the_plan_rejects(monkeypatch):
    # The preferred outer block is the whole 21-row dim, which the inner fixed block of 4
    # reads past (a config-dependent InvalidConfig): the default moves on to a smaller
    # block that plans, instead of failing a kernel any config-free call should run.
    x = torch.randn(2, 21, 128)
    bound = _rows_in_fours.bind((x,))
    with pytest.raises(exc.InvalidConfig, match="divides"):
        bound.plan({"block_sizes": [21]})
    config = bound.resolve_config()
    assert config.block_sizes[0] % 4 == 0
    torch.testing.assert_close(_rows_in_fours(x), x.sum(1))
    monkeypatch.setenv("PALLASITE_REF", "1")  # reference mode runs the same default config
    torch.testing.assert_close(_rows_in_fours(x), x.sum(1))


def test_a_kernel_no_config_plans_raises_the_first_candidates_reason():
    @pallasite.kernel(autotune_effort="none")
    def past_the_block(x):
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            blk = x[tile, :]
            out[tile, :] = blk + blk[9]  # a constant row past every legal block of 8 rows
        return out

    with pytest.raises(exc.InvalidConfig, match="past the block"):
        past_the_block(torch.randn(8, 128))
