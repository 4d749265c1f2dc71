"""`.item()` of an argument's element in host code: a constant of the variant, read from data.

`N = offsets[-1].item()` (Helion's jagged softmax sizes its output with it) reads one element
of an argument on the host, as torch does (a device sync). The value becomes a constant of
the compiled variant, as an `hl.specialize`d scalar does: the variant's key holds it
(`ArgSpec.items`, filled by `runtime/kernel.py:Kernel._arg_specs`), so each call reads the
element again and a new value compiles a new variant. The first trace does not know which
elements the kernel reads: it raises `ItemNeeded`, the kernel adds the element to the ones
it reads and binds again. Only elements of a tensor argument chosen by int subscripts are
read this way (`t[-1]`, `t[i, j]`, `t[2][3]`, numbers i, j), and only integers (counts and
offsets; a float such as a threshold would compile a variant per value: device code reads
it, `t[()]`); `.item()` of a value host code computed stays refused.
"""
from __future__ import annotations

from typing import Any

import jax

from .. import exc
from ..ir import TensorSymbol
from ..ir.sizes import pin


class ItemNeeded(Exception):
    """The trace read `argument[index].item()`, whose value the argument specs lack (not a
    `PallasiteError`: `Kernel._bind` catches it and binds again with the element read)."""

    def __init__(self, argument: str, index: tuple[int, ...], location: Any = None):
        super().__init__(f"{argument}{list(index)}.item()")
        self.argument, self.index, self.location = argument, index, location  # location: the reading line


def item_value(host: Any, symbol: TensorSymbol, items: dict, hint: str) -> Any:
    """The value of `symbol.item()` (a 0-d host tensor) from `items` ((argument, index) ->
    value); `ItemNeeded` when it is an argument's element not read yet; refused (with `hint`)
    when it is not an argument's element."""
    element = element_of_argument(host, symbol)
    what = (f"{element[0]}{list(element[1])}" if element is not None
            else "a value host code computes" if symbol.name.startswith("_t") else f"'{symbol.name}'")
    if symbol.dtype.is_floating_point:  # a threshold or a scale: a runtime value, read in device code
        raise exc.UnsupportedOperation(
            f"Tensor.item of {what} in host code: an integer element of an argument (a count, an offset) "
            "is read on the host as a constant of the compiled variant, but a float one would compile a "
            "new variant for every value." + hint)
    if element is None:
        raise exc.UnsupportedOperation(
            f"Tensor.item of {what} in host code: only an element of a tensor argument chosen by numbers "
            "(`offsets[-1].item()`) is read on the host, as a constant of the compiled variant." + hint)
    if element not in items:
        raise ItemNeeded(*element, host.recorder.location)
    return items[element]


def element_of_argument(host: Any, symbol: TensorSymbol) -> tuple[str, tuple[int, ...]] | None:
    """(argument name, index) when `symbol` is an element of a tensor argument reached by
    int subscripts only, else None."""
    index: list[int] = []
    for step in host.view_chain(symbol):
        key = step.kwargs.get("key")
        key = key if isinstance(key, tuple) else (key,)
        if step.op != "getitem" or not all(isinstance(k, int) and not isinstance(k, bool) for k in key):
            return None
        index[:0] = [int(pin(k)) for k in key]
    root = host.root_of(symbol)
    return (root.name, tuple(index)) if root.origin == "arg" else None


def read_element(value: Any, index: tuple[int, ...], name: str, location: Any = None) -> Any:
    """`value[index].item()` of a call's argument, for the variant key; a clear error (at
    `location`, the host line that reads it) when the argument has no data to read."""
    if getattr(value, "device", None) is not None and getattr(value.device, "type", None) == "meta":
        raise exc.KernelArgumentError(
            f"The kernel reads {name}{list(index)}.item() in host code, but '{name}' is on the meta device: "
            "it has no value to read. Pass a CPU tensor.", location)
    try:
        return value[index].item()
    except IndexError:
        raise exc.KernelArgumentError(
            f"The kernel reads {name}{list(index)}.item() in host code, past the end of '{name}' "
            f"(shape {list(value.shape)}).", location) from None
    except (TypeError, jax.errors.ConcretizationTypeError) as error:  # a traced jax value (inside jax.jit)
        raise exc.KernelArgumentError(
            f"The kernel reads {name}{list(index)}.item() in host code, and '{name}' has no concrete value "
            f"here ({type(error).__name__}: inside jax.jit its values are traced); pass the number as an "
            "argument instead.", location) from None
