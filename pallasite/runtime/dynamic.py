"""`static_shapes=False`: one compiled variant per bucket of sizes, not per size.

A kernel bound with dynamic shapes keys its `BoundKernel` on each tensor
dimension's *bucket* — 0, 1 or "2 or more", as Helion buckets — with rank and
dtype. Dimensions of size 0 and 1 stay static (they change broadcasting and
emptiness); a dimension of 2 or more is traced as a `SymbolicSize` named
`<arg>_size<axis>` (see `ir/sizes.py`), and the generated host function reads
it from its input's shape, so the same module runs every size.

A variant records the guards its trace, plan and codegen took on those sizes
(a partial tail, a legal full-dimension block, a VMEM estimate; not a
data-dependent range check, whose limit the code passes as a size variable
where it checks); a call
whose sizes break a guard builds another variant — a correct one, counted by
`Kernel.cache_size`. A size that lost its formula (used where only a plain
int would do: `x[tile, :]` gives a block shaped by the size, `hl.zeros([n])`,
a host op's result shape) would make the module right for one size only, so
each new variant is generated a second time at other sizes its guards allow,
and if the text differs it is pinned to its exact sizes, with a warning that
names the user's line where the two texts first differ.
"""
from __future__ import annotations

import dataclasses

import re
from dataclasses import dataclass
from typing import Callable

from ..exc import warn_user
from ..frontend import ArgSpec
from ..ir.sizes import Guard, SizeVar, SymbolicSize, recording_guards, render


def _verification_sizes(env: dict[str, int]) -> list[dict[str, int]]:
    """Other sizes to generate the code at: a prime shift past any block size (every block
    count and residue changes), the next multiples of 1024 (every power-of-two residue is
    zero), and neighbours for variants whose guards keep sizes small."""
    return [
        {name: value + 1031 for name, value in env.items()},
        {name: (value // 1024 + 1) * 1024 for name, value in env.items()},
        {name: value * 2 for name, value in env.items()},
        {name: value // 2 for name, value in env.items()},
        {name: value + 1 for name, value in env.items()},
        {name: value - 1 for name, value in env.items()},
    ]


def bucket(extent: int) -> int:
    """Helion's size buckets: 0, 1, or 2 standing for every size of 2 or more."""
    return min(int(extent), 2)


def symbolic_specs(names: list[str], specs: list[ArgSpec]) -> list[ArgSpec]:
    """Tensor specs whose dimensions of 2 or more are symbolic sizes named after the argument."""
    out = []
    for name, spec in zip(names, specs):
        if spec.kind == "tensor":
            shape = tuple(SymbolicSize.variable(f"{name}_size{axis}", extent) if extent >= 2 else extent
                          for axis, extent in enumerate(spec.shape))
            spec = dataclasses.replace(spec, shape=shape)
        out.append(spec)
    return out


def size_env(symbolic: list[ArgSpec], actual: list[ArgSpec]) -> dict[str, int]:
    """Each size variable's value in a call's arguments."""
    env = {}
    for spec, arg in zip(symbolic, actual):
        for extent, value in zip(spec.shape, arg.shape):
            if isinstance(extent, SymbolicSize):
                env[extent.expr.name] = int(value)
    return env


def specs_at(symbolic: list[ArgSpec], env: dict[str, int]) -> list[ArgSpec]:
    """The symbolic specs with representative values `env`."""
    out = []
    for spec in symbolic:
        if spec.kind == "tensor":
            shape = tuple(SymbolicSize.variable(e.expr.name, env[e.expr.name]) if isinstance(e, SymbolicSize)
                          else e for e in spec.shape)
            spec = dataclasses.replace(spec, shape=shape)
        out.append(spec)
    return out


@dataclass(frozen=True)
class SizeGuards:
    """The sizes one compiled variant is valid for."""

    guards: frozenset[Guard]

    def hold(self, env: dict[str, int]) -> bool:
        return all(guard.holds(env) for guard in self.guards)

    @staticmethod
    def exactly(env: dict[str, int]) -> SizeGuards:
        return SizeGuards(frozenset(Guard(SizeVar(name), "==", value, True) for name, value in env.items()))


def generate_variant(generate: Callable[[list[ArgSpec]], str], symbolic: list[ArgSpec],
                     env: dict[str, int], kernel_name: str) -> tuple[str, SizeGuards]:
    """The module for sizes `env` and the guards saying which sizes it serves.

    `generate(specs)` traces, plans and generates at `specs`. Sizes a guard pins
    to one value stay fixed; the module is generated again with the other sizes
    moved where the guards allow. Identical text shows no size was baked in;
    otherwise (or when the guards allow no move) the variant is pinned to `env`.
    """
    with recording_guards() as recorded:
        code = generate(specs_at(symbolic, env))
    guards = SizeGuards(frozenset(recorded))
    pins = [g for g in guards.guards
            if g.op == "==" and g.outcome and isinstance(g.left, SizeVar) and isinstance(g.right, int)]
    free = {name: value for name, value in env.items() if name not in _pinned(pins, guards)}
    checked = 0
    for moved in _verification_sizes(free) if free else ():
        other = {**env, **moved}
        if min(moved.values()) < 2 or not guards.hold(other):
            continue
        try:
            with recording_guards():
                again = generate(specs_at(symbolic, other))
        except Exception as err:  # noqa: BLE001 - fails at other sizes: do not share this variant
            _warn_unshared(kernel_name, env, other, err)
            return code, SizeGuards.exactly(env)
        if again != code:
            _warn_static(kernel_name, code, again)
            return code, SizeGuards.exactly(env)
        checked += 1
    if free and not checked:  # the guards allow none of the moves tried
        tried = {**env, **_verification_sizes(free)[0]}
        _warn_static(kernel_name, code, None, [g for g in guards.guards if not g.holds(tried)])
        return code, SizeGuards.exactly(env)
    unrequested = [g for g in pins if not g.requested]
    if unrequested:  # hl.specialize asked for its pins; say why the others recompile
        _warn_static(kernel_name, code, None, unrequested)
    return code, guards


def _warn_unshared(kernel_name: str, env: dict[str, int], other: dict[str, int], err: Exception) -> None:
    moved = ", ".join(f"{name}={other[name]}" for name in sorted(env) if other[name] != env[name])
    first = str(err).splitlines()[0] if str(err) else type(err).__name__
    warn_user(
        f"pallasite: kernel '{kernel_name}' has static_shapes=False, but its code could not be generated "
        f"with other sizes ({moved}: {first}), so this variant serves only these sizes and every new "
        "size compiles again (results stay right). Sizes that must agree (a dimension two tensors "
        "share) can say so with an assert (`assert k.size(1) == q.size(1)`).")


def _pinned(pins: list[Guard], guards: SizeGuards) -> set[str]:
    """The sizes pinned to one value, and every size a guard says equals one of them
    (`assert k.size() == q.size()` with q's head dim pinned: k's stays with it)."""
    pinned = {g.left.name for g in pins}
    equal = [(g.left.name, g.right.name) for g in guards.guards
             if g.op == "==" and g.outcome and isinstance(g.left, SizeVar) and isinstance(g.right, SizeVar)]
    grown = True
    while grown:
        grown = False
        for a, b in equal:
            if (a in pinned) != (b in pinned):
                pinned |= {a, b}
                grown = True
    return pinned


def _warn_static(kernel_name: str, code: str, other: str | None, guards: list[Guard] | None = None) -> None:
    """Say where a size was baked into the code: the user's line quoted nearest the first
    difference (before it, else after it)."""
    where = ""
    lines = code.splitlines()
    differs = next((i for i, (a, b) in enumerate(zip(lines, (other or "").splitlines())) if a != b), None)
    if differs is not None:
        quoted = [(abs(i - differs) + (0 if i <= differs else 0.5), m.group(1)) for i, line in enumerate(lines)
                  if (m := re.match(r"\s*# (\S+:\d+: .*)$", line))]
        if quoted:
            where = min(quoted)[1]
    if guards is not None:
        failing = sorted({f"{render(g.left)} {g.op} {render(g.right)}" if g.outcome else
                          f"not {render(g.left)} {g.op} {render(g.right)}" for g in guards})[:4]
        warn_user(
            f"pallasite: kernel '{kernel_name}' has static_shapes=False, but this variant's schedule "
            f"holds only while {' and '.join(failing)} (e.g. a block as large as a whole dimension, "
            "a size in a power or a bit operation); another value compiles another "
            "variant (results stay right). Use block sizes smaller than the dimensions, or "
            "static_shapes=True.")
        return
    warn_user(
        f"pallasite: kernel '{kernel_name}' has static_shapes=False, but its code depends on the "
        f"exact size of a dimension{f' at {where}' if where else ''} (e.g. a host op's result, a reshape "
        "to computed sizes, a device value shaped by a size after an op); "
        "this variant serves only these sizes and every new size compiles again (results stay "
        "right). Tile that dimension, or use static_shapes=True.")

