"""Rewrite the generated-code samples in this folder (tests/test_generated_code.py checks them)."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_generated_code import DOCS, attention_code  # noqa: E402

(DOCS / "attention_fori_loop.py").write_text(attention_code("fori_loop"))
print(f"wrote {DOCS / 'attention_fori_loop.py'}")
