"""`hl.all_reduce(dst, src, peers, rank)`: a collective written in the kernel language.

The call expands, where the user wrote it (between device loops), into host allocations
and one `hl.grid(1)` device loop of remote copies (frontend/remote.py), which the rest of
the compiler plans like any user's copies (plan/remote_copies.py: the barrier protocol,
semaphores, VMEM). The loop starts with `hl.remote_barrier(peers, rank=me)`, so every device
is in the call before anyone copies into it (the entry rendezvous), and a buffer is reused
only by a later call, which every device enters after finishing this one. Its `rank` makes
the barrier check that `peers` and `rank` name every device of the mesh once, `rank` this
device's (the count when traced, the values in interpret mode): otherwise two devices would
fill one slot (a wrong sum) or a device would wait for a copy nobody sends. Two algorithms:

- one-shot: each device puts `src` in its slot of `all_reduce_recv` ([world, *shape]) and
  pushes that slot to every peer's same slot; once the world - 1 copies into its own
  buffer have landed, it sums the slots in order.
- reduce-scatter + all-gather: `src`'s last dim is cut into `world` chunks; device c
  receives every device's chunk c (`all_reduce_scatter`), sums them, and pushes its
  summed chunk (in `dst`'s dtype) to every peer (`all_reduce_gather`). Each device moves
  2 (world - 1) / world of the payload instead of world - 1 times it, in two rounds.

Both sum every device's values in rank order (one add per device, `_RANK_ORDER_SUM`), in
float32 for floating dtypes (int32 for integers), then cast to `dst`'s dtype: every device
gets the same bits, and the two algorithms the same result. `algorithm=None` picks by payload (`choose_algorithm`).
"""
from __future__ import annotations

import ast
import math
from typing import Any

import torch

from .. import exc
from .. import language as hl
from ..runtime.chips import chip_figures
from .proxies import HostTensor

ALGORITHMS = ("one_shot", "reduce_scatter")
# One round of an exchange (a barrier signal or a small remote DMA and its semaphore) costs
# about this much on ICI: an estimate, since no TPU generation's figure is published. The
# two-round reduce-scatter pays it once more than one-shot and wins when the bytes it saves
# take longer than that on one link.
ROUND_SECONDS = 2e-6
# One link's bandwidth for a chip whose ICI figure is not published (runtime/chips.py gives
# 0.0): v5e's, the slowest listed (400 GB/s bidirectional over 4 ports).
UNLISTED_LINK_BYTES_PER_SECOND = 50e9


def choose_algorithm(payload_bytes: int, world: int, chip: str | None = None) -> str:
    """One-shot sends (world - 1) * payload from each device in one round; reduce-scatter +
    all-gather 2 (world - 1) / world * payload in two. Reduce-scatter when the bytes saved
    take longer than a round at one ICI link's bandwidth."""
    link = chip_figures(chip).ici_link_bytes_per_second or UNLISTED_LINK_BYTES_PER_SECOND
    saved = payload_bytes * (world - 1) * (1 - 2 / world)
    return "reduce_scatter" if saved / link > ROUND_SECONDS else "one_shot"


# One copy site inside `hl.grid(world - 1)`, pushed to each peer and waited world - 1 times
# at the last step: one site, so the world - 1 copies landing here (from whichever peers)
# all count on its receive semaphore. `{push}`: the descriptor; `{copy}`: its arguments.
_PUSH_TO_PEERS = """
    for j in hl.grid(world - 1):
        peer = peers[j]
        {push} = hl.make_async_remote_copy({copy})
        {push}.start()
        if j == world - 2:
            for _w in hl.static_range(world - 1):
                {push}.wait()
"""

# `{out} = the slots of {buf} summed in rank order`, in acc_dtype: one add per slot, so the
# order is the rank order on every device and in either algorithm (a sum over the slot
# axis leaves the order to the compiler: XLA's CPU one is not sequential).
_RANK_ORDER_SUM = """
    total = {buf}[0, ALL].to(acc_dtype)
    for r in hl.static_range(1, world):
        total = total + {buf}[r, ALL].to(acc_dtype)
    {out} = total.to(dst.dtype)
"""

_ONE_SHOT = """
all_reduce_recv = torch.empty([world] + shape, dtype=src.dtype)
for _ in hl.grid(1):
    me = rank[RANK]
    hl.remote_barrier(peers[:], rank=me)
    all_reduce_recv[me, ALL] = src[ALL]
""" + _PUSH_TO_PEERS.format(push="push", copy="all_reduce_recv, me, peer") \
    + _RANK_ORDER_SUM.format(buf="all_reduce_recv", out="dst[ALL]")

_REDUCE_SCATTER = """
all_reduce_stage = torch.empty([world] + chunk_shape, dtype=src.dtype)
all_reduce_scatter = torch.empty([world] + chunk_shape, dtype=src.dtype)
all_reduce_gather = torch.empty([world] + chunk_shape, dtype=dst.dtype)
for _ in hl.grid(1):
    me = rank[RANK]
    hl.remote_barrier(peers[:], rank=me)
    for c in hl.static_range(world):
        all_reduce_stage[c, ALL] = src[LEAD c * chunk:(c + 1) * chunk]
    all_reduce_scatter[me, ALL] = all_reduce_stage[me, ALL]
""" + _PUSH_TO_PEERS.format(
    push="scatter_push", copy="all_reduce_stage, peer, peer, dst=all_reduce_scatter, dst_index=me") \
    + _RANK_ORDER_SUM.format(buf="all_reduce_scatter", out="all_reduce_gather[me, ALL]") \
    + _PUSH_TO_PEERS.format(push="gather_push", copy="all_reduce_gather, me, peer") + """
    for c in hl.static_range(world):
        dst[LEAD c * chunk:(c + 1) * chunk] = all_reduce_gather[c, ALL]
"""

_ALONE = """
for _ in hl.grid(1):
    dst[ALL] = src[ALL].to(acc_dtype).to(dst.dtype)
"""


def all_reduce(walker: Any, recorder: Any, dst: Any, src: Any, peers: Any, rank: Any, algorithm: Any) -> None:
    """Record `dst = sum over the devices of src` (see the module docstring)."""
    if recorder.device is not None:
        raise exc.UnsupportedSyntax(
            "hl.all_reduce exchanges whole tensors between device loops: call it outside any hl.tile/hl.grid "
            "loop, after the loop that writes `src`.", recorder.location)
    _check_tensors(dst, src, peers, rank, recorder.location)
    shape = list(src.symbol.shape)
    world = peers.symbol.shape[0] + 1
    algorithm = _algorithm(algorithm, shape, world, src.symbol, recorder.location)
    chunk = shape[-1] // world
    scope = {
        "torch": torch, "hl": hl, "dst": dst, "src": src, "peers": peers, "rank": rank, "world": world,
        "shape": shape, "chunk_shape": shape[:-1] + [chunk], "chunk": chunk,
        "acc_dtype": torch.float32 if src.symbol.dtype.is_floating_point else torch.int32,
    }
    template = _ALONE if world == 1 else _ONE_SHOT if algorithm == "one_shot" else _REDUCE_SCATTER
    every = ", ".join([":"] * len(shape))
    text = (template.replace("RANK", "()" if not rank.symbol.shape else "0").replace("ALL", every)
            .replace("LEAD ", ":, " * (len(shape) - 1)))
    walker.run_expansion(ast.parse(text).body, scope, f"hl.all_reduce ({algorithm.replace('_', '-')})")


def _check_tensors(dst: Any, src: Any, peers: Any, rank: Any, location: Any) -> None:
    for name, value in (("dst", dst), ("src", src), ("peers", peers), ("rank", rank)):
        if not isinstance(value, HostTensor):
            raise exc.UnsupportedOperation(
                f"hl.all_reduce: {name} must be a kernel tensor (an argument, a host allocation or a view of "
                f"one such as peers[0, :]), not {type(value).__name__}.", location)
    if list(dst.symbol.shape) != list(src.symbol.shape) or not src.symbol.shape:
        raise exc.ShapeMismatch(
            f"hl.all_reduce: dst {list(dst.symbol.shape)} and src {list(src.symbol.shape)} must have one shape, "
            "with at least one dim.", location)
    for name, value in (("dst", dst), ("src", src)):
        if value.symbol.dtype == torch.bool:
            raise exc.UnsupportedDtype(f"hl.all_reduce sums numbers; {name} is bool (use int32).", location)
    if len(peers.symbol.shape) != 1 or peers.symbol.dtype.is_floating_point:
        raise exc.UnsupportedOperation(
            f"hl.all_reduce: peers must be a 1-D int tensor of the other devices' flat ranks (peers[0, :] of a "
            f"[1, world - 1] table); got a {peers.symbol.dtype} tensor of shape {list(peers.symbol.shape)}.", location)
    if list(rank.symbol.shape) not in ([], [1]) or rank.symbol.dtype.is_floating_point:
        raise exc.UnsupportedOperation(
            f"hl.all_reduce: rank must be this device's flat rank as a one-element int tensor (rank[0] or rank); "
            f"got a {rank.symbol.dtype} tensor of shape {list(rank.symbol.shape)}.", location)


def _algorithm(algorithm: Any, shape: list[int], world: int, src: Any, location: Any) -> str:
    if algorithm is not None and algorithm not in ALGORITHMS:
        raise exc.UnsupportedOperation(
            f"hl.all_reduce: algorithm is {algorithm!r}; use None (chosen by payload), 'one_shot' or "
            "'reduce_scatter'.", location)
    divisible = shape[-1] % world == 0
    if algorithm == "reduce_scatter" and not divisible:
        raise exc.ShapeMismatch(
            f"hl.all_reduce(algorithm='reduce_scatter') cuts src's last dim ({shape[-1]}) into one chunk per "
            f"device ({world}), which must divide it; use algorithm='one_shot' or None.", location)
    if algorithm is not None:
        return algorithm
    return choose_algorithm(src.dtype.itemsize * math.prod(shape), world) if divisible else "one_shot"
