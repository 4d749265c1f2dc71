"""The text of a planned scatter (`plan.Scatter`): a window's rows rewritten from lanes.

The plan chose the method; this only writes it. For the window's rows r and
the index's lanes i, `hit[r, i]` says lane i names row r (lanes of a partial
tile's padding name none); the last lane naming each row is found by a max
over the lanes, and `pick` is the one-hot of (row, that lane): at most one 1
per row. The picked values are `pick` contracted with the value along the
scattered axis — on the MXU for floats (with the gather's code product, so
inf, NaN and -0.0 arrive bit for bit), by select-and-sum for int32 — and the
window keeps its old rows where no lane writes. An index outside the window
matches no row; interpret mode reports it before (runtime/checks.py).
"""
from __future__ import annotations

from typing import Callable

import torch

from ..plan.plans import GatherMethod, Scatter
from .gathers import contract_axis
from .lowering import jnp_dtype


def scatter_text(scatter: Scatter, index: str, valid: str | None, values: str, lane_shape: tuple[int, ...],
                 window: str, dtype: torch.dtype, bind: Callable[[str, str], str]) -> str:
    """The new window: `window` (the ref's rows) with the rows `index` names replaced by
    the lanes of `values` (shape `lane_shape`: the window's with the scattered axis
    replaced by the index's lanes). `valid`: a bool (lanes,) array, or None when every
    lane holds an index. `bind(hint, text)` emits a statement and returns its name."""
    lanes, rows, axis, rank = lane_shape[scatter.axis], scatter.rows, scatter.axis, len(lane_shape)
    shape = f"({rows}, {lanes})"
    hit = f"{index}[None, :] == lax.broadcasted_iota(jnp.int32, {shape}, 0)"
    if valid is not None:
        hit = f"({hit}) & {valid}[None, :]"
    hit = bind("hit", hit)
    lane = bind("lane", f"lax.broadcasted_iota(jnp.int32, {shape}, 1)")
    last = bind("last_lane", f"jnp.max(jnp.where({hit}, {lane}, -1), axis=1, keepdims=True)")
    pick = bind("pick", f"{hit} & ({lane} == {last})")
    written_shape = "(" + ", ".join(str(rows) if a == axis else "1" for a in range(rank)) + ",)"
    written = bind("written", f"({last} >= 0).reshape({written_shape})")
    if scatter.method is GatherMethod.SELECT_SUM:
        pick_shape = "(" + ", ".join(["1"] * axis + [str(rows), str(lanes)] + ["1"] * (rank - axis - 1)) + ",)"
        picked = (f"jnp.sum(jnp.where({pick}.reshape{pick_shape}, jnp.expand_dims({values}, {axis}), 0), "
                  f"axis={axis + 1})")
    else:
        picked = _float_picked(scatter, values, lane_shape, pick, dtype, bind)
    return f"jnp.where({written}, {picked}, {window})"


def _float_picked(scatter: Scatter, values: str, lane_shape, pick: str, dtype, bind) -> str:
    """The picked rows of a float value by one-hot matmuls: finite values in one product,
    codes of the others (1, -1, 2, 3 for inf, -inf, NaN, -0.0) in a second, since
    0 * inf is NaN and a sum of zeros loses the sign of -0.0."""
    table = values if dtype == torch.float32 else bind("scattered_f32", f"({values}).astype(jnp.float32)")
    pick = bind(f"{pick}_f32", f"{pick}.astype(jnp.float32)")
    finite = bind("scattered_finite", f"jnp.abs({table}) < jnp.inf")
    negative_zero = f"({table} == 0) & (lax.bitcast_convert_type({table}, jnp.int32) < 0)"
    picked = bind("picked", contract_axis(f"jnp.where({finite}, {table}, 0.0)", scatter.axis, lane_shape, pick))
    codes = bind("codes", f"jnp.where({finite}, jnp.where({negative_zero}, 3.0, 0.0), "
                          f"jnp.where({table} != {table}, 2.0, jnp.sign({table})))")
    codes = bind("picked_codes", contract_axis(codes, scatter.axis, lane_shape, pick))
    text = (f"jnp.where({codes} == 0, {picked}, jnp.where({codes} == 2, jnp.nan, "
            f"jnp.where({codes} == 3, -0.0, {codes} * jnp.inf)))")
    return text if dtype == torch.float32 else f"({text}).astype({jnp_dtype(dtype)})"


__all__ = ["scatter_text"]
