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
    FullSlice, GatherIndex, IfBlock, Load, NewAxis, Node, Run, ScalarIndex, ShiftedTile, Store, TileDim, TileLoop,
    TileSlice, Value, ops, walk_nodes,
)
from ..ir.ops import Contraction, OpKind, Reduction, ViewRule
from .. import exc
from .plans import CarriedMask, LaneRange, Mask, MergedPadding, TileRange



# axis -> the tile range outside which its lanes are padding (or a merge of several)
Padded = dict[int, "TileRange | MergedPadding"]


def plan_masks(body: list, padded: dict | None = None) -> tuple[
        dict[int, tuple[Mask, ...]], dict[int, tuple[CarriedMask, ...]], dict[int, LaneRange]]:
    """Masks per node id, the carried-value masks per inner loop id, and per gathering
    load or scattering store the valid lanes of its index vector (when it has padding).

    Every mask of a dim carries the same `TileRange`. A gather's result is padded
    along the gathered axis where its index vector is: garbage indices pick
    garbage rows, which reductions then mask like any padding. The flat vector of a
    partially filled index tile (`indices[tm, tn].reshape(-1)`) is valid on a rectangle
    of its tiles' ranges, a `MergedPadding`: the index checks and row copies skip the rest.
    """
    padded = {} if padded is None else padded  # filled: the padded axes of every value (plan/subviews.py)
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


def tile_axes(body: list, dims: set[int]) -> dict[int, dict[int, int]]:
    """Which axes of each value of `body` (nodes in program order, loops whole) the tile
    dims `dims` index: value id -> {axis: dim id}. This is the padding analysis's own
    propagation, asked of these dims whatever their tails (a partial tile's axes are
    tracked just so); `hl.jagged_tile` (frontend/jagged.py) finds the row and jagged axes
    of an index by it. A node the analysis refuses leaves the values after it unknown."""
    padded: dict[int, Padded] = {}
    try:
        _visit_body(body, padded, {}, {}, lambda dim: TileRange(dim) if dim.id in dims else None)
    except exc.PallasiteError:
        pass
    return {value_id: {axis: rng.dim.id for axis, rng in pads.items() if isinstance(rng, TileRange)}
            for value_id, pads in padded.items()}


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
    own = {dim.id for dim in loop.own_dims}  # padding by these stops at the carried values
    for item in loop.carried:
        padded[item.param.id] = dict(_pads(item.init, padded))
    for _ in range(3):  # padding only grows; a fixpoint is reached quickly
        _visit_body(loop.body, padded, masks, carried_masks, needs_mask)
        changed = False
        for item in loop.carried:
            outer = {axis: rng for axis, rng in _pads(item.result, padded).items() if not _owned(rng, own)}
            grown = {**outer, **padded[item.param.id]}
            if grown != padded[item.param.id]:
                padded[item.param.id] = grown
                changed = True
        if not changed:
            break
    kept = tuple(
        CarriedMask(position, axis, _single(rng, loop, f"carry '{item.name}' across the loop"))
        for position, item in enumerate(loop.carried)
        for axis, rng in sorted(_pads(item.result, padded).items())
        if _owned(rng, own)
    )
    if kept:
        carried_masks[loop.id] = kept
    for item in loop.carried:
        padded[item.out.id] = padded[item.param.id]


def _owned(rng, own: set[int]) -> bool:
    """Whether padding comes from one of a loop's own dims."""
    if isinstance(rng, MergedPadding):
        return any(part is not None and part.dim.id in own for _, part in rng.parts)
    return rng.dim.id in own


def _single(rng, node, what: str) -> TileRange:
    """The range of an axis an op must mask: a merged axis has none."""
    if isinstance(rng, MergedPadding):
        raise exc.UnsupportedOperation(
            f"Cannot {what} along an axis that a reshape merged from the partially filled tile dims "
            f"{rng.names}: its padding is not one tile range. Reshape it back to those dims first "
            "(then reduce), or pick block sizes that divide the dims.", node.location)
    return rng


def _pads(operand, padded) -> Padded:
    return padded.get(operand.id, {}) if isinstance(operand, Value) else {}


def _visit(node: Node, padded: dict[int, Padded], needs_mask) -> tuple[list[Mask], list[Padded]]:
    if isinstance(node, Load):
        out: Padded = {}
        axis = 0
        for item in node.index:
            if isinstance(item, ScalarIndex):
                continue
            if isinstance(item, (TileSlice, ShiftedTile)) and needs_mask(item.dim):
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
    if op.kind is OpKind.INDEXED:
        return [], [_indexed_padding(node, padded)]
    if op.view is ViewRule.CONCATENATE:
        return [], [_concatenated_padding(node, padded)]
    if op.kind is OpKind.VIEW and op.view in _VIEW_PADDING:
        return [], [_VIEW_PADDING[op.view](node, _pads(node.args[0], padded))]
    if node.op == "subview":
        return [], [_subview_padding(node, _pads(node.args[0], padded), needs_mask)]
    if op.kind in (OpKind.CREATION, OpKind.STRUCTURAL):
        # hl.full([tile, ...]), tile.index: axes sized by a partial tile extend past its end
        tiles = op.tiles_of(node.args, node.kwargs)
        out = {axis: needs_mask(dim) for axis, dim in enumerate(tiles) if dim is not None and needs_mask(dim)}
        if node.op == "full" and len(node.args) > 1:  # torch.*_like(v): v's padding is its own
            out.update(_pads(node.args[1], padded))
        return [], [out]
    # Elementwise ops and broadcasting views (expand, identity): broadcast union, right-aligned.
    rank = len(node.outputs[0].shape)
    out, unit = {}, {}
    for operand in node.args:
        if isinstance(operand, Value):
            shift = rank - len(operand.shape)
            for axis, dim in _pads(operand, padded).items():
                if operand.shape[axis] != 1:
                    out[axis + shift] = dim
                elif isinstance(dim, TileRange) and dim.dim.block_size == 1:
                    unit[axis + shift] = dim  # a tile of one position (never padded): its own axis
    return [], [{**{a: d for a, d in unit.items() if node.outputs[0].shape[a] == 1}, **out}] * len(node.outputs)


def _indexed_padding(node: Node, padded) -> Padded:
    """torch.gather: the result has the index's shape, so it is padded where the index is,
    and where the input is along the other axes. Padding along the indexed axis itself would
    be read by a valid index past the tile's end (torch raises there), so it is refused."""
    source, index = node.args
    dim = node.kwargs["dim"]
    source_pads = _pads(source, padded)
    pair = _lane_pair_padding(source_pads.get(dim), index, dim)
    if pair is not None:  # lanes 2i + parity of pairs a reshape merged: lane i is pair i
        out = {axis: rng for axis, rng in source_pads.items() if axis != dim and index.shape[axis] != 1}
        out.update(_pads(index, padded))
        out[dim] = pair
        return out
    if dim in source_pads:
        rng = source_pads[dim]
        names = rng.names if isinstance(rng, MergedPadding) else rng.dim.name
        raise exc.UnsupportedOperation(
            f"torch.gather along axis {dim}, which a partially filled tile of {names} sizes: an index "
            "past the tile's end would read its padding where torch raises (torch.flip is such a gather: "
            "it would move the padding to the front). Gather along a whole axis (index the tensor with ':' "
            "there), or pick a block size that divides the dim.", node.location)
    out = {axis: rng for axis, rng in source_pads.items() if axis != dim and index.shape[axis] != 1}
    out.update(_pads(index, padded))
    return out


def _lane_pair_padding(rng, index: Value, dim: int):
    """The padding of a gather of one half of lane pairs (`hl.split`, `x[..., 0]` of a
    `reshape(..., n, 2)`: index `2 * iota(n) + parity` along `dim`) from an axis merged of a
    padded (n) axis and the pair axis (2): result lane i is valid where pair i is, so the
    result takes the pairs' range. None for any other gather or padding."""
    if not (isinstance(rng, MergedPadding) and len(rng.parts) == 2 and rng.parts[1] == (2, None)):
        return None
    count, pairs = rng.parts[0]
    if pairs is None or int(index.shape[dim]) != count:
        return None
    node = index.producer
    while getattr(node, "op", None) in ("expand", "reshape"):
        node = node.args[0].producer
    if getattr(node, "op", None) != "add" or node.args[1] not in (0, 1):
        return None
    scaled = getattr(node.args[0], "producer", None)
    if getattr(scaled, "op", None) != "mul" or scaled.args[1] != 2:
        return None
    iota = getattr(scaled.args[0], "producer", None)
    if getattr(iota, "op", None) != "iota" or (iota.kwargs.get("start"), iota.kwargs.get("step")) != (0, 1):
        return None
    return pairs if int(scaled.args[0].shape[0]) == count else None


def _concatenated_padding(node: Node, padded) -> Padded:
    """torch.cat: every operand has the result's size along the other axes, so the result is
    padded there where any operand is. Along `dim` an operand's padding would sit inside the
    result (or past a shifted tile end), which no tile range describes: refused."""
    dim = node.kwargs["dim"]
    out: Padded = {}
    for operand in node.args:
        pads = _pads(operand, padded)
        if dim in pads:
            rng = pads[dim]
            names = rng.names if isinstance(rng, MergedPadding) else rng.dim.name
            raise exc.UnsupportedOperation(
                f"torch.cat/stack along axis {dim}, which a partially filled tile of {names} sizes: its "
                "padding would land inside the result. Concatenate along a whole axis (index the tensor "
                "with ':' there), or pick a block size that divides the dim.", node.location)
        out.update(pads)
    return out


def _reduction(node: Node, reduction: Reduction, padded) -> tuple[list[Mask], list[Padded]]:
    source = node.args[0]
    pads = _pads(source, padded)
    rank = len(source.shape) if isinstance(source, Value) else 0
    dims = node.kwargs["dim"]
    reduced = set(range(rank)) if dims is None else set(dims)
    masks = [Mask(0, axis, _single(dim, node, f"{node.op}"), reduction.identity)
             for axis, dim in sorted(pads.items()) if axis in reduced]
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
    # zeros on the contracted axis wherever it is padding: any set of valid lanes will do, so a
    # merged axis (`b.reshape(tk * 2, n)`, an int4 GEMM's interleaved nibbles) is masked too
    if lhs_axis in pa:
        masks.append(Mask(contraction.lhs, lhs_axis, pa[lhs_axis], 0))
    if rhs_axis in pb:
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
    """A padded axis the reshape keeps moves; axes it merges become one `MergedPadding`
    axis, which a later reshape may split back into its parts."""
    if not pads:
        return {}
    source = tuple(node.args[0].shape)
    target = tuple(node.kwargs["shape"])
    out = {}
    regrouped = set()
    for axis, rng in pads.items():
        match = _same_axis(source, target, axis)
        if match is None:
            regrouped.add(axis)
        else:
            out[match] = rng
    for sources, targets in _reshape_groups(source, target):
        group = [axis for axis in sources if axis in regrouped]
        if not group:
            continue
        sized = [t for t in targets if target[t] != 1]
        if len(sized) == 1 and len(sources) > 1:  # several axes merge into one
            parts = []
            for axis in sources:
                rng = pads.get(axis)
                parts += rng.parts if isinstance(rng, MergedPadding) else [(source[axis], rng)]
            out[sized[0]] = MergedPadding(tuple(parts))
            continue
        if len(group) == 1 and isinstance(pads[group[0]], MergedPadding):  # split back
            splits = _split_back(pads[group[0]], [target[t] for t in sized])
            if splits is not None:
                out.update({t: rng for t, rng in zip(sized, splits) if rng is not None})
                continue
        rng = pads[group[0]]
        what = (f"the merged partially filled tile dims {rng.names}" if isinstance(rng, MergedPadding)
                else f"the partially filled tile dim '{rng.dim.name}'")
        raise exc.UnsupportedOperation(
            f"reshape {list(source)} -> {list(target)} splits {what} other than back into its "
            "parts, or regroups it with others; pick block sizes that divide the dims, or merge "
            "whole tile dims and split them back as they were.",
            node.location,
        )
    return out


def _same_axis(source: tuple, target: tuple, axis: int) -> int | None:
    """The target axis that is `axis` itself (same size, same elements before it)."""
    before = _prod(source[:axis])
    for j, size in enumerate(target):
        if size == source[axis] and _prod(target[:j]) == before:
            return j
    return None


def _split_back(merged: MergedPadding, sizes: list[int]) -> list | None:
    """The ranges of `sizes` if they regroup the merged parts (each a run of whole parts)."""
    ranges = []
    parts = [(size, rng) for size, rng in merged.parts if size != 1 or rng is not None]  # unit parts hold no lanes
    for size in sizes:
        run = []
        while parts and _prod(s for s, _ in run) < size:
            run.append(parts.pop(0))
        if _prod(s for s, _ in run) != size:
            return None
        padded = [rng for _, rng in run if rng is not None]
        if len(run) == 1:
            ranges.append(run[0][1])
        elif padded:
            ranges.append(MergedPadding(tuple(run)))
        else:
            ranges.append(None)
    return ranges if not parts else None


def _reshape_groups(source: tuple, target: tuple) -> list[tuple[list[int], list[int]]]:
    """Split a reshape into runs of source and target axes with equal element counts;
    unit axes join the run before them."""
    groups = []
    i = j = 0
    while i < len(source) or j < len(target):
        sources, targets = [], []
        size_s = size_t = 1
        if i < len(source):
            size_s, i = source[i], i + 1
            sources.append(i - 1)
        if j < len(target):
            size_t, j = target[j], j + 1
            targets.append(j - 1)
        while size_s != size_t:
            if size_s < size_t and i < len(source):
                size_s, i = size_s * source[i], i + 1
                sources.append(i - 1)
            elif size_t < size_s and j < len(target):
                size_t, j = size_t * target[j], j + 1
                targets.append(j - 1)
            else:
                break
        while i < len(source) and source[i] == 1 and not (j < len(target) and target[j] == 1):
            sources.append(i)
            i += 1
        while j < len(target) and target[j] == 1 and not (i < len(source) and source[i] == 1):
            targets.append(j)
            j += 1
        groups.append((sources, targets))
    return groups


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


def _subview_padding(node: Node, pads: Padded, needs_mask) -> Padded:
    """A narrowing read keeps the padding of the axes it keeps whole; a run of a tile is
    padded past that tile's end. Positions a run or index keeps are valid: plan/subviews.py
    refuses any read it cannot prove lies in its block's valid part."""
    out: Padded = {}
    src_axis = out_axis = 0
    for item in node.kwargs["index"]:
        if isinstance(item, NewAxis):
            out_axis += 1
            continue
        if isinstance(item, FullSlice):
            if src_axis in pads:
                out[out_axis] = pads[src_axis]
            out_axis += 1
        elif isinstance(item, Run):
            if item.dim is not None and needs_mask(item.dim):
                out[out_axis] = needs_mask(item.dim)
            out_axis += 1
        src_axis += 1
    return out


def _pad(node: Node, pads: Padded) -> Padded:
    """F.pad keeps the padding of the axes it does not widen. Fill lanes added to an axis that
    holds a partial tile's padding would follow that padding, not the tile's valid lanes (torch
    puts them right after the real elements), so that is refused."""
    for axis, (before, after) in enumerate(node.kwargs["widths"]):
        if (before or after) and axis in pads:
            rng = pads[axis]
            which = rng.names if isinstance(rng, MergedPadding) else f"'{rng.dim.name}'"
            raise exc.UnsupportedOperation(
                f"F.pad along axis {axis}, which tile {which} may fill only partly (its last tile is "
                "partial): the fill would land after the tile's padding, not after its elements. Pad "
                "an axis read whole (':' or a static slice), or pick a block size that divides the "
                "dim.", node.location)
    return dict(pads)


# Views that move padded axes; BROADCAST views (expand, identity) pad like elementwise ops.
_VIEW_PADDING = {ViewRule.PERMUTE: _permute, ViewRule.RESHAPE: _reshape, ViewRule.SUBSCRIPT: _getitem,
                 ViewRule.PAD: _pad}


def _prod(values) -> int:
    result = 1
    for v in values:
        result *= v
    return result


__all__ = ["plan_masks", "FullSlice", "NewAxis"]
