"""The text of a planned gather (`plan.Gather`): rows picked from a table's window.

The plan chose the method; this only writes it. The one-hot operand compares
each index with an iota over the window's gathered axis; an index outside it
matches nothing (a zero row), and interpret mode reports it before (runtime/checks.py).
"""
from __future__ import annotations

import torch

from ..plan.plans import Gather, GatherMethod
from .lowering import jnp_dtype


def one_hot_text(index: str, length: int, rows: int) -> str:
    """A bool (length, rows) array: lane i is True at column index[i]."""
    return f"{index}[:, None] == lax.broadcasted_iota(jnp.int32, ({length}, {rows}), 1)"


def gather_text(gather: Gather, window: str, window_shape: tuple[int, ...], hot: str,
                dtype: torch.dtype) -> str:
    """The gathered value: `window` with axis `gather.axis` replaced by the index's axis.

    `hot` names the one-hot array of `one_hot_text`."""
    axis, rank = gather.axis, len(window_shape)
    if gather.method is GatherMethod.SELECT_SUM:
        hot_shape = "(" + ", ".join(["1"] * axis + ["-1", str(gather.rows)] + ["1"] * (rank - axis - 1)) + ",)"
        return (f"jnp.sum(jnp.where({hot}.reshape{hot_shape}, jnp.expand_dims({window}, {axis}), 0), "
                f"axis={axis + 1})")
    f32 = "jnp.float32"
    table = window if dtype == torch.float32 else f"{window}.astype({f32})"
    exact = f"precision=lax.Precision.HIGHEST, preferred_element_type={f32}"
    if rank == 1:  # a matrix product: the table as one row
        text = (f"lax.dot_general({table}.reshape(1, {window_shape[0]}), {hot}.astype({f32}), "
                f"(((1,), (1,)), ((), ())), {exact}).reshape(-1)")
    elif axis == rank - 1:  # columns: window @ one_hot.T keeps the axes in order
        text = f"lax.dot_general({table}, {hot}.astype({f32}), ((({axis},), (1,)), ((), ())), {exact})"
    else:
        text = f"lax.dot_general({hot}.astype({f32}), {table}, (((1,), ({axis},)), ((), ())), {exact})"
        if axis != 0:
            text = f"jnp.moveaxis({text}, 0, {axis})"
    return text if dtype == torch.float32 else f"{text}.astype({jnp_dtype(dtype)})"


__all__ = ["gather_text", "one_hot_text"]
