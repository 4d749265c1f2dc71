"""TPU block-shape rules: which block sizes Mosaic can tile for a tensor axis.

One place answers "is this block size legal on this axis", for validation
(`plan.memory`) and for choosing defaults and search spaces (`autotune`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..ir.sizes import SymbolicSize, same_size

# The most 32-bit elements one SMEM operand or copy holds (tables, index vectors, worklists).
SMEM_MAX_ELEMENTS = 16384

LANES = 128
SUBLANES = 8


@dataclass(frozen=True)
class AxisRule:
    """The tiling rule for a block along one axis of one tensor."""

    tensor: str
    axis: int
    rank: int
    array_dim: int
    dtype: torch.dtype

    @property
    def kind(self) -> str:
        if self.axis == self.rank - 1:
            return "lane_1d" if self.rank == 1 else "lane"
        if self.axis == self.rank - 2:
            return "sublane"
        return "free"

    def allows(self, block: int) -> bool:
        # The alignment rule first: a whole-dim block is legal for one size only, so with
        # static_shapes=False asking it first would tie the variant to that size.
        if same_size(block, self.array_dim):
            return True
        return self._aligned(block) or block == self.array_dim

    def round_up(self, length: int) -> int:
        """The smallest legal block length of at least `length`. A dynamic length
        (static_shapes=False) rounds up to the alignment quantum, legal for every size."""
        if isinstance(length, SymbolicSize):
            quantum = {"lane": LANES, "sublane": SUBLANES, "lane_1d": LANES * SUBLANES}.get(self.kind, 1)
            return -(-length // quantum) * quantum
        while not self.allows(length):
            length += 1
        return length

    def _aligned(self, block: int) -> bool:
        kind = self.kind
        if kind == "lane":
            return block % LANES == 0
        if kind == "sublane":
            return block % SUBLANES == 0
        if kind == "lane_1d":
            packing = max(1, 4 // self.dtype.itemsize)
            return block % (LANES * SUBLANES) == 0 or (
                block >= LANES * packing and block & (block - 1) == 0
            )
        return True

    def describe(self) -> str:
        kind = self.kind
        if kind == "lane":
            need = f"a multiple of {LANES}"
        elif kind == "sublane":
            need = f"a multiple of {SUBLANES}"
        elif kind == "lane_1d":
            packing = max(1, 4 // self.dtype.itemsize)
            need = f"a multiple of {LANES * SUBLANES} or a power of two >= {LANES * packing}"
        else:
            need = "any size"
        which = {"lane": "last", "lane_1d": "only", "sublane": "second-to-last"}.get(kind, "a leading")
        return (
            f"axis {self.axis} of '{self.tensor}' ({which} dim, size {self.array_dim}) "
            f"needs a block that is {need}, or exactly {self.array_dim}"
        )


def sublane_tile(dtype: torch.dtype) -> int:
    """The rows of one native (sublane, lane) tile of `dtype`: 8 of 32-bit values, 16 of
    16-bit, 32 of 8-bit (narrower values pack into a sublane)."""
    return SUBLANES * max(1, 4 // dtype.itemsize)


def aligned_concatenation(shapes, dtype: torch.dtype, dim: int) -> bool:
    """Whether Mosaic's concatenate takes pieces of `shapes` along `dim`: along a leading
    axis always; along the lanes pieces of whole 128-lane tiles; along the sublanes pieces
    of whole sublane tiles of the dtype (8 rows of 32-bit values, 16 of 16-bit, 32 of
    8-bit); bools, whose layout is Mosaic's own, never along those two. The `cat` lowering
    builds the other cases by selects (codegen/lowering.py), and the cost model charges them."""
    rank = len(shapes[0])
    if dim < rank - 2:
        return True
    if dtype == torch.bool:
        return False
    tile = LANES if dim == rank - 1 else sublane_tile(dtype)
    return all(int(shape[dim]) % tile == 0 for shape in shapes)
