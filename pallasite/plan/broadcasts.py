"""`pallas_pre_broadcast`: widen loop-invariant operands once, before an inner loop.

An elementwise op inside an inner loop that combines a value defined outside
the loop (a bias row `b[tile_n]`) with a wider one (the loop's accumulator)
broadcasts that operand on every step. With the knob on, the plan records a
`PreBroadcast` per such operand: codegen computes `jnp.broadcast_to` once
before the loop and the op reads the widened value. Only when the result's
lane (last) dim is a multiple of 128: then the widened value is whole vregs
and the per-step broadcast (a lane/sublane shuffle) is what is saved; for
narrower lanes it would only add a live VMEM value, so nothing changes.
0-d operands are splats, never pre-broadcast.
"""
from __future__ import annotations

from ..ir import IfBlock, Node, TileLoop, Value, ops, walk_nodes
from .plans import PreBroadcast
from .tpu_tiling import LANES


def plan_pre_broadcasts(body: list, enabled: bool, masks: dict,
                        skipped: frozenset = frozenset()) -> dict[int, tuple[PreBroadcast, ...]]:
    """Per inner TileLoop id, the operands to broadcast before it starts (`skipped`: nodes
    computed only chunk by chunk in looped reductions, which broadcast per chunk)."""
    found: dict[int, tuple[PreBroadcast, ...]] = {}
    if enabled:
        _visit(body, found, masks, skipped)
    return found


def _visit(body: list, found: dict, masks: dict, skipped: frozenset) -> None:
    for item in body:
        if isinstance(item, TileLoop):
            widened = _invariant_broadcasts(item, masks, skipped)
            if widened:
                found[item.id] = widened
            _visit(item.body, found, masks, skipped)
        elif isinstance(item, IfBlock):
            _visit(item.then_body, found, masks, skipped)
            _visit(item.else_body, found, masks, skipped)


def _invariant_broadcasts(loop: TileLoop, masks: dict, skipped: frozenset) -> tuple[PreBroadcast, ...]:
    inside = {id(v) for node in walk_nodes(loop.body) for v in getattr(node, "outputs", ())}
    inside |= {id(item.param) for item in loop.carried}
    result = []
    for node in loop.body:  # the loop's own statements (not nested loops or branches)
        if not isinstance(node, Node) or type(node) is not Node:
            continue
        if ops.OPS[node.op].kind is not ops.OpKind.ELEMENTWISE or node.id in masks or node.id in skipped:
            continue
        shape = tuple(node.outputs[0].shape)
        if not shape or shape[-1] % LANES != 0:
            continue
        for position, operand in enumerate(node.args):
            if (isinstance(operand, Value) and id(operand) not in inside and operand.shape
                    and tuple(operand.shape) != shape):
                result.append(PreBroadcast(operand, shape, node.id, position))
    return tuple(result)
