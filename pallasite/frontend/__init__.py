"""Python source + argument signature -> kernel IR."""
from .tracer import ArgSpec, Tracer

__all__ = ["ArgSpec", "Tracer"]
