"""The text of a merged lane range (`plan.MergedPadding`): the valid lanes of an index
tile's flat vector (`indices[tm, tn].reshape(-1)`).

Lane l of a vector merged from parts of sizes (s_0, ..., s_k), outermost first, is at
position (l // stride_i) % s_i of part i (stride_i = s_{i+1} * ... * s_k); it is valid
where every part with a range has its position inside that range. The valid lanes are a
rectangle, not a prefix: the index checks read them as a condition, per-row DMA walks
them as steps 0 .. count-1 mapped onto their lanes.
"""
from __future__ import annotations

from ..plan.plans import MergedPadding, TileRange
from .lowering import literal


def _strides(merged: MergedPadding) -> list[int]:
    strides, stride = [], 1
    for size in reversed(merged.sizes):
        strides.append(stride)
        stride *= size
    return strides[::-1]


def _position(lane: str, stride: int, size: int, lanes: int) -> str:
    """Part position of `lane` (`//` and `%` group left to right)."""
    text = lane if stride == 1 else f"{lane} // {stride}"
    return text if stride * size >= lanes else f"{text} % {size}"


def merged_condition(emitter, shape: tuple, axis: int, merged: MergedPadding) -> str:
    """Emit a boolean array of `shape`: which lanes along `axis` are valid; returns its name."""
    lanes = emitter.names.fresh("lane")
    emitter.emit(f"{lanes} = lax.broadcasted_iota(jnp.int32, {literal(tuple(shape))}, {axis})")
    total = shape[axis]
    conditions = []
    for stride, (size, rng) in zip(_strides(merged), merged.parts):
        if rng is None:
            continue
        begin, end = tile_bounds(emitter, rng)
        conditions.append(f"({begin} + {_position(lanes, stride, size, total)} < {end})")
    names = "_".join(rng.dim.name for _, rng in merged.parts if rng is not None)
    name = emitter.names.fresh(f"{names}_valid")
    emitter.emit(f"{name} = {' & '.join(conditions)}")
    return name


def tile_bounds(emitter, rng: TileRange) -> tuple[str, str]:
    """The current tile's begin and end (its dim's end, not clamped to the block)."""
    return emitter.render(rng.dim.begin_value), emitter.render(rng.dim.end)


def valid_steps(emitter, table: str, merged: MergedPadding) -> tuple[str, callable]:
    """Per-row DMA over a merged range: emit each part's count of valid positions and their
    product; return the product's name and a function from a step (0 .. product - 1, the
    valid lanes in order) to the text of its lane."""
    counts = []
    for size, rng in merged.parts:
        if rng is None:
            counts.append(str(size))
            continue
        name = emitter.names.fresh(f"{rng.dim.name}_count")
        emitter.emit(f"{name} = {emitter.range_count(rng)}")
        counts.append(name)
    total = emitter.names.fresh(f"{table}_lanes")
    emitter.emit(f"{total} = {' * '.join(counts)}")
    strides = _strides(merged)

    def lane_of(step: str) -> str:
        terms = []
        for i, (count, stride) in enumerate(zip(counts, strides)):
            inner = counts[i + 1:]
            digit = step if not inner else f"{step} // " + (inner[0] if len(inner) == 1 else f"({' * '.join(inner)})")
            if i > 0:
                digit = f"{digit} % {count}"  # // and % group left to right
            terms.append(digit if stride == 1 else f"({digit}) * {stride}")
        return " + ".join(terms)

    return total, lane_of


__all__ = ["merged_condition", "tile_bounds", "valid_steps"]
