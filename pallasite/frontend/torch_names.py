"""Which spelling a torch callable is: functions, Tensor methods, F, torch.special and linalg.vector_norm.

The names come from the op registry (`ir/ops`): every spelling of an op,
every composite and every torch allocation, looked up on torch.special, torch.nn.functional,
torch.Tensor and torch.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ..ir import ops


# Where the spellings are looked up (`callables_of` lists torch's first); torch.linalg for the
# names listed only (its `norm` is a matrix norm beside torch.norm's vector one)
_OWNERS: tuple[tuple[Any, frozenset[str] | None], ...] = (
    (torch.linalg, frozenset({"vector_norm"})), (torch.special, None), (F, None), (torch.Tensor, None), (torch, None))


def callables_of(name: str) -> list[Any]:
    """The torch callables a registry spelling `name` stands for (torch's first)."""
    found = []
    for owner, only in reversed(_OWNERS):
        fn = getattr(owner, name, None) if only is None or name in only else None
        if fn is not None and callable(fn):
            found.append(fn)
    return found


def _build() -> dict[Any, str]:
    table: dict[Any, str] = {}
    for name in [*ops.SPELLINGS, *ops.COMPOSITES, *ops.FACTORIES]:
        for fn in callables_of(name):
            table[fn] = name
    return table


_TABLE = _build()


def spelling_name(func: Any) -> str | None:
    """The registry spelling of a torch callable, or None if pallasite does not know it."""
    try:
        return _TABLE.get(func)
    except TypeError:  # unhashable
        return None


def display_name(func: Any) -> str:
    """`torch.foo` / `Tensor.foo` for error messages."""
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    if "<locals>" in qualname:  # torch.unique, F.max_pool1d: made by a factory (boolean_dispatch)
        qualname = getattr(func, "__name__", qualname)
    module = getattr(func, "__module__", "") or ""
    if qualname.startswith("TensorBase.") or qualname.startswith("Tensor."):
        return "Tensor." + qualname.split(".", 1)[1]
    if module.startswith("torch.nn.functional"):
        return f"torch.nn.functional.{qualname}"
    if module.startswith("torch._C._"):  # torch.linalg.vector_norm is `linalg_vector_norm` of torch._C._linalg
        namespace = module.removeprefix("torch._C._")
        name = qualname.removeprefix(namespace + "_")
        return f"torch.nn.functional.{name}" if namespace == "nn" else f"torch.{namespace}.{name}"
    return f"torch.{qualname.replace('_VariableFunctionsClass.', '')}"


_RANDOM_HINT = (" For uniform random numbers write hl.rand([tile_m, tile_n], seed=...) (or "
                "torch.rand_like(x) of a device value).")
_HINTS = {
    "rand": _RANDOM_HINT, "uniform_": _RANDOM_HINT, "rand_like": _RANDOM_HINT,
    "randn": " Only uniform numbers are supported: torch.rand_like(x) or hl.rand(...).",
    "randn_like": " Only uniform numbers are supported: torch.rand_like(x) or hl.rand(...).",
    "normal_": " Only uniform numbers are supported: torch.rand_like(x) or hl.rand(...).",
    "randint": " Draw hl.rand(...) and scale it: (hl.rand(shape, seed) * n).to(torch.int32).",
    "bernoulli": " Compare uniform numbers instead: hl.rand(shape, seed) < p.",
    "dropout": (" Write it with uniform numbers: torch.where(hl.rand([tile_m, tile_n], seed=...) >= p, "
                "x / (1 - p), 0)."),
    "arange": (" In device code write hl.arange(n) (an int32 ramp; `.to(...)`, `* step + start` as you mean) "
               "or a tile's `.index`; torch.arange of compile-time numbers works in host code."),
    "item": (" Other values host code computes are not known when the kernel is compiled (the host "
             "code is compiled with it, and one compiled variant serves every value of a tensor): use "
             "a size where the value is one (`x_data.size(0)`), pass the number as an int argument "
             "(`hl.specialize` it if it sizes a tensor), or read the value inside the device loop, with "
             "t[()] or t.item() there (a device scalar: a loop bound `hl.tile(0, lengths.amax())` is one)."),
}


def refused_hints() -> dict[str, str]:
    """The torch functions refused in device code with a hint, by name (the supported-forms
    page). torch.rand_like works on device values (`random_values.py`) and so does t.item()
    (`proxies.DeviceTensor.item`): their hints are host code's."""
    return {name: hint for name, hint in _HINTS.items() if name not in ("rand_like", "item")}


def unsupported_hint(name: str) -> str:
    """What to write instead of an unsupported torch function, when pallasite knows (or '')."""
    if name not in _HINTS and name.endswith("_") and not name.startswith("_") and name[:-1] in ops.SPELLINGS:
        return (f" Tensor.{name} updates a value in place, which device values do not (they are values, as "
                f"in Helion); write `x = x.{name[:-1]}(...)` (or `x += ...` for an operator).")
    return _HINTS.get(name, "")
