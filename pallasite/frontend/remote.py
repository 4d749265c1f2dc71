"""`hl.make_async_remote_copy` and `hl.remote_barrier` while tracing (ir/remote.py).

A copy site records one `RemoteCopy` node where the descriptor is built; the
descriptor the user holds (`RemoteCopyDescriptor`) records a `RemoteCopyStep`
naming that node for each `.start()` and wait, so every start and wait of a
site refers to the same descriptor. A step must be in the body that built the
descriptor or one nested in it (where the generated descriptor is in scope).
"""
from __future__ import annotations

import math
from typing import Any

import torch

from .. import exc
from ..ir import Load, Node, RemoteBarrier, RemoteCopy, RemoteCopyStep, ScalarIndex, FullSlice, Value
from .proxies import DeviceTensor, HostScalar, HostTensor
from . import flat_rows

_INT_DTYPES = (torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8)


def _scalar(recorder: Any, item: Any, what: str) -> Any:
    """An int or an int32 device scalar Value."""
    if isinstance(item, bool):
        raise exc.UnsupportedOperation(f"{what} must be an integer, not a bool.", recorder.location)
    if isinstance(item, int):
        return item
    if isinstance(item, (DeviceTensor, HostScalar)):
        operand = recorder.device_operand(item)
        if isinstance(operand, Value) and operand.shape == () and operand.dtype in _INT_DTYPES:
            return operand
        shape = list(operand.shape) if isinstance(operand, Value) else []
        raise exc.UnsupportedOperation(
            f"{what} must be an integer scalar; got a {operand.dtype if isinstance(operand, Value) else type(item).__name__} "
            f"value of shape {shape}.", recorder.location)
    raise exc.UnsupportedOperation(f"{what} must be an int or an integer device scalar, not {item!r}.",
                                   recorder.location)


def _device(recorder: Any, item: Any, what: str) -> Any:
    """A device id: an int in [0, devices) (the mesh's size is checked when traced under
    `jax.shard_map`, plan/remote_copies.py) or an integer device scalar."""
    peer = _scalar(recorder, item, what)
    if isinstance(peer, int) and peer < 0:
        raise exc.IndexingError(f"{what} is {peer}; device ids are flat ranks in [0, devices) (they do not wrap).",
                                recorder.location)
    return peer


def _index(recorder: Any, index: Any, symbol, what: str) -> tuple:
    items = () if index is None else tuple(index) if isinstance(index, (tuple, list)) else (index,)
    if len(items) > len(symbol.shape):
        raise exc.IndexingError(
            f"{what} has {len(items)} indices but '{symbol.name}' has {len(symbol.shape)} dims.", recorder.location)
    operands = tuple(_scalar(recorder, item, f"{what} [{position}]") for position, item in enumerate(items))
    for axis, operand in enumerate(operands):
        if isinstance(operand, int) and not 0 <= operand < symbol.shape[axis]:
            raise exc.IndexingError(
                f"{what} [{axis}] is {operand} but '{symbol.name}'.size({axis}) is {symbol.shape[axis]}.",
                recorder.location)
    return operands


def remote_copy(recorder: Any, src: Any, src_index: Any, device_id: Any, dst: Any, dst_index: Any) -> Any:
    if recorder.device is None:
        raise exc.UnsupportedSyntax("hl.make_async_remote_copy copies between devices inside a device loop.",
                                    recorder.location)
    dst = src if dst is None else dst
    dst_index = src_index if dst_index is None else dst_index
    for name, tensor in (("src", src), ("dst", dst)):
        if not isinstance(tensor, HostTensor):
            raise exc.UnsupportedOperation(
                f"hl.make_async_remote_copy: {name} must be a kernel tensor (an argument or a host "
                f"allocation), not {type(tensor).__name__}.", recorder.location)
    src_symbol, dst_symbol = src.symbol, dst.symbol
    flat_rows.check_access(recorder, src_symbol, write=False)
    flat_rows.check_access(recorder, dst_symbol, write=True)
    src_items = _index(recorder, src_index, src_symbol, "src_index")
    dst_items = _index(recorder, dst_index, dst_symbol, "dst_index")
    src_count = math.prod(src_symbol.shape[len(src_items):])
    dst_count = math.prod(dst_symbol.shape[len(dst_items):])
    if src_symbol.dtype != dst_symbol.dtype or src_count != dst_count:
        raise exc.ShapeMismatch(
            f"hl.make_async_remote_copy: the source {src_symbol.name}[{len(src_items)} indices] holds {src_count} "
            f"{src_symbol.dtype} elements {list(src_symbol.shape[len(src_items):])} and the destination "
            f"{dst_symbol.name}[{len(dst_items)} indices] {dst_count} {dst_symbol.dtype} elements "
            f"{list(dst_symbol.shape[len(dst_items):])}; a remote copy moves one contiguous region, so they "
            "must agree in dtype and element count.", recorder.location)
    if src_symbol.dtype == torch.bool:
        raise exc.UnsupportedDtype(
            f"hl.make_async_remote_copy of the bool tensor {src_symbol.name}: Mosaic copies no bool ref by DMA. "
            "Copy an int8 (or int32) tensor and compare with 0 after the copy.", recorder.location)
    peer = _device(recorder, device_id, "device_id")
    sites = recorder.next_remote_site()
    node = RemoteCopy("remote_copy", (peer, *src_items, *dst_items), {}, [], recorder.location,
                      src=src_symbol, dst=dst_symbol, src_index=src_items, dst_index=dst_items,
                      device_id=peer, site=sites)
    body = recorder.current_body
    body.append(node)
    return RemoteCopyDescriptor(recorder, node, body)


class RemoteCopyDescriptor:
    """What `hl.make_async_remote_copy` returns while tracing: `.start()` and the waits
    record steps of its one copy site."""

    def __init__(self, recorder: Any, node: RemoteCopy, body: list):
        self._recorder = recorder
        self._node = node
        self._body = body

    def _step(self, op: str, kwargs: dict) -> None:
        recorder = self._recorder
        if not recorder.is_open(self._body):
            raise exc.UnsupportedSyntax(
                f"This remote copy (built at line {self._node.location.lineno if self._node.location else '?'}) "
                "is started or waited outside the loop or branch that built it; build it where it is used.",
                recorder.location)
        recorder.append_node(RemoteCopyStep(op, (), kwargs, [], recorder.location, copy=self._node))

    def start(self) -> None:
        self._step("remote_copy_start", {})

    def wait(self) -> None:
        self._step("remote_copy_wait", {"kind": "both"})

    def wait_send(self) -> None:
        self._step("remote_copy_wait", {"kind": "send"})

    def wait_recv(self) -> None:
        self._step("remote_copy_wait", {"kind": "recv"})


def remote_barrier(recorder: Any, device_ids: Any, rank: Any = None) -> None:
    if recorder.device is None:
        raise exc.UnsupportedSyntax("hl.remote_barrier synchronizes devices inside a device loop.",
                                    recorder.location)
    if isinstance(device_ids, DeviceTensor) and len(device_ids.value.shape) == 1:
        peers = _peers_of_slice(recorder, device_ids)
    elif isinstance(device_ids, (list, tuple)):
        peers = [_device(recorder, item, "hl.remote_barrier peer") for item in device_ids]
    else:
        peers = [_device(recorder, device_ids, "hl.remote_barrier peer")]
    if not peers:
        raise exc.UnsupportedOperation("hl.remote_barrier needs at least one peer.", recorder.location)
    mine = None if rank is None else _device(recorder, rank, "hl.remote_barrier rank")
    recorder.append_node(RemoteBarrier("remote_barrier", (*peers, *(() if mine is None else (mine,))), {}, [],
                                       recorder.location, peers=tuple(peers), rank=mine))


def _peers_of_slice(recorder: Any, device_ids: DeviceTensor) -> list:
    """`peers[0, :]`: one scalar read per element (a barrier signals peers one at a time)."""
    value = device_ids.value
    load = value.producer
    body = recorder.current_body
    free = [axis for axis, item in enumerate(load.index) if not isinstance(item, ScalarIndex)] \
        if isinstance(load, Load) else []
    if (not isinstance(load, Load) or len(free) != 1 or not isinstance(load.index[free[0]], FullSlice)
            or not body or body[-1] is not load or value.dtype not in _INT_DTYPES):
        raise exc.UnsupportedOperation(
            "hl.remote_barrier(device_ids): pass an int, a list of ranks, or a 1-D slice of an int "
            "tensor written in the call (`peers[0, :]`).", recorder.location)
    body.pop()  # the vector read is replaced by one scalar read per peer
    peers = []
    for i in range(value.shape[0]):
        index = tuple(ScalarIndex(i) if axis == free[0] else item for axis, item in enumerate(load.index))
        peers.append(recorder.record("load", (), {}, (), value.dtype, node_type=Load, tensor=load.tensor,
                                     index=index))
    return peers
