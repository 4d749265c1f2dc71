"""Compile cache, launcher, torch<->JAX, interpret mode."""
from .kernel import BoundKernel, CompiledKernel, Kernel

__all__ = ["BoundKernel", "CompiledKernel", "Kernel"]
