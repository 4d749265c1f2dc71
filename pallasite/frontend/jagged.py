"""`hl.jagged_tile(lengths)`: Helion's ragged inner loop, traced.

`for tile_k in hl.jagged_tile(lengths)` under a tile `tile_b` of rows, `lengths` a
vector over tile_b (each row's own length), is `for tile_k in hl.tile(0, lengths.amax())`
whose accesses (hl.load/hl.store and plain subscripts of kernel tensors) are masked where
a lane's jagged position is past its row's length: a masked load reads 0 there, a masked
store writes nothing, as Helion's implicit mask does. The mask of an access is
`tile_k.index < lengths` laid along the two axes of its result that tile_k and tile_b
index; those axes are found by the padding analysis's propagation
(`plan/masks.py:tile_axes`) over the nodes recorded so far (an index such as
`(starts[:, None] + tile_k.index[None, :])[:, :, None] * m + tile_m.index[None, None, :]`
has tile_b on axis 0 and tile_k on axis 1). An access that tile_k indexes but tile_b does
not (unless the lengths hold one row) has no mask to give: an error says so.

Each decision is recorded in the IR (`KernelIR.jagged_sites`, by the statement's line
and column and the access's order in it), where reference mode reads it back, so both
mask the same accesses along the same axes (reference/runner.py).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

from .. import exc
from ..ir import JaggedMask
from ..ir.index_forms import splice_tile_tuples
from ..plan.masks import tile_axes
from ..language.memory_ops import build_mask
from .proxies import DeviceTensor, TileProxy


class JaggedLoops:
    """The `hl.jagged_tile` loops around the statement being traced, and the decisions
    taken for the accesses inside them."""

    def __init__(self, recorder: Any):
        self.recorder = recorder
        self.loops: list[tuple[Any, int | None, DeviceTensor]] = []  # (tile_k's dim, row dim id, lengths)
        self.sites: dict[tuple[int, int, int], JaggedMask] = {}
        self.dim_ids: set[int] = set()  # every hl.jagged_tile loop's dim traced so far
        self._statement: tuple[int, int] = (0, 0)
        self._ordinal = 0
        self._inside_access = 0

    def enter_statement(self, stmt: Any) -> None:
        self._statement, self._ordinal = (stmt.lineno, stmt.col_offset), 0

    @contextlib.contextmanager
    def loop(self, dim: Any, lengths: Any) -> Iterator[None]:
        """The body of `for tile_k in hl.jagged_tile(lengths)`, tile_k over `dim`."""
        if not isinstance(lengths, DeviceTensor) or len(lengths.value.shape) != 1 \
                or lengths.value.dtype.is_floating_point:
            raise exc.UnsupportedOperation(
                "hl.jagged_tile(lengths) takes a 1-D integer vector over a tile of rows (each row's length, "
                f"e.g. offsets[tile_b.index + 1] - offsets[tile_b]), got {_describe(lengths)}.", self.recorder.location)
        axes = tile_axes(self._recorded(), {d.id for d in self.recorder.active_dims()}).get(lengths.value.id, {})
        row = axes.get(0)
        if row is None and lengths.value.shape != (1,):
            raise exc.UnsupportedOperation(
                "hl.jagged_tile(lengths): the lengths must be a vector over a tile of the enclosing loop's rows "
                "(read at that tile, e.g. offsets[tile_b.index + 1] - offsets[tile_b]); this one is indexed by no "
                "tile, so no access could say which row a lane belongs to.", self.recorder.location)
        self.loops.append((dim, row, lengths))
        self.dim_ids.add(dim.id)
        try:
            yield
        finally:
            self.loops.pop()

    @property
    def active(self) -> bool:
        """Whether an access now is inside jagged loops and not already inside hl.load/hl.store."""
        return bool(self.loops) and not self._inside_access

    @contextlib.contextmanager
    def access(self) -> Iterator[None]:
        """An hl.load/hl.store applying its mask: the subscript inside it is not masked again."""
        self._inside_access += 1
        try:
            yield
        finally:
            self._inside_access -= 1

    def mask(self, key: tuple, rank: int) -> Any:
        """The mask of an access `tensor[key]` (tensor of `rank` dims) inside jagged loops,
        as a bool device value over its result's axes, or None (no jagged loop around it,
        or none whose tile indexes it)."""
        if not self.loops or self._inside_access:
            return None
        site = (*self._statement, self._ordinal)
        self._ordinal += 1
        axes = self._result_axes(key, rank)
        parts = []
        for position, (dim, row, lengths) in enumerate(self.loops):
            k_axis = next((axis for axis, found in enumerate(axes) if found == dim.id), None)
            if k_axis is None:
                continue
            r_axis = next((axis for axis, found in enumerate(axes) if found == row), None) if row is not None else None
            if r_axis is None and lengths.value.shape != (1,):
                raise exc.UnsupportedOperation(
                    f"This access inside hl.jagged_tile over '{dim.name}' is indexed by {dim.name} but not by the "
                    "rows its lengths are over, so its lanes cannot be masked by their row's length. Index it with "
                    "both (e.g. hl.load(x, [(starts[:, None] + tile_k.index[None, :]) * m + ...])), or read it "
                    "outside the jagged loop.", self.recorder.location)
            parts.append((position, r_axis, k_axis))
        if not parts:
            return None
        decision = JaggedMask(len(axes), tuple(parts))
        earlier = self.sites.setdefault(site, decision)
        if earlier != decision:
            raise exc.UnsupportedOperation(
                "This access inside hl.jagged_tile is traced twice (a Python loop around it) with its jagged "
                "axes in different places; write the two accesses apart.", self.recorder.location)
        loops = [(TileProxy(self.recorder, dim), lengths) for dim, _, lengths in self.loops]
        return build_mask(decision, loops)

    def _result_axes(self, key: tuple, rank: int) -> list[int | None]:
        """Per axis of `tensor[key]`'s result, the id of the tile dim indexing it (None: none)."""
        key = splice_tile_tuples(key, lambda item: isinstance(item, TileProxy))
        items = list(key) if isinstance(key, (tuple, list)) else [key]
        vectors = [item for item in items if isinstance(item, DeviceTensor) and item.value.shape]
        if len(vectors) > 1:
            raise exc.UnsupportedOperation(
                "Inside hl.jagged_tile, an access through several index tensors (paired, as torch pairs "
                "them) is not supported; combine them into one index (a flat view's index).", self.recorder.location)
        provenance = tile_axes(self._recorded(), self._tracked()) if vectors else {}
        consumed = sum(1 for item in items if item is not None and item is not Ellipsis)
        axes: list[int | None] = []
        for item in items:
            if item is Ellipsis:
                axes += [None] * (rank - consumed)
            elif isinstance(item, TileProxy):
                axes.append(item.dim.id)
            elif isinstance(item, DeviceTensor) and item.value.shape:
                found = provenance.get(item.value.id, {})
                axes += [found.get(axis) for axis in range(len(item.value.shape))]
            elif item is None or isinstance(item, slice):
                axes.append(None)
        if not any(item is Ellipsis for item in items):
            axes += [None] * (rank - consumed)  # the trailing axes the key leaves whole
        return axes

    def _tracked(self) -> set[int]:
        dims = {dim.id for dim, _, _ in self.loops}
        return dims | {row for _, row, _ in self.loops if row is not None}

    def _recorded(self) -> list:
        """The nodes recorded so far in the open device loop, enclosing bodies first."""
        return [node for body in self.recorder.open_bodies() for node in body]


def _describe(value: Any) -> str:
    if isinstance(value, DeviceTensor):
        return f"a {list(value.value.shape)} {str(value.value.dtype).replace('torch.', '')} value"
    return type(value).__name__
