"""Configs and kernel settings as Helion programs pass them (issue #22 §1): GPU-only config
keys are ignored with one warning per kernel naming them, keys that mean nothing anywhere
stay errors, and Helion's kernel settings take their TPU meaning (`dot_precision`: the
precision of the kernel's matmuls) or are refused with the reason."""
from __future__ import annotations

import warnings

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref

GPU_KEYS = {"num_warps": 4, "num_stages": 3, "range_unroll_factors": [0, 1], "range_num_stages": [0, 2],
            "range_flattens": [None, True], "range_multi_buffers": [None, False], "indexing": "block_ptr",
            "range_warp_specializes": [None], "load_eviction_policies": ["", "last"], "pid_type": "flat",
            "num_sm_multiplier": 2, "maxnreg": 128, "static_ranges": [False], "l2_groupings": [1],
            "flatten_loops": [False], "num_threads": [128], "atomic_indexing": "pointer",
            "grid_fissions": [[0]], "epilogue_subtile": None, "advanced_controls_file": ""}


def _add(**settings):
    @pallasite.kernel(**settings)
    def add(x, y):
        out = torch.empty_like(x)
        for tile_m, tile_n in hl.tile([x.size(0), x.size(1)]):
            out[tile_m, tile_n] = x[tile_m, tile_n] + y[tile_m, tile_n]
        return out
    return add


ARGS = (torch.randn(16, 256), torch.randn(16, 256))


def _ignored_key_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, exc.IgnoredConfigKeys)]


def test_a_config_drops_gpu_only_keys_and_names_them():
    config = pallasite.Config(block_sizes=[8, 128], **GPU_KEYS)
    assert dict(config) == {"block_sizes": [8, 128]}
    assert config == pallasite.Config(block_sizes=[8, 128])  # the same compiled variant
    assert set(config.ignored_keys) == {key for key, value in GPU_KEYS.items() if value is not None}


def test_cute_blackwell_key_family_is_gpu_only():
    """CuTe's tcgen05_* keys (stages, clusters, epilogue warps: a Blackwell fp8 matmul's
    config) are a family: each is dropped and named, like the listed GPU keys."""
    config = pallasite.Config(block_sizes=[8, 128], tcgen05_ab_stages=8, tcgen05_cluster_m=2,
                              tcgen05_strategy="persistent")
    assert dict(config) == {"block_sizes": [8, 128]}
    assert config.ignored_keys == ("tcgen05_ab_stages", "tcgen05_cluster_m", "tcgen05_strategy")
    with pytest.raises(exc.InvalidConfig, match="Unknown config key 'tcgen_ab_stages'"):
        pallasite.Config(tcgen_ab_stages=8)  # not the family: a misspelling stays an error


def test_gpu_only_keys_in_config_configs_and_overrides_warn_once_per_kernel():
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        kernel = _add(config={"block_sizes": [8, 128], "num_warps": 4},
                      configs=[{"block_sizes": [16, 128], "num_stages": 2, "indexing": "pointer"}],
                      autotune_config_overrides={"range_unroll_factors": [0, 0]})
        torch.testing.assert_close(kernel(*ARGS), ARGS[0] + ARGS[1])
        kernel.bind(ARGS).compile_config({"block_sizes": [8, 128], "num_warps": 8})  # warned already
    messages = _ignored_key_warnings(record)
    assert len(messages) == 1, messages
    for key in ("num_warps", "num_stages", "indexing", "range_unroll_factors"):
        assert key in messages[0]
    assert "'add'" in messages[0]


def test_a_gpu_key_first_given_at_a_call_warns_then():
    kernel = _add(config={"block_sizes": [8, 128]})
    with pytest.warns(exc.IgnoredConfigKeys, match="maxnreg"):
        code, out = code_and_output(kernel, ARGS, block_sizes=[8, 128], maxnreg=64)
    torch.testing.assert_close(out, ARGS[0] + ARGS[1])
    assert code == kernel.bind(ARGS).to_code({"block_sizes": [8, 128]})  # nothing else changed


@pytest.mark.parametrize("key", ["num_wraps", "pallas_loop_kind", "block_sises"])
def test_misspelled_builtin_keys_are_errors_at_once(key):
    """A key close to a built-in one, or in a built-in family's prefix, is a misspelling."""
    with pytest.raises(exc.InvalidConfig, match=f"Unknown config key '{key}'"):
        pallasite.Config(block_sizes=[8], **{key: 1})
    with pytest.raises(exc.InvalidConfig, match=key):
        _add(autotune_config_overrides={key: 1})


@pytest.mark.parametrize("setting", ["config", "configs", "autotune_config_overrides", "autotune_seed_configs"])
def test_keys_that_mean_nothing_to_the_kernel_are_refused_at_decoration(setting):
    """`colour` could be a user tunable's name, so a Config holds it (as Helion's does); a
    kernel that declares no such tunable refuses it when decorated, naming the setting."""
    config = pallasite.Config(block_sizes=[8, 128], colour=1)
    value = {"configs": [config], "autotune_config_overrides": {"colour": 1}}.get(setting, config)
    with pytest.raises(exc.InvalidConfig, match=f"{setting}.*Unknown config key 'colour'.*this kernel's: none"):
        _add(**{setting: value})


# ------------------------------------------------------------- dot_precision --


def _matmul(**settings):
    @pallasite.kernel(**settings)
    def matmul(x, y):
        m, k = x.size()
        out = torch.empty([m, y.size(1)], dtype=torch.float32, device=x.device)
        for tile_m, tile_n in hl.tile([m, y.size(1)]):
            acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(k):
                acc = acc + x[tile_m, tile_k] @ y[tile_k, tile_n]
            out[tile_m, tile_n] = acc
        return out
    return matmul


@pytest.mark.parametrize("precision, mosaic_fp32", [("ieee", True), ("tf32x3", True), ("tf32", False), (None, False)])
def test_dot_precision_is_the_precision_of_the_kernels_matmuls(precision, mosaic_fp32):
    kernel = _matmul(**({} if precision is None else {"dot_precision": precision}))
    x, y = torch.randn(64, 256), torch.randn(256, 128)
    config = {"block_sizes": [32, 128, 128]}
    code, out = code_and_output(kernel, (x, y), **config)
    torch.testing.assert_close(out, x @ y, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(run_ref(kernel, (x, y), **config), out, atol=1e-3, rtol=1e-3)
    assert kernel.bind((x, y)).plan(config).dot_precision == ("HIGHEST" if mosaic_fp32 else "DEFAULT")
    assert ("precision=lax.Precision.HIGHEST" in code) == mosaic_fp32
    mosaic: dict[str, list[str]] = {}
    check_tpu_lowering(kernel, (x, y), mosaic=mosaic, **config)
    assert set(mosaic) == {"v5e", "v6e", "v7x"}
    for chip, modules in mosaic.items():
        assert any(("contract_precision<fp32>" in module) == mosaic_fp32 for module in modules), chip


def test_a_bad_dot_precision_is_refused():
    with pytest.raises(exc.InvalidConfig, match="dot_precision='bf16'.*'tf32', 'tf32x3', 'ieee'"):
        _matmul(dot_precision="bf16")


# ----------------------------------------------------- other kernel settings --


def test_index_dtype_int32_is_what_a_tpu_indexes_with():
    kernel = _add(index_dtype=torch.int32, config={"block_sizes": [8, 128]})
    torch.testing.assert_close(kernel(*ARGS), ARGS[0] + ARGS[1])
    _add(index_dtype=None)  # Helion's default: chosen by the compiler
    with pytest.raises(exc.InvalidConfig, match="index_dtype=torch.int64.*int32"):
        _add(index_dtype=torch.int64)


def test_gpu_only_settings_are_ignored_with_the_config_keys_warning():
    with pytest.warns(exc.IgnoredConfigKeys, match="persistent_reserved_sms.*allow_warp_specialize|"
                                                   "allow_warp_specialize.*persistent_reserved_sms"):
        kernel = _add(persistent_reserved_sms=2, allow_warp_specialize=False, config={"block_sizes": [8, 128]})
    torch.testing.assert_close(kernel(*ARGS), ARGS[0] + ARGS[1])


def test_autotune_progress_bar_false_draws_no_progress(capfd):
    kernel = _add(autotune_effort="quick", autotune_progress_bar=False)
    kernel.bind(ARGS).autotune(ARGS)
    printed = capfd.readouterr().err
    assert "autotune add" not in printed  # the bar's (or the status lines') title
    kernel = _add(autotune_effort="quick")
    kernel.bind(ARGS).autotune(ARGS)
    assert "autotune add" in capfd.readouterr().err


def test_autotune_log_level_zero_prints_nothing(capfd):
    kernel = _add(autotune_effort="quick", autotune_log_level=0)
    torch.testing.assert_close(kernel(*ARGS), ARGS[0] + ARGS[1])  # tuned (or cached) silently
    assert "[pallasite autotune]" not in capfd.readouterr().err
    with pytest.raises(exc.InvalidConfig, match="autotune_log_level"):
        _add(autotune_log_level="loud")


def test_force_autotune_tunes_a_kernel_that_names_its_config():
    from pallasite.autotune.tuner import wants_tuning

    named = {"block_sizes": [8, 128]}
    assert not wants_tuning(_add(autotune_effort="quick", config=named).bind(ARGS))
    forced = _add(autotune_effort="quick", config=named, force_autotune=True)
    assert wants_tuning(forced.bind(ARGS))
    torch.testing.assert_close(forced(*ARGS), ARGS[0] + ARGS[1])


@pytest.mark.parametrize("name, value", [("fast_math", True), ("autotune_max_generations", 3),
                                         ("output_origin_lines", False)])
def test_a_helion_setting_pallasite_does_not_implement_is_refused_unless_default(name, value):
    with pytest.raises(exc.InvalidConfig, match=f"{name}.*no implementation in pallasite"):
        _add(**{name: value})
    _add(**{name: {"fast_math": False, "autotune_max_generations": None, "output_origin_lines": True}[name]})


def test_a_setting_helion_does_not_document_is_refused():
    with pytest.raises(exc.InvalidConfig, match="autotune_colour"):
        _add(autotune_colour=1)


def _double_rows(x):
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :] * 2
    return out


@pytest.mark.parametrize("mode, compiles", [(pallasite.RefMode.EAGER, False), (pallasite.RefMode.OFF, True)])
def test_helions_ref_mode_enum_is_the_same_switch(mode, compiles, monkeypatch):
    """Helion spells it `ref_mode=helion.RefMode.EAGER`: every call eager, nothing compiled."""
    from pallasite.runtime import compiled

    seen = []
    monkeypatch.setattr(compiled, "COMPILE_OBSERVERS", [*compiled.COMPILE_OBSERVERS, seen.append])
    kernel = pallasite.kernel(_double_rows, config=pallasite.Config(block_sizes=[8]), ref_mode=mode)
    x = torch.randn(20, 128)
    torch.testing.assert_close(kernel(x), x * 2)
    assert bool(seen) == compiles


# ------------------------------------------------- configs built before their kernel --

SPLIT_K_CONFIG = pallasite.Config(block_sizes=[8, 128], split_k=2)  # before the kernel exists, as Helion programs write


@pallasite.kernel(config=SPLIT_K_CONFIG)
def _scaled_by_tunable(x: torch.Tensor) -> torch.Tensor:
    split = hl.register_tunable("split_k", hl.PowerOfTwoFragment(1, 4))
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.size()):
        out[tile_m, tile_n] = x[tile_m, tile_n] * split
    return out


def test_a_config_naming_a_tunable_may_be_built_before_its_kernel():
    x = torch.randn(16, 256)
    torch.testing.assert_close(_scaled_by_tunable(x), x * 2)
    torch.testing.assert_close(run_ref(_scaled_by_tunable, (x,)), x * 2)
    with pytest.raises(exc.InvalidConfig, match="split_k=3 is not legal"):
        _scaled_by_tunable.bind((x,)).compile_config({"block_sizes": [8, 128], "split_k": 3})
    with pytest.raises(exc.InvalidConfig, match="Unknown config key 'split_kk' \\(did you mean 'split_k'\\?\\)"):
        _scaled_by_tunable.bind((x,)).compile_config({"block_sizes": [8, 128], "split_kk": 2})


def test_config_json_round_trip(tmp_path):
    config = pallasite.Config(block_sizes=[8, 128], pallas_loop_type=["unroll", "fori_loop"], split_k=2)
    assert pallasite.Config.from_json(config.to_json()) == config
    config.save(tmp_path / "best.json")
    assert pallasite.Config.load(tmp_path / "best.json") == config
    with pytest.raises(exc.InvalidConfig, match="Not a config in JSON"):
        pallasite.Config.from_json("{block_sizes")
    with pytest.raises(exc.InvalidConfig, match="block_sizes must be"):
        pallasite.Config.from_json('{"block_sizes": [0]}')


def test_megakernel_keys_are_dropped_with_their_own_warning():
    """Helion's Pallas megakernel knobs tune a schedule pallasite does not have (every device
    loop is its own pallas_call): the kernel runs, says so once, and the result is torch's."""
    with pytest.warns(exc.IgnoredConfigKeys, match="pallas_stream_depth.*megakernel") as record:
        kernel = _add(config={"block_sizes": [8, 128], "pallas_stream_depth": 4, "pallas_lane_dense": False})
        torch.testing.assert_close(kernel(*ARGS), ARGS[0] + ARGS[1])
    assert len([w for w in record if "megakernel" in str(w.message)]) == 1
    assert pallasite.Config(block_sizes=[8, 128], pallas_hbm_resident=True).config == {"block_sizes": [8, 128]}
    with pytest.raises(exc.InvalidConfig, match="Unknown config key 'pallas_stream_dept'"):
        pallasite.Config(pallas_stream_dept=4)  # a misspelling stays an error


def test_a_misspelled_kernel_setting_says_which_it_may_mean():
    with pytest.raises(exc.InvalidConfig, match=r"Unknown kernel settings: static_shape .*did you mean 'static_shapes'\?"):
        pallasite.kernel(static_shape=True)(lambda x: x)


def test_helions_autotune_flow(tmp_path, monkeypatch):
    """(trial G) Helion's `best = kernel.autotune(args, force=True)` (a Config later calls run)
    raised AttributeError, and `kernel.bind(args).autotune(args)` (a SearchResult here) could
    not be passed to compile_config or saved, as Helion's examples do."""
    monkeypatch.setenv("PALLASITE_CACHE_DIR", str(tmp_path))
    kernel = _add(autotune_effort="quick")
    best = kernel.autotune(ARGS, force=True)
    assert isinstance(best, pallasite.Config) and best.block_sizes
    bound = kernel.bind(ARGS)
    assert bound.resolve_config() == best  # later calls run it
    torch.testing.assert_close(kernel(*ARGS), ARGS[0] + ARGS[1])
    assert kernel.autotune(ARGS, force=False) == best  # the cached choice serves
    result = bound.autotune(ARGS)
    torch.testing.assert_close(bound.compile_config(result)(*ARGS), ARGS[0] + ARGS[1])
    result.save(tmp_path / "best.json")
    assert pallasite.Config.load(tmp_path / "best.json") == result.best
