"""Remote DMA between the devices of a mesh: the IR of `hl.make_async_remote_copy`
and `hl.remote_barrier`.

A copy site is one `RemoteCopy` node (where the user built the descriptor);
its `.start()` and waits are `RemoteCopyStep` nodes pointing at it, so the
generated code builds one descriptor object per site and every start and wait
uses that object (a descriptor built twice — one started, another waited — is
impossible by construction).
"""
from __future__ import annotations

from dataclasses import dataclass

from .nodes import Node, Operand, TensorSymbol

# What `.wait()`, `.wait_send()` and `.wait_recv()` wait for.
WAIT_KINDS = ("both", "send", "recv")


@dataclass(eq=False)
class RemoteCopy(Node):
    """`hl.make_async_remote_copy(src, src_index, device_id, dst, dst_index)`.

    `src_index`/`dst_index` select leading dims (ints or int32 scalar Values);
    the rest of each tensor is copied as one contiguous region. `args` hold the
    device id and the indices so every pass sees the values the copy reads.
    """

    src: TensorSymbol | None = None
    dst: TensorSymbol | None = None
    src_index: tuple[Operand, ...] = ()
    dst_index: tuple[Operand, ...] = ()
    device_id: Operand = 0
    site: int = 0  # position among the kernel's copy sites (names its semaphores)


@dataclass(eq=False)
class RemoteCopyStep(Node):
    """`.start()` (op 'remote_copy_start') or a wait (op 'remote_copy_wait',
    `kwargs['kind']` in WAIT_KINDS) of one copy site."""

    copy: RemoteCopy | None = None


@dataclass(eq=False)
class RemoteBarrier(Node):
    """`hl.remote_barrier(device_ids, rank=None)`: `peers` are the peers' flat ranks; with
    `rank` (this device's), they name every other device of the mesh once (a checked
    claim). `args` hold the peers, then the rank, so every pass sees the values it reads."""

    peers: tuple[Operand, ...] = ()
    rank: Operand | None = None


def remote_nodes(nodes) -> list[Node]:
    return [node for node in nodes if isinstance(node, (RemoteCopy, RemoteCopyStep, RemoteBarrier))]


__all__ = ["RemoteBarrier", "RemoteCopy", "RemoteCopyStep", "WAIT_KINDS", "remote_nodes"]
