"""The host half of a flattened worklist (plan/worklists.py): the item tables, in JAX.

Called by generated host functions inside their jit, so the tables are built
from the runtime offsets with static shapes: `max_items` entries, items past
the real count keep the last item's owner and start with extent 0 (no q tile
runs, no block index changes). `plan.worklists.build_items` is the same
computation in Python, for the schedule report.
"""
from __future__ import annotations

import jax.numpy as jnp


def build_worklist(begin, end, segments: int, rows_per_item: int, max_items: int):
    """(owner, start, extent) int32 tables of the segments `[begin[s], end[s])` cut into
    items of at most `rows_per_item` rows, and the real item count (items past
    `max_items` are dropped: interpret mode checks the count)."""
    begin = jnp.broadcast_to(jnp.asarray(begin, jnp.int32), (segments,))  # a bound may be a constant
    end = jnp.broadcast_to(jnp.asarray(end, jnp.int32), (segments,))
    per_segment = (jnp.maximum(end - begin, 0) + rows_per_item - 1) // rows_per_item
    last = jnp.cumsum(per_segment)  # items of segments 0..s
    count = last[-1]
    slots = jnp.arange(max_items, dtype=jnp.int32)
    item = jnp.minimum(slots, jnp.maximum(count - 1, 0))  # padding items repeat the last one
    owner = jnp.minimum(jnp.searchsorted(last, item, side="right"), segments - 1).astype(jnp.int32)
    first = (last - per_segment)[owner]
    start = begin[owner] + (item - first) * rows_per_item
    extent = jnp.clip(end[owner] - start, 0, rows_per_item)
    extent = jnp.where(slots < count, extent, 0).astype(jnp.int32)
    return owner, start.astype(jnp.int32), extent, count
