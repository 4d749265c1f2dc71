"""The names generated code gives tensors the user named otherwise, and back.

A tensor a function argument closes over is the host-function parameter
`<parameter>__<variable>` (`epilogue__bias`); the tensors of a list or tuple argument are
`<parameter>__item_<i>` (Helion's `bufs: list[torch.Tensor]`: `bufs__item_1`). Errors speak
the user's spelling of the latter (`as_written`: `bufs[1]`), applied once, where every
`exc.PallasiteError` takes its message.
"""
from __future__ import annotations

import re

SEPARATOR = "__"
_ITEM = "item_"
_ITEM_NAME = re.compile(r"\b([A-Za-z_]\w*?)" + SEPARATOR + _ITEM + r"(\d+)\b")


def captured_name(parameter: str, variable: str) -> str:
    """The host-function parameter of a tensor `variable` the function argument `parameter`
    closes over."""
    return f"{parameter}{SEPARATOR}{variable}"


def item_name(parameter: str, index: int) -> str:
    """The host-function parameter of item `index` of the list or tuple argument `parameter`."""
    return captured_name(parameter, f"{_ITEM}{index}")


def as_written(text: str) -> str:
    """`text` with each list item's parameter name spelled as the user wrote it (`bufs[1]`)."""
    return _ITEM_NAME.sub(r"\1[\2]", text)
