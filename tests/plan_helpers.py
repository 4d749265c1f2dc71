"""Small helpers shared by tests: seeded inputs, the plan of a one-loop kernel, a matmul kernel."""
from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def only_call(kernel, args, **config):
    """The plan of the kernel's single device loop."""
    (call,) = kernel.bind(tuple(args)).plan(pallasite.Config(**config) if config else None).calls
    return call


def names(operands) -> list[str]:
    return [operand.symbol.name for operand in operands]


# A matmul with an inner K loop and no config of its own (the default config applies).
@pallasite.kernel
def matmul(x, y):
    m, k = x.size()
    _, n = y.size()
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc
    return out


@pallasite.kernel
def matmul_bias_steps(x, y, b):
    """A bias row added to the accumulator on every k step (loop-invariant, broadcast:
    `pallas_pre_broadcast` qualifies)."""
    m, k = x.size()
    _, n = y.size()
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        bias = b[tile_n]
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n]) + bias
        out[tile_m, tile_n] = acc
    return out


def add_kernel(**options):
    """An elementwise add, decorated with `options` (a fresh kernel per call)."""
    @pallasite.kernel(**options)
    def add(x, y):
        m, n = x.size()
        out = torch.empty_like(x)
        for tile_m, tile_n in hl.tile([m, n]):
            out[tile_m, tile_n] = x[tile_m, tile_n] + y[tile_m, tile_n]
        return out
    return add
