"""Decisions: grid, memory placement, block shapes, masks, VMEM — one plan per config."""
from .build import build_plan
from .plans import (
    Access, AxisBlock, GridAxis, InnerLoopPlan, InPlaceUpdate, KernelPlan, Mask, Operand,
    PallasCallPlan, PlanTarget, Scratch, Stream,
)

__all__ = [
    "Access", "AxisBlock", "GridAxis", "InnerLoopPlan", "InPlaceUpdate", "Scratch", "Stream", "KernelPlan", "Mask", "Operand",
    "PallasCallPlan", "PlanTarget", "build_plan",
]
