"""One buffer, one operand per device loop: a loop that writes a tensor must not write or
re-read the buffer through another view (`x` and `x_flat = x.view(-1)`).

The host program passes each tensor a loop names as its own operand of the pallas_call.
A read through one view therefore sees the buffer as it was before the loop, never the
loop's writes through another view, and writes through two views are two outputs, one
overwriting the other. So a loop may write a buffer through one view only, and may read it
through another view only before (in program order) that write: not after it, and not in
an inner loop (or a device `if`) that also writes it, whose next step would read what the
step before wrote. Reads alone may mix views freely.
"""
from __future__ import annotations

from typing import Any

from .. import exc
from ..ir import DeviceLoopCall, IfBlock, Load, RemoteCopy, Store, TileLoop, walk_nodes


def check_loop_views(host: Any, call: DeviceLoopCall) -> None:
    """Refuse a loop that writes a buffer through two views, or reads it through another
    view after (or in a loop around) the write (`host`: the `HostProgram`, which knows each
    view's base)."""
    writers: dict[int, Any] = {}  # root id -> (written symbol, where)
    for node in walk_nodes(call.loop.body):
        for symbol, written in _accesses(node):
            if not written:
                continue
            root = host.root_of(symbol)
            first = writers.setdefault(root.id, (symbol, node.location))
            if first[0] is not symbol:
                raise _refusal(first[0], symbol, node.location, "writes")
    _visit(host, call.loop.body, {})


def _visit(host: Any, body: list, written: dict) -> None:
    """Program order: a read of a buffer another view has written earlier is refused."""
    for item in body:
        if isinstance(item, (TileLoop, IfBlock)):  # its steps repeat or its branches mix: one block
            nodes = list(walk_nodes([item]))
            inner = dict(written)
            for node in nodes:
                for symbol, is_write in _accesses(node):
                    if is_write:
                        inner[host.root_of(symbol).id] = symbol
            for node in nodes:
                _check_read(host, node, inner)
            written.update(inner)
            continue
        _check_read(host, item, written)
        for symbol, is_write in _accesses(item):
            if is_write:
                written[host.root_of(symbol).id] = symbol


def _check_read(host: Any, node: Any, written: dict) -> None:
    for symbol, is_write in _accesses(node):
        writer = written.get(host.root_of(symbol).id)
        if not is_write and writer is not None and writer is not symbol:
            raise _refusal(writer, symbol, node.location, "reads")


def _accesses(node: Any) -> list[tuple[Any, bool]]:
    if isinstance(node, (Load, Store)):
        return [(node.tensor, isinstance(node, Store))]
    if isinstance(node, RemoteCopy):
        return [(node.src, False), (node.dst, True)]
    return []


def _refusal(writer: Any, other: Any, location: Any, verb: str) -> exc.UnsupportedOperation:
    what = ("reads it back through" if verb == "reads" else "also writes it through")
    return exc.UnsupportedOperation(
        f"This device loop writes '{writer.name}' and {what} '{other.name}', another view of the same "
        "buffer. Each tensor a loop names is its own operand of the TPU kernel, so a read through one "
        "view does not see the loop's writes through the other, and writes through two views overwrite "
        "each other. Read and write the buffer through one tensor in this loop (index the same view "
        "everywhere), or read through the other view before the write.", location)
