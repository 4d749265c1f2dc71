"""Which values carry a padded tail, and which ops must mask it.

A block of a tile whose range does not fill it (the last tile of a
non-divisible dim, or a block larger than the dim) holds stale VMEM past the
tile's end. Pointwise ops may compute on it freely (stores never write past a
tensor's bound), but an op that mixes elements along a padded axis — a
reduction, a matmul contraction — must first replace the tail by its own
identity. This pass tracks padded axes through the body and records one
`Mask` per such operand; codegen applies exactly these.
"""
from __future__ import annotations

from ..ir import (
    FullSlice, GatherIndex, IfBlock, Load, NewAxis, Node, ScalarIndex, Store, TileDim, TileLoop, TileSlice,
    Value, ops, walk_nodes,
)
from ..ir.ops import Contraction, OpKind, Reduction, ViewRule
from .. import exc
from .plans import CarriedMask, Mask, TileRange

Padded = dict[int, TileRange]  # axis -> the tile range outside which its lanes are padding


def plan_masks(body: list) -> tuple[
        dict[int, tuple[Mask, ...]], dict[int, tuple[CarriedMask, ...]], dict[int, TileRange]]:
    """Masks per node id, the carried-value masks per inner loop id, and per gathering
    load or scattering store the range of its index vector's valid lanes (when its
    tail is padding).

    Every mask of a dim carries the same `TileRange`. A gather's result is padded
    along the gathered axis where its index vector is: garbage indices pick
    garbage rows, which reductions then mask like any padding.
    """
    padded: dict[int, Padded] = {}
    masks: dict[int, tuple[Mask, ...]] = {}
    carried_masks: dict[int, tuple[CarriedMask, ...]] = {}
    ranges: dict[int, TileRange] = {}

    def needs_mask(dim: TileDim) -> TileRange | None:
        """The range outside which `dim`'s tiles hold padding, or None if they never do."""
        if not dim.has_partial_tail:
            return None
        return ranges.setdefault(dim.id, TileRange(dim))

    _visit_body(body, padded, masks, carried_masks, needs_mask)
    gather_lanes = {}
    for node in walk_nodes(body):
        if isinstance(node, (Load, Store)):
            for item in node.index:
                if isinstance(item, GatherIndex) and 0 in _pads(item.value, padded):
                    gather_lanes[node.id] = _pads(item.value, padded)[0]
    return masks, carried_masks, gather_lanes


def _visit_body(body: list, padded: dict[int, Padded], masks: dict, carried_masks: dict, needs_mask) -> None:
    for node in body:
        if isinstance(node, TileLoop):
            _visit_loop(node, padded, masks, carried_masks, needs_mask)
            continue
        if isinstance(node, IfBlock):  # a merged value is padded where either branch's is
            for branch in node.bodies:
                _visit_body(branch, padded, masks, carried_masks, needs_mask)
            for item in node.outputs:
                padded[item.out.id] = {**_pads(item.else_value, padded), **_pads(item.then_value, padded)}
            continue
        node_masks, out = _visit(node, padded, needs_mask)
        if node_masks:
            masks[node.id] = tuple(node_masks)
        else:
            masks.pop(node.id, None)
        for value, pads in zip(node.outputs, out):
            if pads:
                padded[value.id] = pads


def _visit_loop(loop: TileLoop, padded: dict[int, Padded], masks: dict, carried_masks: dict,
                needs_mask) -> None:
    """A loop-carried value is padded where its initial or its updated value is.

    Padding by the loop's own dims is different: it is the partial tile of one
    iteration, and those dims do not exist after the loop. The carried value
    keeps its previous lanes there (a `CarriedMask`), so that padding never
    reaches the next iteration or the code after the loop.
    """
    own = {dim.id for dim in loop.dims}  # padding by these stops at the carried values
    for item in loop.carried:
        padded[item.param.id] = dict(_pads(item.init, padded))
    for _ in range(3):  # padding only grows; a fixpoint is reached quickly
        _visit_body(loop.body, padded, masks, carried_masks, needs_mask)
        changed = False
        for item in loop.carried:
            outer = {axis: rng for axis, rng in _pads(item.result, padded).items() if rng.dim.id not in own}
            grown = {**outer, **padded[item.param.id]}
            if grown != padded[item.param.id]:
                padded[item.param.id] = grown
                changed = True
        if not changed:
            break
    kept = tuple(
        CarriedMask(position, axis, rng)
        for position, item in enumerate(loop.carried)
        for axis, rng in sorted(_pads(item.result, padded).items())
        if rng.dim.id in own
    )
    if kept:
        carried_masks[loop.id] = kept
    for item in loop.carried:
        padded[item.out.id] = padded[item.param.id]


def _pads(operand, padded) -> Padded:
    return padded.get(operand.id, {}) if isinstance(operand, Value) else {}


def _visit(node: Node, padded: dict[int, Padded], needs_mask) -> tuple[list[Mask], list[Padded]]:
    if isinstance(node, Load):
        out: Padded = {}
        axis = 0
        for item in node.index:
            if isinstance(item, ScalarIndex):
                continue
            if isinstance(item, TileSlice) and needs_mask(item.dim):
                out[axis] = needs_mask(item.dim)
            if isinstance(item, GatherIndex) and 0 in _pads(item.value, padded):
                out[axis] = _pads(item.value, padded)[0]
            axis += 1
        return [], [out]
    if isinstance(node, Store):
        return [], []
    op = ops.OPS[node.op]
    if op.kind is OpKind.REDUCTION:
        return _reduction(node, op.reduction, padded)
    if op.kind is OpKind.CONTRACTION:
        return _matmul(node, op.contraction, padded)
    if op.kind is OpKind.VIEW and op.view in _VIEW_PADDING:
        return [], [_VIEW_PADDING[op.view](node, _pads(node.args[0], padded))]
    if op.kind in (OpKind.CREATION, OpKind.STRUCTURAL):
        # hl.full([tile, ...]), tile.index: axes sized by a partial tile extend past its end
        tiles = op.tiles_of(node.args, node.kwargs)
        return [], [{axis: needs_mask(dim) for axis, dim in enumerate(tiles) if dim is not None and needs_mask(dim)}]
    # Elementwise ops and broadcasting views (expand, identity): broadcast union, right-aligned.
    rank = len(node.outputs[0].shape)
    out = {}
    for operand in node.args:
        if isinstance(operand, Value):
            shift = rank - len(operand.shape)
            for axis, dim in _pads(operand, padded).items():
                if operand.shape[axis] != 1:
                    out[axis + shift] = dim
    return [], [out] * len(node.outputs)


def _reduction(node: Node, reduction: Reduction, padded) -> tuple[list[Mask], list[Padded]]:
    source = node.args[0]
    pads = _pads(source, padded)
    rank = len(source.shape) if isinstance(source, Value) else 0
    dims = node.kwargs["dim"]
    reduced = set(range(rank)) if dims is None else set(dims)
    masks = [Mask(0, axis, dim, reduction.identity) for axis, dim in sorted(pads.items()) if axis in reduced]
    out = {}
    keep = node.kwargs.get("keepdim", False)
    new_axis = 0
    for axis in range(rank):
        if axis in reduced:
            if keep:
                new_axis += 1
            continue
        if axis in pads:
            out[new_axis] = pads[axis]
        new_axis += 1
    return masks, [out] * len(node.outputs)


def _matmul(node: Node, contraction: Contraction, padded) -> tuple[list[Mask], list[Padded]]:
    a, b = node.args[contraction.lhs], node.args[contraction.rhs]
    pa, pb = _pads(a, padded), _pads(b, padded)
    ra, rb = len(a.shape), len(b.shape)
    masks = []
    lhs_axis, rhs_axis = contraction.contracted_axes(ra, rb)
    if lhs_axis in pa:
        masks.append(Mask(contraction.lhs, lhs_axis, pa[lhs_axis], 0))
    if rhs_axis is not None and rhs_axis in pb:
        masks.append(Mask(contraction.rhs, rhs_axis, pb[rhs_axis], 0))
    rank = len(node.outputs[0].shape)
    out = {}
    if ra >= 2 and ra - 2 in pa:
        out[rank - 2] = pa[ra - 2]
    if rb >= 2 and rb - 1 in pb:
        out[rank - 1] = pb[rb - 1]
    for axis in range(ra - 2):
        if axis in pa:
            out[axis + rank - ra] = pa[axis]
    if contraction.addend is not None:  # the added input broadcasts onto the product
        bias = node.args[contraction.addend]
        if isinstance(bias, Value):
            shift = rank - len(bias.shape)
            for axis, dim in _pads(bias, padded).items():
                out.setdefault(axis + shift, dim)
    return masks, [out]


def _permute(node: Node, pads: Padded) -> Padded:
    perm = node.kwargs["perm"]
    return {j: pads[p] for j, p in enumerate(perm) if p in pads}


def _reshape(node: Node, pads: Padded) -> Padded:
    if not pads:
        return {}
    source = node.args[0].shape
    target = node.kwargs["shape"]
    out = {}
    for axis, dim in pads.items():
        before = _prod(source[:axis])
        size = source[axis]
        match = None
        for j, t in enumerate(target):
            if t == size and _prod(target[:j]) == before:
                match = j
                break
        if match is None:
            raise exc.UnsupportedOperation(
                f"reshape {list(source)} -> {list(target)} merges or splits the partially "
                f"filled tile dim '{dim.dim.name}'; pick a block size that divides it, or "
                "reshape only whole dims.",
                node.location,
            )
        out[match] = dim
    return out


def _getitem(node: Node, pads: Padded) -> Padded:
    out = {}
    src_axis = 0
    out_axis = 0
    key = node.kwargs["key"]
    source_rank = len(node.args[0].shape)
    explicit = sum(1 for k in key if k is not None and k is not Ellipsis)
    for item in key:
        if item is None:
            out_axis += 1
        elif item is Ellipsis:
            for _ in range(source_rank - explicit):
                if src_axis in pads:
                    out[out_axis] = pads[src_axis]
                src_axis += 1
                out_axis += 1
        elif isinstance(item, int):
            src_axis += 1
        else:
            if src_axis in pads:
                out[out_axis] = pads[src_axis]
            src_axis += 1
            out_axis += 1
    while src_axis < source_rank:
        if src_axis in pads:
            out[out_axis] = pads[src_axis]
        src_axis += 1
        out_axis += 1
    return out


# Views that move padded axes; BROADCAST views (expand, identity) pad like elementwise ops.
_VIEW_PADDING = {ViewRule.PERMUTE: _permute, ViewRule.RESHAPE: _reshape, ViewRule.SUBSCRIPT: _getitem}


def _prod(values) -> int:
    result = 1
    for v in values:
        result *= v
    return result


__all__ = ["plan_masks", "FullSlice", "NewAxis"]
