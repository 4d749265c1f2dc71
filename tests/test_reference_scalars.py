"""A grid index in reference mode is an int the compiled kernel knows only at run time
(`reference/tiles.py:RuntimeInt`). Torch functions take it as the compiled kernel takes its
device scalar: `torch.where(g > 5, g - 6, g)` and `torch.clamp(g - 2, min=0)` raised torch's
own TypeError in reference mode (a Python bool or int is no tensor) while the compiled
kernel ran them."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def row_by_where(x):
    out = torch.zeros_like(x)
    for g in hl.grid(x.size(0)):
        out[g, :] = x[torch.where(g > 5, g - 6, g), :]
    return out


@pallasite.kernel
def row_by_clamp(x):
    out = torch.zeros_like(x)
    for g in hl.grid(x.size(0)):
        out[g, :] = x[torch.clamp(g - 2, min=0), :]
    return out


@pallasite.kernel
def row_by_combined_conditions(x):
    out = torch.zeros_like(x)
    for g in hl.grid(x.size(0)):
        inside = (g > 1) & (g < 7)
        out[g, :] = x[torch.where(~inside, 0, g), :] * torch.where(g == 3, 2.0, 1.0)
    return out


@pallasite.kernel
def scaled_by_comparison(x):
    out = torch.zeros_like(x)
    for g in hl.grid(x.size(0)):
        out[g, :] = x[g, :] * (g >= 4) + torch.clamp(g, max=5)
    return out


def _rows(x, rows):
    return x[torch.tensor(rows)]


X = torch.arange(10.0)[:, None] * 3 + torch.arange(128.0)[None, :] / 128
CASES = [
    (row_by_where, _rows(X, [g - 6 if g > 5 else g for g in range(10)])),
    (row_by_clamp, _rows(X, [max(g - 2, 0) for g in range(10)])),
    (row_by_combined_conditions,
     _rows(X, [g if 1 < g < 7 else 0 for g in range(10)]) * torch.tensor([2.0 if g == 3 else 1.0 for g in range(10)])[:, None]),
    (scaled_by_comparison, X * (torch.arange(10) >= 4)[:, None] + torch.arange(10).clamp(max=5)[:, None]),
]


@pytest.mark.parametrize("kernel,expected", CASES, ids=[c[0].__name__ for c in CASES])
def test_torch_functions_of_a_grid_index_run_in_both_modes(kernel, expected):
    _, result = code_and_output(kernel, (X,))
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(run_ref(kernel, (X,)), expected)


@pallasite.kernel
def row_by_converted_comparison(x):
    out = torch.empty_like(x)
    for g in hl.grid(x.size(0)):
        out[g, :] = x[g - (g > 0).to(torch.int32), :]
    return out


@pallasite.kernel
def store_masked_by_comparison(x, out):
    for g in hl.grid(x.size(0)):
        hl.store(out, [g // 2, slice(None)], x[g, :], extra_mask=g % 2 == 0)
    return out


def test_a_comparison_of_a_grid_index_works_as_a_device_bool():
    """(trial D) `(g > 0).to(torch.int32)` raised AttributeError and `extra_mask=g % 2 == 0`
    torch's TypeError in reference mode."""
    expected = X[[max(g - 1, 0) for g in range(10)]]
    torch.testing.assert_close(code_and_output(row_by_converted_comparison, (X,))[1], expected)
    torch.testing.assert_close(run_ref(row_by_converted_comparison, (X,)), expected)
    for run in (lambda args: code_and_output(store_masked_by_comparison, args)[1],
                lambda args: run_ref(store_masked_by_comparison, args)):
        torch.testing.assert_close(run((X, torch.zeros(5, 128))), X[0::2])


@pallasite.kernel
def rows_at_grid_offset(x):
    T, D = x.shape
    out = torch.zeros([T + 8, D], dtype=x.dtype)
    for g in hl.grid(2):
        for tile_m in hl.tile(T // 2 + 8):
            out[g * (T // 2) + tile_m.index, :] = x[g * (T // 2) + tile_m.index, :] + 1.0
    return out


@pallasite.kernel
def rows_at_begin_offset(x, chunk: hl.constexpr):
    out = torch.zeros_like(x)
    for tile_c in hl.tile(x.size(0) // chunk + 1, block_size=1):
        for tile_m in hl.tile(chunk):
            out[tile_c.begin * chunk + tile_m.index, :] = x[tile_c.begin * chunk + tile_m.index, :] * 2
    return out


@pytest.mark.parametrize("case", ["grid", "begin"])
def test_a_runtime_offset_of_a_tile_is_an_index_checked_in_both_modes(case):
    """(trial MM D5) `g * K + tile.index` past the tensor's end: the compiled kernel gathers
    (a grid index is a device scalar) and raises; reference mode took `g * K` for a
    compile-time int, kept the tile's shifted-positions mark and read 0 there."""
    x = torch.arange(32, dtype=torch.float32).reshape(16, 2)
    kernel, args, config = ((rows_at_grid_offset, (x,), {"block_sizes": [8]}) if case == "grid" else
                            (rows_at_begin_offset, (x[:12], 5), {"block_sizes": [8]}))
    for run in (lambda: code_and_output(kernel, args, **config), lambda: run_ref(kernel, args, **config)):
        with pytest.raises(pallasite.exc.ShapeMismatch, match=r"indices must lie in \[0, 1[26]\)"):
            run()
