"""pallasite's version: one definition, below every stage that records it (the autotune cache key)."""
__version__ = "0.1.0"
