"""What the supported-forms page says of each way to index a tensor.

Each index item type of `ir/nodes.py` (`TileSlice`, `GatherIndex`, ...) carries its
`IndexForm` as the class attribute `FORM`, and the frontend lists the forms made of several
items (`frontend/indexing.py:SUBSCRIPT_FORMS`) and those it refuses (`RefusedForm`s,
`frontend/indexing.py:REFUSED_FORMS`) beside the code that recognizes or refuses them.
`pallasite/supported_forms.py` renders them; `tests/test_supported_forms.py` fails for an
item type without its `FORM`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch


@dataclass(frozen=True)
class IndexForm:
    """One way to index a tensor in device code: a name, how a user writes it (each example
    a complete subscript, in backticks on the page) and what to know about it."""

    name: str
    examples: tuple[str, ...]
    note: str

    def __post_init__(self) -> None:
        if not (self.name and self.examples and self.note):
            raise ValueError(f"index form {self.name!r}: a name, at least one example and a note are required")


@dataclass(frozen=True)
class RefusedForm:
    """A way to index a tensor that device code refuses: why, and what to write instead.

    Each example is a statement of the body of `for tile in hl.tile(x.size(0)):` after
    `blk = x[tile, :]; v = blk`, in a kernel of `x`, `out` (2-D floats), `idx`, `idx_a`,
    `idx_b` (1-D int32), `idx2d` (2-D int32) and `mask` (1-D bool);
    `tests/test_supported_forms.py` checks each raises `exc.IndexingError` there."""

    name: str
    examples: tuple[str, ...]
    why: str
    instead: str

    def __post_init__(self) -> None:
        if not (self.name and self.examples and self.why and self.instead):
            raise ValueError(f"refused form {self.name!r}: a name, examples, why and instead are required")


NARROW_INDEX_DTYPES = (torch.uint8, torch.int8, torch.int16)  # torch indexes with none of them


def narrow_index(name: str, dtype: torch.dtype) -> str:
    """The refusal of an index tensor torch does not index with (uint8 is a boolean mask to torch,
    int8 and int16 no index at all); the tracer raises it for one index or several paired."""
    return (f"{name}[...]: a {str(dtype).removeprefix('torch.')} index: torch indexes with int32 or int64 "
            "tensors (a uint8 one is a boolean mask, an int8 or int16 one is refused); cast it with .int().")


def moved_beside_pairs(name: str) -> str:
    """The refusal of a moved tile (`tile + c`, an axis) in a subscript whose index tensors
    torch pairs: where torch would put the paired dims is defined for slices, not for a tile
    that reads 0 outside the tensor. The tracer and reference mode both raise it."""
    return (f"{name}[...]: this subscript holds a moved tile (`tile + c`) beside several index tensors, "
            "which torch pairs element by element; read the moved tile's block first (`blk = "
            f"{name}[..., tile + c, ...]` with slices elsewhere), then index the block.")


def unbroadcastable_pairs(name: str, shapes: list) -> str:
    """The refusal of index tensors whose shapes do not broadcast together (torch pairs them
    after broadcasting); the tracer and reference mode both raise it."""
    return (f"{name}[...]: its index tensors have shapes {', '.join(str(list(s)) for s in shapes)}, which do not "
            "broadcast together; torch pairs index tensors element by element after broadcasting them, so "
            "their shapes must broadcast (e.g. idx_a[:, None] and idx_b[None, :] for every pair).")


def moved_scatter(access: str, tile: str, offset: int) -> str:
    """The refusal of a scatter at a moved tile (`out[idx[t], tn + 1] = v`); the tracer's
    planner and reference mode both raise it."""
    back = f"{tile} - {offset}" if offset > 0 else f"{tile} + {-offset}"
    return (f"{access}: a scatter at a moved tile ({tile} {'+' if offset > 0 else '-'} {abs(offset)}) is not "
            f"supported; scatter at {tile} itself and move the value instead (read it at {back} where it "
            "is loaded).")


def splice_tile_tuples(key: Any, is_tile: Callable[[Any], bool]) -> Any:
    """A subscript key with each tuple of tiles in it replaced by its tiles.

    `hl.tile([n])` yields a 1-tuple of tiles and Helion programs index with it as it
    stands (`for tile in hl.tile([n]): out[tile, :] = ...`): the tuple stands for its
    tiles, one axis each. torch gives a tuple inside a subscript no meaning for slices
    (a tile reads as one), so nothing else is meant. The tracer and reference mode both
    splice with this, by their own tile type (`is_tile`)."""
    if not isinstance(key, (tuple, list)):  # hl.load/hl.store take their index as a list
        return key
    if not any(_tile_tuple(item, is_tile) for item in key):
        return key
    items: list = []
    for item in key:
        items += list(item) if _tile_tuple(item, is_tile) else [item]
    return type(key)(items)


def _tile_tuple(item: Any, is_tile: Callable[[Any], bool]) -> bool:
    return isinstance(item, tuple) and bool(item) and all(is_tile(part) for part in item)
