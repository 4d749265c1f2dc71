"""IR + plan -> Pallas source text."""
from .module import generate_module

__all__ = ["generate_module"]
