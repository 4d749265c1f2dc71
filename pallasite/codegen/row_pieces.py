"""Copying a number of rows known only when the kernel runs: a DMA's length is static, so
one copy of 2^b rows per set bit b of the count, at the offset of the bits above it. A
Python loop over the bits, unrolled when JAX traces the kernel; each copy is waited
before the next starts."""
from __future__ import annotations

from typing import Callable


def emit_row_pieces(k, count: str, bits: int, copy_of: Callable[[str, str], str], name: str) -> None:
    """Copy rows [0, `count`) of a window (`count` < 2^`bits`); `copy_of(row, size)` is the
    descriptor of rows [row, row + size)."""
    sizes = ", ".join(str(1 << bit) for bit in reversed(range(bits)))
    size = k.names.fresh("size")  # a kernel-level name: fresh, so it shadows nothing
    with k.block(f"for {size} in ({sizes}{',' if bits == 1 else ''}):"):
        with k.block(f"@pl.when(({count} & {size}) != 0)\ndef _write_back_{name}():"):
            k.emit(f"row = {count} // (2 * {size}) * (2 * {size})", comment="the rows of the higher bits come first")
            k.emit(f"copy = {copy_of('row', size)}")
            k.emit("copy.start()")
            k.emit("copy.wait()")
