"""Stable, readable Python names for generated code."""
from __future__ import annotations

import keyword


class NameTable:
    """Hands out unique identifiers derived from the user's names."""

    def __init__(self, reserved: tuple[str, ...] = ()):
        self._used: set[str] = set(reserved)

    def fresh(self, base: str) -> str:
        base = "".join(char if char.isalnum() or char == "_" else "_" for char in base or "v").strip("_") or "v"
        if base[0].isdigit() or keyword.iskeyword(base):
            base = f"v_{base}"
        name = base
        count = 1
        while name in self._used:
            name = f"{base}_{count}"
            count += 1
        self._used.add(name)
        return name
