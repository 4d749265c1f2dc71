"""What every reference-mode op checks of its operands, and the ops with no rule of their own.

`current_runner` is the run whose device call is being answered (set by `ops.device_call`),
so a message names the user's tensor as the compiled kernel's does.
"""
from __future__ import annotations

import contextvars
from typing import Any, Callable

import torch

from ..frontend.operands import whole_host_tensor_error
from . import lanes

current_runner: contextvars.ContextVar = contextvars.ContextVar("pallasite_reference_runner", default=None)


def check_operands(args: Any) -> None:
    for item in lanes.leaves(args):
        if isinstance(item, torch.Tensor) and not lanes.is_device(item) and item.ndim > 0:  # a 0-d one: its value
            runner = current_runner.get()
            raise whole_host_tensor_error(runner.name_of(item) if runner is not None else "x")


def generic(func: Callable, args: tuple, kwargs: dict) -> Any:
    """Any other op: torch's own semantics; lanes kept when the shape is kept."""
    result = func(*args, **kwargs)
    if not any(isinstance(r, torch.Tensor) for r in lanes.leaves(result)):
        return result  # shape queries, item(), bool(), ...
    check_operands((args, kwargs))
    first = next((t for t in lanes.leaves((args, kwargs)) if isinstance(t, torch.Tensor)), None)
    axes = lanes.of(first) if isinstance(result, torch.Tensor) and first is not None and \
        result.shape == first.shape else ()
    return lanes.finish(result, axes)
