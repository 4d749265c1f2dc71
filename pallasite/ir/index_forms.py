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
