"""Compile cache, launcher, torch<->JAX, interpret mode."""
from .kernel import BoundKernel, CompiledKernel, Kernel, release_compiled_code

__all__ = ["BoundKernel", "CompiledKernel", "Kernel", "release_compiled_code"]
