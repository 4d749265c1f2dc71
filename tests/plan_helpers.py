"""Small helpers shared by tests: seeded inputs and the plan of a one-loop kernel."""
from __future__ import annotations

import torch

import pallasite


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def only_call(kernel, args, **config):
    """The plan of the kernel's single device loop."""
    (call,) = kernel.bind(tuple(args)).plan(pallasite.Config(**config) if config else None).calls
    return call


def names(operands) -> list[str]:
    return [operand.symbol.name for operand in operands]
