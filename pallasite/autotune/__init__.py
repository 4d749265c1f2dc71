"""Config space, search and the on-disk cache of winners."""
from .config_spec import BlockSizeSpec, ConfigSpec

__all__ = ["BlockSizeSpec", "ConfigSpec"]
