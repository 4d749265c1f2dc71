"""Test setup: TPU interpret mode with race detection, generated code in a temp dir."""
from __future__ import annotations

import os

os.environ.setdefault("PALLASITE_INTERPRET_DETECT_RACES", "1")
os.environ.setdefault("PALLASITE_CODE_DIR", os.path.join(os.path.dirname(__file__), "..", ".pallasite_code", "tests"))
