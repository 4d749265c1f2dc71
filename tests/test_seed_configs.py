"""`autotune_seed_configs` (Helion's setting, issue #22): configs the search starts from beside
the default. Each is scored right after the default; a quick search also tries its
neighbourhood and a full one breeds from it; one that does not plan is skipped with a
warning naming it."""
from __future__ import annotations

import math
import warnings

import pytest
import torch

import pallasite
from pallasite import exc
from pallasite.autotune.search import search
from plan_helpers import add_kernel

WIDE = torch.empty(512, 2048, device="meta")  # block sizes 8..512 x 128..2048; default [256, 1024]


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PALLASITE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PALLASITE_AUTOTUNE_QUIET", "1")


def _small_blocks_win(config) -> float:
    """A known optimum far from the default: block sizes [8, 128]."""
    a, b = config.block_sizes
    return math.log2(a / 8) + math.log2(b / 128) + 1.0


def _space(**settings):
    return add_kernel(**settings).bind((WIDE, WIDE)).config_spec


def test_a_quick_search_from_a_seed_finds_what_the_default_neighbourhood_cannot():
    space = _space()
    alone = search(space, _small_blocks_win, effort="quick")
    assert alone.best.block_sizes != [8, 128]
    seeded = search(space, _small_blocks_win, effort="quick", seeds=[pallasite.Config(block_sizes=[16, 128])])
    assert seeded.best.block_sizes == [8, 128]  # a neighbour of the seed
    assert seeded.trials[0].config == alone.trials[0].config  # the default first
    assert seeded.trials[1].config.block_sizes == [16, 128]  # then the seed


def test_a_full_search_breeds_from_its_seeds():
    space = _space()
    result = search(space, _small_blocks_win, effort="full", seed=3,
                    seeds=[{"block_sizes": [16, 256]}, pallasite.Config(block_sizes=[32, 128])])
    assert [t.config.block_sizes for t in result.trials[1:3]] == [[16, 256], [32, 128]]
    assert result.best.block_sizes == [8, 128] and result.best_seconds == 1.0


def test_a_seed_that_does_not_plan_is_reported_and_the_search_goes_on():
    space = _space()
    bad = pallasite.Config(block_sizes=[8, 128, 128])  # the kernel has two block sizes
    result = search(space, _small_blocks_win, effort="quick", seeds=[bad, {"block_sizes": [16, 128]}])
    assert [(i, given) for i, given, _ in result.rejected_seeds] == [(0, bad)]
    assert "3 entries" in result.rejected_seeds[0][2]
    assert result.best.block_sizes == [8, 128]


def test_no_seeds_with_effort_none_or_an_exact_configs_list():
    space = _space()
    seeds = [pallasite.Config(block_sizes=[8, 128])]
    assert len(search(space, _small_blocks_win, effort="none", seeds=seeds).trials) == 1
    exact = [pallasite.Config(block_sizes=[64, 256])]
    result = search(space, _small_blocks_win, effort="quick", configs=exact, seeds=seeds)
    assert [t.config.block_sizes for t in result.trials] == [[64, 256]]


def test_the_kernel_setting_reaches_the_search_as_helion_writes_it():
    kernel = add_kernel(autotune_effort="quick", autotune_seed_configs=pallasite.Config(block_sizes=[16, 128]))
    result = kernel.bind((WIDE, WIDE)).autotune((WIDE, WIDE), objective=_small_blocks_win)
    assert result.best.block_sizes == [8, 128]
    listed = add_kernel(autotune_seed_configs=[{"block_sizes": [16, 128]}, {"block_sizes": [32, 128]}])
    assert [dict(c) for c in listed.tune.seed_configs] == [{"block_sizes": [16, 128]}, {"block_sizes": [32, 128]}]


def test_a_tuned_call_warns_about_a_bad_seed_and_runs():
    x, y = torch.randn(16, 256), torch.randn(16, 256)
    kernel = add_kernel(autotune_effort="quick", autotune_seed_configs={"block_sizes": [8, 128, 128]})
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = kernel(x, y)
    torch.testing.assert_close(out, x + y)
    assert any("autotune_seed_configs[0]" in str(w.message) and "[8, 128, 128]" in str(w.message) for w in record)


def test_seeds_are_part_of_the_cache_key_and_checked_at_decoration():
    plain = add_kernel(autotune_effort="quick").tune.describe()
    seeded = add_kernel(autotune_effort="quick", autotune_seed_configs={"block_sizes": [8, 128]}).tune.describe()
    assert plain != seeded
    with pytest.raises(exc.InvalidConfig, match="autotune_seed_configs=.*Unknown config key 'colour'"):
        add_kernel(autotune_seed_configs={"block_sizes": [8, 128], "colour": 1})
    with pytest.raises(exc.InvalidConfig, match="autotune_seed_configs=.*Config or a dict"):
        add_kernel(autotune_seed_configs=[8, 128])
    with pytest.warns(exc.IgnoredConfigKeys, match="num_warps"):  # a GPU-only key in a seed
        add_kernel(autotune_seed_configs={"block_sizes": [8, 128], "num_warps": 4})
