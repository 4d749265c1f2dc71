"""torch.var / std / var_mean / std_mean and torch.logsumexp on tiles.

var and std are recorded as the two-pass program (mean, then the mean of squared
deviations) over the valid lanes only: the divisor N - correction counts the valid
elements of a partial tile, never its padding. logsumexp subtracts the max before
exponentiating, so large inputs do not overflow. 16-bit inputs compute in float32 and
round once, as torch does. Results match torch and reference mode.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref

DTYPES = [torch.float32, torch.bfloat16]


def _tolerance(dtype):
    return {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 3e-2, "rtol": 2e-2}


def _input(shape, dtype, seed=0, scale=1.0, shift=0.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale + shift).to(dtype)


def row_statistic_kernel(statistic):
    """`out[tile_m, :] = statistic(x[tile_m, :])` as an (m, 1) column, 12 rows in tiles of 8."""

    @pallasite.kernel
    def row_statistic(x: torch.Tensor) -> torch.Tensor:
        m, n = x.size()
        out = torch.empty([m, 1], dtype=x.dtype)
        for tile_m in hl.tile(m, block_size=8):
            value = statistic(x[tile_m, :])
            out[tile_m, :] = value if value.ndim == 2 else value[:, None]
        return out

    return row_statistic


ROW_STATISTICS = {
    "var": lambda v: v.var(1),
    "var_correction_0": lambda v: torch.var(v, dim=1, correction=0),
    "var_correction_2": lambda v: v.var(dim=-1, correction=2),
    "var_unbiased_false": lambda v: torch.var(v, 1, unbiased=False),
    "var_unbiased_positional": lambda v: v.var(1, True, True),
    "var_keepdim": lambda v: torch.var(v, dim=1, keepdim=True),
    "std": lambda v: torch.std(v, dim=1),
    "std_correction_0_keepdim": lambda v: v.std(dim=1, correction=0, keepdim=True),
    "var_mean_var": lambda v: torch.var_mean(v, dim=1)[0],
    "var_mean_mean": lambda v: torch.var_mean(v, 1, correction=0, keepdim=True)[1],
    "var_mean_sum": lambda v: sum(torch.var_mean(v, dim=1, unbiased=False)),
    "std_mean_std": lambda v: torch.std_mean(v, dim=1)[0],
    "logsumexp": lambda v: torch.logsumexp(v, dim=1),
    "logsumexp_keepdim": lambda v: v.logsumexp(-1, keepdim=True),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(ROW_STATISTICS))
def test_row_statistic_matches_torch(name, dtype):
    statistic = ROW_STATISTICS[name]
    x = _input((12, 200), dtype, seed=3, scale=2.0, shift=1.0)
    kernel = row_statistic_kernel(statistic)
    expected = statistic(x.float()).to(dtype).reshape(12, 1)
    out = kernel(x)
    torch.testing.assert_close(out, expected, **_tolerance(dtype))
    torch.testing.assert_close(out, run_ref(kernel, (x,)), **_tolerance(dtype))


TILE_STATISTICS = {
    "var_lanes": lambda v: v.var(1).sum(),
    "var_rows_correction_0": lambda v: v.var(0, correction=0).sum(),
    "var_both_dims": lambda v: torch.var(v, dim=(0, 1)),
    "var_of_all": lambda v: v.var(),
    "std_of_all_unbiased_false": lambda v: torch.std(v, unbiased=False),
    "var_mean_both_dims": lambda v: torch.var_mean(v, [0, 1])[0] + torch.var_mean(v, [0, 1])[1],
    "logsumexp_both_dims": lambda v: torch.logsumexp(v, dim=(0, 1)),
    "logsumexp_lanes": lambda v: torch.logsumexp(v, 1).sum(),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(TILE_STATISTICS))
def test_statistic_of_a_partial_tile_counts_valid_elements(name, dtype):
    """20 x 300 in tiles of 8 x 128: the last tiles hold 4 rows and 44 columns, and N
    counts those only (a padded lane counted would change every variance)."""
    statistic = TILE_STATISTICS[name]
    x = _input((20, 300), dtype, seed=4, scale=3.0, shift=-1.0)

    @pallasite.kernel
    def tile_statistic(x: torch.Tensor) -> torch.Tensor:
        m, n = x.size()
        out = torch.zeros([(m + 7) // 8, (n + 127) // 128], dtype=torch.float32)
        for tile_m, tile_n in hl.tile([m, n], block_size=[8, 128]):
            out[tile_m.id, tile_n.id] = statistic(x[tile_m, tile_n]).float()
        return out

    expected = torch.stack([
        torch.stack([statistic(x[i:i + 8, j:j + 128].float()) for j in range(0, 300, 128)])
        for i in range(0, 20, 8)])
    out = tile_statistic(x)
    torch.testing.assert_close(out, expected, **_tolerance(dtype))
    torch.testing.assert_close(out, run_ref(tile_statistic, (x,)), **_tolerance(dtype))


@pallasite.kernel
def chunk_variances(x: torch.Tensor) -> torch.Tensor:
    """The sum over column chunks of each chunk's row variance (an inner loop)."""
    m, n = x.size()
    out = torch.empty([m], dtype=torch.float32)
    for tile_m in hl.tile(m, block_size=8):
        acc = hl.zeros([tile_m], dtype=torch.float32)
        for tile_n in hl.tile(n, block_size=128):
            var, mean = torch.var_mean(x[tile_m, tile_n].float(), dim=-1, correction=1)
            acc = acc + var + torch.std(x[tile_m, tile_n], dim=1, correction=0).float() + mean
        out[tile_m] = acc
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_statistics_in_an_inner_loop(loop_type, dtype):
    x = _input((12, 300), dtype, seed=5)
    expected = torch.zeros(12)
    for j in range(0, 300, 128):
        chunk = x[:, j:j + 128].float()
        var, mean = torch.var_mean(chunk, dim=-1)
        expected += var + torch.std(x[:, j:j + 128], dim=1, correction=0).float() + mean
    _, out = code_and_output(chunk_variances, (x,), pallas_loop_type=loop_type)
    torch.testing.assert_close(out, expected, **_tolerance(dtype))
    torch.testing.assert_close(out, run_ref(chunk_variances, (x,)), **_tolerance(dtype))


def test_logsumexp_of_large_values_subtracts_the_max():
    """exp(1000) overflows float32: only the shifted form gives a finite answer."""
    x = _input((12, 200), torch.float32, seed=6, scale=50.0, shift=1000.0)
    kernel = row_statistic_kernel(lambda v: torch.logsumexp(v, dim=1))
    expected = torch.logsumexp(x, dim=1, keepdim=True)
    assert expected.isfinite().all()
    torch.testing.assert_close(kernel(x), expected)


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch warns computing the expected N - correction <= 0
def test_a_single_element_variance_is_nan_and_correction_past_n_is_inf():
    """torch's divisor is max(N - correction, 0): 0/0 is NaN, a positive sum over 0 is inf."""
    x = _input((12, 3), torch.float32, seed=7)
    for statistic in (lambda v: v[:, :1].var(1), lambda v: torch.var(v, dim=1, correction=5)):
        kernel = row_statistic_kernel(statistic)
        torch.testing.assert_close(kernel(x), statistic(x).reshape(12, 1), equal_nan=True)


def test_variance_of_an_integer_tile_is_an_error_naming_the_line():
    x = torch.arange(12 * 16, dtype=torch.int32).reshape(12, 16)
    kernel = row_statistic_kernel(lambda v: v.var(1))
    with pytest.raises(exc.UnsupportedDtype, match="var.*float") as info:
        kernel(x)
    assert "test_statistics.py" in str(info.value)
