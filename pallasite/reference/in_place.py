"""`x op= v` and in-place methods on device values in reference mode.

`x += v` (an augmented assignment, in the kernel or in a helper it calls) rebinds x to
`x + v` in x's dtype, as torch's in-place update keeps it (`augmented_dtype`), after the
walker's check that no other live name, view or container would see the update
(`StatementWalker.check_in_place_update`, as the compiler checks). In-place methods
(`x.add_(v)`) are not device ops. torch hands both spellings to the mode as `add_`, so
in a helper the frame's running instruction tells them apart (`operator_symbol`).
"""
from __future__ import annotations

import ast
import dis
import os
import sys
from typing import Any, Callable

import torch

from .. import exc
from ..ir.ops import augmented_dtype
from . import int64, lanes

_IN_PLACE_OPERATORS = {
    "__ior__": "__or__", "__iand__": "__and__", "__ixor__": "__xor__",
    "__ilshift__": "__lshift__", "__irshift__": "__rshift__",
}
_AUGMENTED_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
                      ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<",
                      ast.RShift: ">>"}
# frames to look past for the user's helper: torch's and pallasite's own
_LIBRARIES = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def is_in_place(name: str) -> bool:
    """Whether a torch function mode's `name` updates its first operand in place."""
    return name in _IN_PLACE_OPERATORS or (name.endswith("_") and not name.startswith("_"))


def updated(name: str, args: tuple, kwargs: dict, runner: Any, device_call: Callable) -> Any:
    """The value `x op= v` gives x (an in-place method is refused)."""
    symbol = operator_symbol(runner)
    base = _IN_PLACE_OPERATORS.get(name, name.rstrip("_"))
    if symbol is None:
        raise exc.UnsupportedOperation(
            f"Tensor.{name} updates a value in place, which device code does not support; "
            f"write `x = x.{base}(...)` or `x = x + ...`.")
    runner.walker.check_in_place_update(args[0], symbol)
    target = args[0]
    with int64.in_place_update(target):  # torch keeps x's dtype: an int32 x wraps
        result = device_call(getattr(torch.Tensor, base), args, kwargs, runner)
    if not (isinstance(target, torch.Tensor) and isinstance(result, torch.Tensor)):
        return result
    cast = augmented_dtype(tuple(target.shape), target.dtype, tuple(result.shape), result.dtype, symbol,
                           partial=True)
    return result if cast is None else lanes.marked_as(result.to(cast), result)


def operator_symbol(runner: Any) -> str | None:
    """The operator of the `x op= v` running, None for an in-place method (`x.add_(v)`): the
    running statement's, else, in a helper function the kernel calls, the instruction its
    frame runs."""
    if runner.augmented:
        return _AUGMENTED_SYMBOLS.get(type(runner.walker.statement.op), "op")
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARIES):
        frame = frame.f_back
    if frame is None:
        return None
    instruction = next((i for i in dis.get_instructions(frame.f_code) if i.offset == frame.f_lasti), None)
    if instruction is not None and instruction.opname == "BINARY_OP" and instruction.argrepr.endswith("="):
        return instruction.argrepr[:-1]
    return None


__all__ = ["is_in_place", "operator_symbol", "updated"]
