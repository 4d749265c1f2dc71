"""What the kernel emitter and the loop emitters share without importing each other:
the names one inner loop made, and fill constants typed for a dtype."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .lowering import literal


@dataclass
class LoopFrame:
    """The generated names of one inner loop, made by its strategy's emitter."""

    counters: dict[int, str]  # dim id -> the variable (or constant text) counting the dim's tiles
    traced: bool = False  # counters are traced values (lax.fori_loop, pipeline step), not Python ints
    step: str | None = None  # the loop's step (stream copy builders take it)
    slot: str | None = None  # the double-buffer slot of the current step


def typed_fill(fill, dtype: torch.dtype) -> str:
    """A mask's fill (0, ±inf, ...) as a constant of `dtype` (an int dtype's extremes for ±inf)."""
    if dtype == torch.bool:  # -inf (a max's identity) is False, inf (a min's) True
        return literal(fill > 0 if fill in (float("inf"), float("-inf")) else bool(fill))
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        if fill == float("inf"):
            return str(info.max)
        if fill == float("-inf"):
            return str(info.min)
        return str(int(fill))
    return literal(float(fill))


def tile_count(k, dim) -> str:
    """How many tiles `dim` has: `cdiv(end - begin, block)` (a begin of 0 or a block of 1
    writes no arithmetic that does nothing; constants fold when the tree is tidied)."""
    from_zero = isinstance(dim.begin, int) and dim.begin == 0
    extent = k.render(dim.end) if from_zero else f"{k.render(dim.end)} - {k.render(dim.begin)}"
    if dim.block_size == 1:
        return extent
    return f"({extent} + {dim.block_size - 1}) // {dim.block_size}"
