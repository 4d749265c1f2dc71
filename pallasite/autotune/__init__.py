"""Config space, search and the on-disk cache of winners (see docs/design/autotuning.md)."""
from .config_spec import BlockSizeSpec, ConfigSpec, Gene
from .search import SearchResult, Trial, search

__all__ = ["BlockSizeSpec", "ConfigSpec", "Gene", "SearchResult", "Trial", "search"]
