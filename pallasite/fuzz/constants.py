"""The `scope_constants` kind: a kernel reading globals or closure constants that change
between two calls.

The trace bakes such values into the compiled variant, so the second call must compile
another one; reference mode reads them afresh. Each form reads one constant the way users
write kernels: a float scale, an int shift, a bool or string selecting a branch, tuple
coefficients, a list or dict changed in place, a nested config attribute (`CFG.norm.eps`)
changed in place, a value used by host code. The runner calls the kernel once, runs the
module's `rebind_constants()`, and compares the second call with reference mode.
"""
from __future__ import annotations

import random
from typing import Callable

from .cases import Case, InputSpec, Line, ScopeConstant

_FLOATS = ("2.0", "-0.5", "3.0", "0.25", "1.5", "-2.0")
_INTS = ("1", "2", "-3", "7", "0")
_POSITIVE = ("0.5", "1.0", "0.125", "2.0")
_UNARY = ("torch.relu", "torch.abs", "torch.sigmoid", "torch.tanh")

# A form: (rng, whether the constant changes) -> (constant, host lines, device lines at one indent)
Form = Callable[[random.Random, bool], tuple[ScopeConstant, list[str], list[tuple[int, str]]]]


def _two(rng: random.Random, values: tuple[str, ...]) -> tuple[str, str]:
    first, second = rng.sample(values, 2)
    return first, second


def _scale(rng, changes):
    first, second = _two(rng, _FLOATS)
    return ScopeConstant("SCALE", first, f"SCALE = {second}" if changes else None), [], [(0, "v = v * SCALE")]


def _shift(rng, changes):
    first, second = _two(rng, _INTS)
    return ScopeConstant("SHIFT", first, f"SHIFT = {second}" if changes else None), [], [(0, "v = v + SHIFT")]


def _flag(rng, changes):
    first = rng.choice(("True", "False"))
    second = "False" if first == "True" else "True"
    lines = [(0, "if USE_OP:"), (1, f"v = {rng.choice(_UNARY)}(v)")]
    return ScopeConstant("USE_OP", first, f"USE_OP = {second}" if changes else None), [], lines


def _mode(rng, changes):
    first, second = _two(rng, ('"tanh"', '"sigmoid"', '"square"'))
    lines = [(0, 'if MODE == "tanh":'), (1, "v = torch.tanh(v)"), (0, 'elif MODE == "sigmoid":'),
             (1, "v = torch.sigmoid(v)"), (0, "else:"), (1, "v = v * v")]
    return ScopeConstant("MODE", first, f"MODE = {second}" if changes else None), [], lines


def _coefficients(rng, changes):
    first = f"({rng.choice(_FLOATS)}, {rng.choice(_FLOATS)})"
    second = f"({rng.choice(_FLOATS)}, {rng.choice(_FLOATS)})"
    while second == first:
        second = f"({rng.choice(_FLOATS)}, {rng.choice(_FLOATS)})"
    return (ScopeConstant("COEFFS", first, f"COEFFS = {second}" if changes else None), [],
            [(0, "v = v * COEFFS[0] + COEFFS[1]")])


def _weights(rng, changes):  # a list changed in place: the same object, new contents
    first, second = _two(rng, _FLOATS)
    value = f"[{first}, {rng.choice(_FLOATS)}]"
    return (ScopeConstant("WEIGHTS", value, f"WEIGHTS[0] = {second}" if changes else None), [],
            [(0, "v = v * WEIGHTS[0] + WEIGHTS[1]")])


def _table(rng, changes):  # a dict changed in place
    first, second = _two(rng, _FLOATS)
    return (ScopeConstant("TABLE", f'{{"scale": {first}}}', f'TABLE["scale"] = {second}' if changes else None),
            [], [(0, 'v = v * TABLE["scale"]')])


def _config(rng, changes):  # a nested attribute of a config object, changed in place
    eps, other_eps = _two(rng, _POSITIVE)
    bias, other_bias = _two(rng, _FLOATS)
    change = rng.choice((f"CFG.norm.eps = {other_eps}", f"CFG.bias = {other_bias}"))
    value = f"types.SimpleNamespace(norm=types.SimpleNamespace(eps={eps}), bias={bias})"
    return (ScopeConstant("CFG", value, change if changes else None), [],
            [(0, "v = v / (torch.abs(v) + CFG.norm.eps) + CFG.bias")])


def _host(rng, changes):  # read by host code, used on the device as the value it computed
    first, second = _two(rng, _FLOATS)
    return (ScopeConstant("OFFSET", first, f"OFFSET = {second}" if changes else None), ["offset = OFFSET * 2.0"],
            [(0, "v = v + offset")])


FORMS: dict[str, Form] = {"scale": _scale, "shift": _shift, "flag": _flag, "mode": _mode,
                          "coefficients": _coefficients, "weights": _weights, "table": _table,
                          "config": _config, "host": _host}


def scope_constants(draw, name: str) -> Case:
    """1-3 constants in a pointwise kernel over a 1-D or 2-D float tensor; at least one
    changes before the second call. Module globals or (half the time) closure variables."""
    rng = draw.rng
    forms = rng.sample(sorted(FORMS), rng.randint(1, 3))
    changed = [rng.random() < 0.8 for _ in forms]
    changed[rng.randrange(len(forms))] = True
    rank = rng.choice((1, 2))
    axes = ("n",) if rank == 1 else ("m", "n")
    dims = {axis: draw.size(0.5) for axis in axes}
    tiles = ", ".join(f"t{axis}" for axis in axes)
    constants, host, device = [], [], []
    for form, changes in zip(forms, changed):
        constant, host_lines, device_lines = FORMS[form](rng, changes)
        constants.append(constant)
        host += host_lines
        device += device_lines
    body = [Line(0, f"{', '.join(axes)}{',' if rank == 1 else ''} = x0.size()"), *(Line(0, text) for text in host),
            Line(0, "out = torch.empty_like(x0)"),
            Line(0, f"for {tiles} in hl.tile({axes[0] if rank == 1 else '[m, n]'}):"),
            Line(1, f"v = x0[{tiles}]"), *(Line(1 + indent, text) for indent, text in device),
            Line(1, f"out[{tiles}] = v"), Line(0, "return out")]
    return Case("scope_constants", name, (InputSpec("x0", axes),), tuple(body), dims,
                constants=tuple(constants), closure=rng.random() < 0.5, tags=tuple(forms))
