"""Decisions: grid, memory placement, block shapes, masks, VMEM — one plan per config."""
from .build import build_plan
from .plans import (
    Access, AxisBlock, GridAxis, InPlaceUpdate, KernelPlan, Mask, Operand, PallasCallPlan,
)

__all__ = [
    "Access", "AxisBlock", "GridAxis", "InPlaceUpdate", "KernelPlan", "Mask", "Operand",
    "PallasCallPlan", "build_plan",
]
