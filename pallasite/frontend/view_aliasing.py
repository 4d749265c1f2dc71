"""One buffer, one operand per device loop: a loop that writes a tensor must not read or
write the buffer through another view (`x` and `x_flat = x.view(-1)`).

The host program passes each tensor a loop names as its own operand of the pallas_call.
A read through one view therefore sees the buffer as it was before the loop, never the
loop's writes through another view, and writes through two views are two outputs, one
overwriting the other. Program order inside the body does not help: the body runs once per
program of the grid, so a read before the write still misses what earlier programs wrote
(a parallel grid even runs them in any order). Reads alone may mix views freely. Flat row
accesses resolve to the base itself where they can (frontend/flat_rows.py), so
`x_flat[rows * d + hl.arange(d)]` beside `x[t, :] = ...` is one operand, not two.
"""
from __future__ import annotations

from typing import Any

from .. import exc
from ..ir import DeviceLoopCall, Load, RemoteCopy, Store, walk_nodes


def check_loop_views(host: Any, call: DeviceLoopCall) -> None:
    """Refuse a loop that writes a buffer and also reads or writes it through another view
    (`host`: the `HostProgram`, which knows each view's base)."""
    accesses = [(node, symbol, written) for node in walk_nodes(call.loop.body)
                for symbol, written in _accesses(node)]
    writers: dict[int, Any] = {}  # root id -> the first symbol stored into
    for _, symbol, written in accesses:
        if written:
            writers.setdefault(host.root_of(symbol).id, symbol)
    for node, symbol, written in accesses:
        writer = writers.get(host.root_of(symbol).id)
        if writer is not None and writer is not symbol:
            raise _refusal(writer, symbol, node.location, "writes" if written else "reads")


def _accesses(node: Any) -> list[tuple[Any, bool]]:
    if isinstance(node, (Load, Store)):
        return [(node.tensor, isinstance(node, Store))]
    if isinstance(node, RemoteCopy):
        return [(node.src, False), (node.dst, True)]
    return []


def _refusal(writer: Any, other: Any, location: Any, verb: str) -> exc.UnsupportedOperation:
    what = ("also reads it through" if verb == "reads" else "also writes it through")
    return exc.UnsupportedOperation(
        f"This device loop writes '{writer.name}' and {what} '{other.name}', another view of the same "
        "buffer. Each tensor a loop names is its own operand of the TPU kernel, so a read through one "
        "view does not see the loop's writes through the other (not even an earlier program's, whose "
        "writes come before this program's read), and writes through two views overwrite each other. "
        "Read and write the buffer through one tensor in this loop (index the same view everywhere).",
        location)
