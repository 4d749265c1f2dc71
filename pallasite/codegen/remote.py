"""Remote DMA in the kernel body (the plan's `RemotePlan`, plan/remote_copies.py).

A copy site is one descriptor variable, built where the user built it; its
starts and waits call that variable. Interpret mode checks a source or
destination index read from data just before it, and each device id against the
mesh's device count (the plan's `RangeCheck`s). A barrier signals each peer once
and waits for as many signals, once per phase.
"""
from __future__ import annotations

from ..ir import RemoteBarrier, RemoteCopy, RemoteCopyStep

DEVICE_ID_TYPE = "pl.DeviceIdType.LOGICAL"  # a flat rank, row-major over every mesh axis


# The registry's STRUCTURAL ops written as statements here, not as values (`STRUCTURAL_RULES`
# in codegen/structural.py holds the others).
REMOTE_STATEMENTS = ("remote_copy", "remote_copy_start", "remote_copy_wait", "remote_barrier")


def emit_remote(emitter, node, indent: int) -> None:
    remote = emitter.plan.remote
    if isinstance(node, RemoteCopy):
        site = remote.site(node.id)
        emitter._emit_index_checks(node, indent)  # runtime src/dst indices (the plan's RangeChecks)
        device_checks = _checked_devices(emitter, node, indent)
        src = _at(site.src_ref, [emitter.render(i) for i in node.src_index])
        dst = _at(site.dst_ref, [emitter.render(i) for i in node.dst_index])
        emitter.emit(f"{site.descriptor} = pltpu.make_async_remote_copy(", indent)
        emitter.emit(f"{src}, {dst}, {site.semaphores}.at[0], {site.semaphores}.at[1],", indent + 1)
        (device,) = device_checks
        emitter.emit(f"device_id={device}, device_id_type={DEVICE_ID_TYPE})", indent + 1)
    elif isinstance(node, RemoteCopyStep):
        site = remote.site(node.copy.id)
        if node.op == "remote_copy_start":
            emitter.emit(f"{site.descriptor}.start()", indent)
        else:
            kind = node.kwargs.get("kind", "both")
            if kind in ("both", "send"):
                emitter.emit(f"{site.descriptor}.wait_send()", indent)
            if kind in ("both", "recv"):
                emitter.emit(f"{site.descriptor}.wait_recv()", indent)
    elif isinstance(node, RemoteBarrier):
        peers = _checked_devices(emitter, node, indent)
        phases = remote.barrier_phases[node.id]
        named = ", ".join(emitter.render(peer) for peer in node.args)
        emitter.emit(f"# barrier with {named}: {phases} phase(s) of one signal per peer", indent)
        emitter.emit("barrier = pltpu.get_barrier_semaphore()", indent)
        emitter.emit(f"for _phase in range({phases}):", indent)
        for peer in peers:
            emitter.emit(f"pltpu.semaphore_signal(barrier, 1, device_id={peer}, device_id_type={DEVICE_ID_TYPE})",
                         indent + 1)
        emitter.emit(f"pl.semaphore_wait(barrier, {len(peers)})", indent + 1)


def _checked_devices(emitter, node, indent: int) -> list[str]:
    """The texts of the node's device ids, each checked against the mesh's device count
    when interpret mode traces it (`CHECKS.device_id`: see pallasite/runtime/checks.py),
    into a new variable so no outer name is rebound."""
    checks = [check for check in emitter.plan.range_checks if check.mesh_rank and check.remote_node == node.id]
    texts = []
    for check in checks:
        text = emitter.render(check.device)
        bounds = "" if check.bounds is None else f", bounds={check.bounds!r}"
        call = f"CHECKS.device_id({check.check_id}, {text}, limit=CHECKS.mesh_devices(){bounds})"
        if isinstance(check.device, int):
            emitter.emit("if INTERPRET is not None:  # interpret mode checks the device id against the mesh", indent)
            emitter.emit(call, indent + 1)  # a constant: checked when traced
            texts.append(text)
            continue
        name = emitter.names.fresh(f"{text}_checked" if text.isidentifier() else "device_checked")
        emitter.emit(f"{name} = {call} if INTERPRET is not None else {text}", indent)
        texts.append(name)
    return texts


def _at(ref: str, index: list[str]) -> str:
    return ref + "".join(f".at[{i}]" for i in index)
