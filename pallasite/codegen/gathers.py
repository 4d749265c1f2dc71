"""The text of a planned gather (`plan.Gather`): rows picked from a table's window.

The plan chose the method; this only writes it. The one-hot operand compares
each index with an iota over the window's gathered axis; an index outside it
matches nothing (a zero row), and interpret mode reports it before (runtime/checks.py).
A one-hot product alone would turn one non-finite entry into NaN for every
index (0 * inf); a second product gathers codes for those entries and puts
them back, so the result equals torch's gather bit for bit (but the sign of 0).
"""
from __future__ import annotations

from typing import Callable

import torch

from ..plan.plans import Gather, GatherMethod
from .lowering import jnp_dtype


def one_hot_text(index: str, length: int, rows: int) -> str:
    """A bool (length, rows) array: lane i is True at column index[i]."""
    return f"{index}[:, None] == lax.broadcasted_iota(jnp.int32, ({length}, {rows}), 1)"


def gather_text(gather: Gather, window: str, window_shape: tuple[int, ...], hot: str,
                dtype: torch.dtype, bind: Callable[[str, str], str]) -> str:
    """The gathered value: `window` with axis `gather.axis` replaced by the index's axis.

    `hot` names the one-hot array of `one_hot_text`; `bind(hint, text)` emits a
    statement binding `text` to a fresh name and returns the name."""
    axis, rank = gather.axis, len(window_shape)
    if gather.method is GatherMethod.SELECT_SUM:  # in int32: Mosaic reduces 32-bit integers only
        hot_shape = "(" + ", ".join(["1"] * axis + ["-1", str(gather.rows)] + ["1"] * (rank - axis - 1)) + ",)"
        table = window if dtype == torch.int32 else bind(f"{window}_i32", f"{window}.astype(jnp.int32)")
        text = (f"jnp.sum(jnp.where({hot}.reshape{hot_shape}, jnp.expand_dims({table}, {axis}), 0), "
                f"axis={axis + 1})")
        return text if dtype == torch.int32 else f"{text}.astype({jnp_dtype(dtype)})"
    table = window if dtype == torch.float32 else bind(f"{window}_f32", f"{window}.astype(jnp.float32)")
    hot = bind(f"{hot}_f32", f"{hot}.astype(jnp.float32)")
    # 0 * inf is NaN: non-finite entries are zeroed for the product of values and
    # gathered as codes (1, -1, 2 for inf, -inf, NaN) by a second exact product.
    finite = bind(f"{window}_finite", f"jnp.abs({table}) < jnp.inf")
    values = contract_axis(f"jnp.where({finite}, {table}, 0.0)", gather.axis, window_shape, hot)
    codes = contract_axis(f"jnp.where({finite}, 0.0, jnp.where({table} != {table}, 2.0, jnp.sign({table})))",
                          gather.axis, window_shape, hot)
    codes = bind("nonfinite", codes)
    text = f"jnp.where({codes} == 0, {values}, jnp.where({codes} == 2, jnp.nan, {codes} * jnp.inf))"
    return text if dtype == torch.float32 else f"{text}.astype({jnp_dtype(dtype)})"


def contract_axis(values: str, axis: int, shape: tuple[int, ...], matrix: str) -> str:
    """`values` (f32, `shape`) with its axis `axis` contracted exactly against the f32
    (rows, axis) `matrix` (a one-hot): that axis becomes the rows axis, in place.
    Gathers pick table rows with it, scatters the lanes each row takes."""
    rank = len(shape)
    exact = "precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32"
    if rank == 1:  # a matrix product: the values as one row
        return (f"lax.dot_general(({values}).reshape(1, {shape[0]}), {matrix}, "
                f"(((1,), (1,)), ((), ())), {exact}).reshape(-1)")
    if axis == rank - 1:  # columns: values @ matrix.T keeps the axes in order
        return f"lax.dot_general({values}, {matrix}, ((({axis},), (1,)), ((), ())), {exact})"
    text = f"lax.dot_general({matrix}, {values}, (((1,), ({axis},)), ((), ())), {exact})"
    return text if axis == 0 else f"jnp.moveaxis({text}, 0, {axis})"


__all__ = ["contract_axis", "gather_text", "one_hot_text"]
