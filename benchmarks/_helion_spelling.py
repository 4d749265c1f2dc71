"""An example kernel's source in Helion's spelling, for running the same kernel under Helion.

pallasite's language is Helion's, so a kernel ports by renaming its imports:
``import pallasite`` becomes ``import helion`` (``pallasite.kernel`` and
``pallasite.Config`` are ``helion.kernel`` and ``helion.Config``) and
``pallasite.language`` becomes ``helion.language``. An example may also import one of
pallasite's test helpers (``from pallasite.testing import reference_rand``, which its
torch reference uses); Helion has no counterpart, and the kernel does not need it, so
such an import binds its names to None. Used by `compile_latency.py --vs-helion`.
"""
from __future__ import annotations

import re

# `from pallasite.X import a, b as c` for any X but the language: a helper outside the kernel.
_HELPER_IMPORT = re.compile(r"(?P<indent>[ \t]*)from pallasite\.(?P<module>(?!language\b)[\w.]+) import (?P<names>.*)")
_NAME = re.compile(r"\bpallasite\b")


def _bound_name(imported: str) -> str:
    """The name `a` or `b as c` binds."""
    return imported.split(" as ")[-1].strip()


def _unbind_helper(helper: re.Match) -> str:
    names = helper["names"].split("#")[0].strip()
    if names.startswith("(") or names.endswith("\\"):
        raise ValueError(f"{helper[0].strip()!r}: list a helper's names on one line")
    bound = " = ".join(_bound_name(item) for item in names.split(","))
    return f"{helper['indent']}{bound} = None  # from pallasite.{helper['module']} import {names}: not under Helion\n"


def to_helion(source: str) -> str:
    """`source` with pallasite's names spelled as Helion's (see the module docstring)."""
    lines = []
    for line in source.splitlines(keepends=True):
        helper = _HELPER_IMPORT.fullmatch(line.rstrip())
        lines.append(_unbind_helper(helper) if helper else _NAME.sub("helion", line))
    return "".join(lines)
