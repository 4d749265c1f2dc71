"""Remote DMA planning (ir/remote.py): which ref each copy site reads and writes, its
semaphores, the barrier's collective id, and what the schedule report shows.

Decisions, all recorded in `RemotePlan` for codegen to consume:
- A tensor a remote copy reads or writes is one whole VMEM block (every axis
  FULL, never streamed), so `ref.at[index]` on any device names the same rows;
  the destination counts as written (an argument is aliased in place and starts
  from its input values, so rows no copy writes keep them).
- Each copy site gets its own pair of DMA semaphores (send, receive) in scratch,
  and one descriptor variable; every start and wait of the site uses it.
- Every grid axis is arbitrary: each device walks the grid in the same order,
  so the copies and barriers of step i pair up across devices.
- `hl.remote_barrier(peers)` is a barrier with each peer, in two parts (the
  ring barrier protocol; why it is safe: docs/design/remote-copies.md):
  - entry: at the first grid step, before anything else, every device signals
    every device of the mesh once on the kernel's barrier semaphore (its
    collective id: a hash of the kernel's file and name and the loop's position,
    in int16, unless the kernel's `collective_id=` setting gives one) and waits
    for as many signals. The barrier semaphore is the only one a peer may signal
    before this device has started the call; passing proves every device has, so
    its scratch semaphores and VMEM are live before anyone signals or copies
    into them.
  - each barrier: one REGULAR semaphore per (receiver, sender) pair — scratch
    `barrier_sems`, one per device of the mesh on each device, indexed by the
    sender's flat rank. This device signals `barrier_sems[me]` on each peer, then
    waits for one signal on its own `barrier_sems[peer]` per peer. A semaphore
    only one device signals cannot be satisfied by a third device's signals (as
    one counting semaphore for all peers was: on a ring of 7 or more, devices
    right of a slow one ran a barrier ahead and let its left neighbour pass);
    since peers name each other, the k-th wait on `barrier_sems[p]` passes only
    after p's k-th signal to this device, made at p's matching barrier. The
    semaphores are shared by every barrier of the loop (and every hop), and end
    at zero.
- A source or destination index the data decides (`slots[0]`, `(me - hop + n) % n`)
  is a `RangeCheck` against its tensor's dim (`remote_index_checks`): interpret
  mode checks it before the descriptor is built and, outside, copies row 0
  instead (the copy still pairs up with its peer's, so no device waits forever)
  and the call raises; one whose range planning can compute is checked here.
- A device id (of a copy or a barrier peer) must lie in [0, devices), the
  device count of the mesh the kernel runs under, which only tracing under
  `jax.shard_map` knows: each is a `RangeCheck` with `mesh_rank` set
  (`remote_device_checks`) and, when planning computes one, its interval
  (`(me + 1) % n`: [0, n - 1]). The generated code checks it when traced
  (`CHECKS.device_id`): an interval inside the mesh costs nothing, one outside
  it is an error then, and otherwise interpret mode checks the value at run
  time. A violation is recorded (the call raises, or warns, as for an index) and
  the id is replaced by the first rank outside the mesh, so interpret mode's DMA
  or signal fails the whole run at once (a substitute rank inside the mesh would
  leave the intended peer waiting forever, and the interpreter takes a negative
  rank for the last device). A negative constant is an error when traced; a TPU
  does not check.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

from .. import exc
from ..ir import FullSlice, Load, Node, RemoteBarrier, RemoteCopy, RemoteCopyStep, Store, Value, ops, walk_nodes
from ..ir.intervals import scalar_interval
from .bounds import describe
from .plans import BlockKind, Memory, Operand, RangeCheck, Scratch, ScratchKind

COLLECTIVE_ID_LIMIT = 2**15  # the interpreter stores a collective id as int16


@dataclass(frozen=True)
class RemoteCopySite:
    """One `hl.make_async_remote_copy` call site."""

    node_id: int
    descriptor: str  # the generated descriptor variable
    src_ref: str
    dst_ref: str
    semaphores: str  # scratch: DMA semaphores (send, receive)
    bytes_per_copy: int
    src_name: str
    dst_name: str
    # matmuls between the site's (first) start and the wait for its receive, in program
    # order (both branches of a device if counted): the compute its transfer overlaps
    overlapped_matmuls: int = 0


BARRIER_SEMAPHORES = "barrier_sems"  # scratch: one REGULAR semaphore per device of the mesh


@dataclass(frozen=True)
class RemotePlan:
    sites: tuple[RemoteCopySite, ...]
    # the barrier semaphore's id, which the entry rendezvous uses (None: no barrier, so
    # neither the rendezvous nor `barrier_semaphores`)
    collective_id: int | None
    barrier_semaphores: str | None = None  # scratch: per sender rank, every barrier's signals

    def site(self, node_id: int) -> RemoteCopySite:
        return next(site for site in self.sites if site.node_id == node_id)

    @property
    def scratch(self) -> tuple[Scratch, ...]:
        scratch = [Scratch(site.semaphores, ScratchKind.DMA_SEMAPHORES, (2,), None) for site in self.sites]
        if self.barrier_semaphores is not None:
            scratch.append(Scratch(self.barrier_semaphores, ScratchKind.MESH_SEMAPHORES, (), None))
        return tuple(scratch)


def copies_of(body: list) -> list[RemoteCopy]:
    return [node for node in walk_nodes(body) if isinstance(node, RemoteCopy)]


def synthetic_accesses(node: RemoteCopy) -> tuple[Load, Store]:
    """The whole-tensor read of the source and write of the destination that a copy
    stands for, so memory planning keeps both tensors whole and the destination written."""
    src, dst = node.src, node.dst
    load = Load("load", (), {}, [Value(tuple(src.shape), src.dtype)], node.location, tensor=src,
                index=tuple(FullSlice() for _ in src.shape))
    store = Store("store", (0,), {}, [], node.location, tensor=dst, index=tuple(FullSlice() for _ in dst.shape))
    return load, store


def remote_symbols(body: list) -> set[int]:
    return {symbol.id for node in copies_of(body) for symbol in (node.src, node.dst)}


def check_whole_operand(operand: Operand, location) -> None:
    """A remote copy's tensor must be one whole VMEM block, as big as the tensor."""
    shape = operand.symbol.shape
    whole = operand.memory is Memory.VMEM_BLOCK and operand.padded_shape is None and operand.view_shape is None \
        and all(block.kind in (BlockKind.FULL, BlockKind.RESIDENT) and block.size == size
                for block, size in zip(operand.axes, shape))
    if not whole:
        raise exc.UnsupportedOperation(
            f"'{operand.symbol.name}' is copied between devices, so it must stay one whole VMEM block, but "
            "the kernel also reads or writes it by tiles whose blocks do not cover it exactly; index it "
            "with ':' and scalars, or tiles whose block sizes divide its dims.", location)


def _overlapped_matmuls(nodes: list, copy: RemoteCopy) -> int:
    start = next(i for i, n in enumerate(nodes) if isinstance(n, RemoteCopyStep) and n.copy is copy
                 and n.op == "remote_copy_start")
    wait = next((i for i, n in enumerate(nodes) if i > start and isinstance(n, RemoteCopyStep) and n.copy is copy
                 and n.op == "remote_copy_wait" and n.kwargs.get("kind") in ("both", "recv")), start)
    return sum(1 for n in nodes[start:wait] if type(n) is Node and n.op in ops.OPS
               and ops.OPS[n.op].kind is ops.OpKind.CONTRACTION)


def plan_remote(ir, call, refs: dict[int, str]) -> RemotePlan | None:
    """The remote plan of one device loop (None if it has no remote copy or barrier);
    `refs`: tensor symbol id -> the kernel ref its loads and stores use."""
    body = call.loop.body
    nodes = list(walk_nodes(body))
    copies = [n for n in nodes if isinstance(n, RemoteCopy)]
    barriers = [n for n in nodes if isinstance(n, RemoteBarrier)]
    if not copies and not barriers:
        return None
    sites = []
    for node in copies:
        steps = [n for n in nodes if isinstance(n, RemoteCopyStep) and n.copy is node]
        started = any(n.op == "remote_copy_start" for n in steps)
        kinds = {n.kwargs.get("kind") for n in steps if n.op == "remote_copy_wait"}
        send = bool(kinds & {"both", "send"})
        recv = bool(kinds & {"both", "recv"})
        if not started or not (send and recv):
            missing = ("never started" if not started else
                       "started but its send is never waited (.wait() or .wait_send())" if not send else
                       "started but its receive is never waited (.wait() or .wait_recv())")
            raise exc.UnsupportedOperation(
                f"This remote copy of '{node.src.name}' is {missing}; every copy must be started once "
                "per use and waited for both its send and its receive before the kernel ends.", node.location)
        count = math.prod(node.src.shape[len(node.src_index):])
        sites.append(RemoteCopySite(
            node.id, f"copy{node.site}", refs[node.src.id], refs[node.dst.id], f"copy{node.site}_sems",
            count * node.src.dtype.itemsize, node.src.name, node.dst.name, _overlapped_matmuls(nodes, node)))
    collective_id = None
    if barriers:
        chosen = getattr(ir, "collective_id", None)
        if chosen is None:
            key = f"{ir.source_file}:{ir.name}:{call.index}".encode()
            collective_id = zlib.crc32(key) % COLLECTIVE_ID_LIMIT
        else:
            collective_id = chosen + call.index
            if not 0 <= collective_id < COLLECTIVE_ID_LIMIT:
                raise exc.InvalidConfig(
                    f"collective_id={chosen} (+ {call.index} for device loop {call.index}) is outside "
                    f"[0, {COLLECTIVE_ID_LIMIT}): barrier ids are int16.")
    return RemotePlan(tuple(sites), collective_id, BARRIER_SEMAPHORES if barriers else None)


def remote_index_checks(body: list, check_ids) -> tuple[RangeCheck, ...]:
    """One check per source or destination index of a copy whose range only the data
    decides; an index whose computed range leaves the tensor is an error now."""
    checks = []
    for node in copies_of(body):
        for what, symbol, index in (("src_index", node.src, node.src_index), ("dst_index", node.dst, node.dst_index)):
            for axis, item in enumerate(index):
                if not isinstance(item, Value):
                    continue  # a constant: checked when traced (frontend/remote.py)
                size = symbol.shape[axis]
                text = describe(item)
                interval = scalar_interval(item)
                if interval is not None:
                    if interval[0] < 0 or interval[1] >= size:
                        raise exc.IndexingError(
                            f"hl.make_async_remote_copy: {what} [{axis}] ({text}) covers [{interval[0]}, "
                            f"{interval[1]}] but '{symbol.name}'.size({axis}) is {size}.", node.location)
                    continue
                text = text.replace("{", "{{").replace("}", "}}")
                message = (f"hl.make_async_remote_copy: {what} [{axis}] ({text}) is {{lo}} but "
                           f"'{symbol.name}'.size({axis}) is {{limit}}; indices read from data must lie in "
                           "[0, {limit}) (they do not wrap).")
                checks.append(RangeCheck(next(check_ids), size, message, node.location, value=item,
                                         node_id=node.id))
    return tuple(checks)


def _peer_group_check(node: RemoteBarrier, check_id: int) -> RangeCheck:
    """`hl.remote_barrier(peers, rank=me)`: the peers and `me` name every device of the mesh
    once, `me` this device's own rank (the count when traced, the values in interpret mode);
    `device` holds (rank, *peers); `{lo}` is what the check saw."""
    rank = describe(node.rank).replace("{", "{{").replace("}", "}}")
    message = (f"hl.remote_barrier(peers, rank={rank}): the peers and the rank must name every device of the "
               "{limit}-device mesh once, the rank this device's own; got {lo}")
    return RangeCheck(check_id, 0, message, node.location, mesh_rank=True,
                      device=(node.rank, *node.peers), remote_node=node.id, peer_group=True)


def remote_device_checks(body: list, check_ids) -> tuple[RangeCheck, ...]:
    """One check per device id of a copy or a barrier peer, against the mesh's device
    count (known when traced); a computed interval that starts below 0 is an error now."""
    checks = []
    for node in walk_nodes(body):
        if isinstance(node, RemoteCopy):
            what, ids = "hl.make_async_remote_copy: device_id", (node.device_id,)
        elif isinstance(node, RemoteBarrier) and node.rank is not None:
            checks.append(_peer_group_check(node, next(check_ids)))
            continue
        elif isinstance(node, RemoteBarrier):
            what, ids = "hl.remote_barrier: peer", node.peers
        else:
            continue
        for device in ids:
            text = describe(device)
            bounds = scalar_interval(device)
            if bounds is not None and bounds[0] < 0:
                raise exc.IndexingError(
                    f"{what} ({text}) covers [{bounds[0]}, {bounds[1]}]; device ids are flat ranks in "
                    "[0, devices) (they do not wrap).", node.location)
            text = text.replace("{", "{{").replace("}", "}}")
            message = (f"{what} ({text}) is {{lo}} but the mesh has {{limit}} devices; device ids are flat "
                       "ranks in [0, {limit}), row-major over the mesh axes (they do not wrap).")
            checks.append(RangeCheck(next(check_ids), 0, message, node.location, mesh_rank=True, device=device,
                                     remote_node=node.id, bounds=bounds))
    return tuple(checks)


__all__ = ["BARRIER_SEMAPHORES", "COLLECTIVE_ID_LIMIT", "RemoteCopySite", "RemotePlan", "check_whole_operand", "copies_of",
           "plan_remote", "remote_device_checks", "remote_index_checks", "remote_symbols", "synthetic_accesses"]
