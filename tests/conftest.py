"""Test setup: TPU interpret mode with race detection, generated code in a temp dir."""
from __future__ import annotations

import os

os.environ.setdefault("PALLASITE_INTERPRET_DETECT_RACES", "1")
os.environ.setdefault("PALLASITE_CODE_DIR", os.path.join(os.path.dirname(__file__), "..", ".pallasite_code", "tests"))
# The suite compiles hundreds of kernels: each runs its default config, not an autotuning
# search (tests of the tuner pass autotune_effort explicitly), and any tuned config is
# cached in a throwaway directory rather than the user's ~/.cache/pallasite.
os.environ.setdefault("PALLASITE_AUTOTUNE_EFFORT", "none")
os.environ.setdefault("PALLASITE_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".pallasite_code",
                                                          "autotune_cache"))
