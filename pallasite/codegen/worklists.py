"""Device code of a flattened worklist whose items write their own rows (plan/worklist_isolation.py)."""
from __future__ import annotations

from .row_pieces import emit_row_pieces


def emit_item_write_back(k, write_back) -> None:
    """After the item's body: copy its rows [start, start + extent) of the scratch to the
    output in HBM (at the program's heads: the window `out.at[rows, h, :]`). A copy's length
    is static: pieces of 2^b rows (`row_pieces.py`), each waited before the item ends."""
    worklist = k.plan.worklist
    start, extent = k.render(worklist.item_start), k.render(worklist.item_extent)
    name = write_back.symbol.name
    axes = list(write_back.head_axes)
    while axes and axes[-1] is None:  # whole trailing axes need no subscript
        axes.pop()
    heads = "".join(f", {k.render(dim.begin_value)}" if dim is not None else ", :" for dim in axes)
    head_names = [k.describe(dim.begin_value) for dim in axes if dim is not None]
    of_heads = f" of head {', '.join(head_names)}" if head_names else ""
    k.comment(f"the item's rows of '{name}' go to HBM: only [{k.describe(worklist.item_start)}, "
              f"{k.describe(worklist.item_start)} + {k.describe(worklist.item_extent)}){of_heads}, so no "
              "other program's rows are touched")
    copy_of = (lambda row, size: f"pltpu.make_async_copy({write_back.scratch}.at[pl.ds({row}, {size})], "
               f"{write_back.hbm_ref}.at[pl.ds({start} + {row}, {size}){heads}], {write_back.semaphore}.at[0])")
    emit_row_pieces(k, extent, write_back.bits, copy_of, name)
