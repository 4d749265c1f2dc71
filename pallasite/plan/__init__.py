"""Decisions: grid, memory placement, block shapes, masks, loop strategies, VMEM — one plan per config."""
from .build import build_plan
from .plans import (
    Access, AxisBlock, BlockKind, CarriedMask, Direction, GridAxis, InPlaceUpdate, KernelPlan, LoopPlan, Mask,
    Memory, Operand, PallasCallPlan, PlanTarget, Scratch, ScratchKind, Semantics, StoreMask, Stream, TileRange,
)

__all__ = [
    "Access", "AxisBlock", "BlockKind", "CarriedMask", "Direction", "GridAxis", "InPlaceUpdate", "KernelPlan",
    "LoopPlan", "Mask", "Memory", "Operand", "PallasCallPlan", "PlanTarget", "Scratch", "ScratchKind",
    "Semantics", "StoreMask", "Stream", "TileRange", "build_plan",
]
