"""Remote DMA in the kernel body (the plan's `RemotePlan`, plan/remote_copies.py).

A copy site is one descriptor variable, built where the user built it; its
starts and waits call that variable. Interpret mode checks a source or
destination index read from data just before it, and each device id against the
mesh's device count (the plan's `RangeCheck`s). Barriers follow the plan's ring
barrier protocol: an entry rendezvous of every device on the barrier semaphore,
then per barrier one signal to each peer's semaphore for this device and one
wait on this device's semaphore for each peer.
"""
from __future__ import annotations

from ..ir import RemoteBarrier, RemoteCopy, RemoteCopyStep
from .tree import Layout

DEVICE_ID_TYPE = "pl.DeviceIdType.LOGICAL"  # a flat rank, row-major over every mesh axis
RANK = "barrier_rank"  # the kernel's variable holding this device's flat rank


# The registry's STRUCTURAL ops written as statements here, not as values (`STRUCTURAL_RULES`
# in codegen/structural.py holds the others).
REMOTE_STATEMENTS = ("remote_copy", "remote_copy_start", "remote_copy_wait", "remote_barrier")


def emit_remote(emitter, node) -> None:
    remote = emitter.plan.remote
    if isinstance(node, RemoteCopy):
        site = remote.site(node.id)
        emitter.emit_index_checks(node)  # runtime src/dst indices (the plan's RangeChecks)
        device_checks = _checked_devices(emitter, node)
        src = _at(site.src_ref, [emitter.render(i) for i in node.src_index])
        dst = _at(site.dst_ref, [emitter.render(i) for i in node.dst_index])
        (device,) = device_checks
        copy = emitter.emit(f"{site.descriptor} = pltpu.make_async_remote_copy({src}, {dst}, "
                            f"{site.semaphores}.at[0], {site.semaphores}.at[1], device_id={device}, "
                            f"device_id_type={DEVICE_ID_TYPE})")
        copy.layout[id(copy.node.value)] = Layout(expand=True)  # one argument per line
    elif isinstance(node, RemoteCopyStep):
        site = remote.site(node.copy.id)
        if node.op == "remote_copy_start":
            emitter.emit(f"{site.descriptor}.start()")
        else:
            kind = node.kwargs.get("kind", "both")
            if kind in ("both", "send"):
                emitter.emit(f"{site.descriptor}.wait_send()")
            if kind in ("both", "recv"):
                emitter.emit(f"{site.descriptor}.wait_recv()")
    elif isinstance(node, RemoteBarrier):
        peers = _checked_group(emitter, node) if node.rank is not None else _checked_devices(emitter, node)
        sems, rank = remote.barrier_semaphores, emitter.barrier_rank
        named = ", ".join(emitter.describe(peer) for peer in node.peers)
        emitter.comment(f"barrier with {named}: tell each peer this device got here (its semaphore for "
                        f"this device's rank)")
        for peer in peers:
            emitter.emit(f"pl.semaphore_signal({sems}.at[{rank}], 1, device_id={peer}, "
                         f"device_id_type={DEVICE_ID_TYPE})")
        for peer, text in zip(peers, node.peers):
            emitter.emit(f"pl.semaphore_wait({sems}.at[{peer}], 1)",
                         comment=f"{emitter.describe(text)} got to its matching barrier (only it signals this one)")
    else:
        raise TypeError(f"no remote statement for a {type(node).__name__}")


def emit_entry_rendezvous(emitter) -> None:
    """The kernel's first lines when it has barriers: this device's rank, and the entry
    rendezvous on the barrier semaphore at the first grid step (plan/remote_copies.py)."""
    remote = emitter.plan.remote
    rank = emitter.barrier_rank = emitter.names.fresh(RANK)
    emitter.emit(f"{rank} = mesh_rank()", comment="this device's flat rank on the mesh")
    emitter.comment("Entry: every device of the mesh has started this call (so its semaphores and VMEM are")
    emitter.comment("live) before any device signals or copies into it. Each device signals every device")
    emitter.comment(f"once on the barrier semaphore (collective id {remote.collective_id}) and waits for all "
                    "of them.")
    first = " & ".join(f"(pl.program_id({axis}) == 0)" for axis in range(len(emitter.plan.grid)))
    with emitter.block(f"@pl.when({first})\ndef _enter():"):
        emitter.emit("entry = pltpu.get_barrier_semaphore()")
        with emitter.block("@pl.loop(0, mesh_devices())\ndef _signal(device):"):
            emitter.emit(f"pl.semaphore_signal(entry, 1, device_id=device, device_id_type={DEVICE_ID_TYPE})")
        emitter.emit("pl.semaphore_wait(entry, mesh_devices())")


def _checked_devices(emitter, node) -> list[str]:
    """The texts of the node's device ids, each checked against the mesh's device count
    when interpret mode traces it (`CHECKS.device_id`: see pallasite/runtime/checks.py),
    into a new variable so no outer name is rebound."""
    checks = [check for check in emitter.plan.range_checks if check.mesh_rank and check.remote_node == node.id]
    texts = []
    for check in checks:
        text = emitter.render(check.device)
        label = emitter.describe(check.device)
        bounds = "" if check.bounds is None else f", bounds={check.bounds!r}"
        call = f"CHECKS.device_id({check.check_id}, {text}, limit=CHECKS.mesh_devices(){bounds})"
        if isinstance(check.device, int):
            with emitter.block("if INTERPRET is not None:", "interpret mode checks the device id against the mesh"):
                emitter.emit(call)  # a constant: checked when traced
            texts.append(text)
            continue
        name = emitter.names.fresh(f"{label}_checked" if emitter.is_name(check.device) else "device_checked")
        emitter.emit(f"{name} = {call} if INTERPRET is not None else {text}")
        texts.append(name)
    return texts


def _checked_group(emitter, node) -> list[str]:
    """The peers of `hl.remote_barrier(peers, rank=...)`, through `CHECKS.peer_group`: their
    count against the mesh's when traced, their values (every device once, the rank this
    device's) in interpret mode; a list variable holding them."""
    (check,) = [check for check in emitter.plan.range_checks if check.peer_group and check.remote_node == node.id]
    rank, *peers = (emitter.render(device) for device in check.device)
    name = emitter.names.fresh("peer_group")
    emitter.emit(f"{name} = CHECKS.peer_group({check.check_id}, {rank}, [{', '.join(peers)}], "
                 "limit=CHECKS.mesh_devices(), run_time=INTERPRET is not None)",
                 comment=f"the peers and {emitter.describe(node.rank)} name every device of the mesh once")
    return [f"{name}[{position}]" for position in range(len(peers))]


def _at(ref: str, index: list[str]) -> str:
    return ref + "".join(f".at[{i}]" for i in index)
