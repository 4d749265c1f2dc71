"""User-declared tunables: `hl.register_tunable(name, fragment)` and the fragment kinds.

A fragment is the set of legal values of one tunable and its default. Inside a
kernel, `hl.register_tunable("split_k", hl.PowerOfTwoFragment(1, 8))` returns a
host int: the config's value for "split_k" when the config has one, else the
fragment's default. The autotuner searches it with the other knobs
(`autotune.ConfigSpec.tunables`), and a config names it as a key (`{"split_k": 4}`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .. import exc


class Fragment:
    """The legal values of one user tunable."""

    def candidates(self) -> list[Any]:
        raise NotImplementedError

    def default(self) -> Any:
        raise NotImplementedError

    def allows(self, value: Any) -> bool:
        return value in self.candidates()

    def describe(self) -> str:
        return f"one of {self.candidates()}"


def _check_int(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise exc.InvalidConfig(f"{name} must be an int, got {value!r}.")
    return value


@dataclass(frozen=True)
class IntegerFragment(Fragment):
    """Any int in [low, high]."""

    low: int
    high: int
    default_val: int | None = None

    def __post_init__(self):
        _check_int("IntegerFragment low", self.low)
        _check_int("IntegerFragment high", self.high)
        if self.low > self.high:
            raise exc.InvalidConfig(f"IntegerFragment({self.low}, {self.high}): low > high.")
        if self.default_val is not None and not self.low <= self.default_val <= self.high:
            raise exc.InvalidConfig(f"IntegerFragment default {self.default_val} is outside "
                                    f"[{self.low}, {self.high}].")

    def candidates(self) -> list[int]:
        return list(range(self.low, self.high + 1))

    def default(self) -> int:
        return self.low if self.default_val is None else self.default_val

    def allows(self, value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and self.low <= value <= self.high

    def describe(self) -> str:
        return f"an int in [{self.low}, {self.high}]"


@dataclass(frozen=True)
class PowerOfTwoFragment(IntegerFragment):
    """A power of two in [low, high]."""

    def __post_init__(self):
        super().__post_init__()
        for bound in (self.low, self.high, self.default_val):
            if bound is not None and (bound < 1 or bound & (bound - 1)):
                raise exc.InvalidConfig(f"PowerOfTwoFragment bound {bound} is not a power of two.")

    def candidates(self) -> list[int]:
        out, value = [], self.low
        while value <= self.high:
            out.append(value)
            value *= 2
        return out

    def allows(self, value: Any) -> bool:
        return super().allows(value) and value >= 1 and not value & (value - 1)

    def describe(self) -> str:
        return f"a power of two in [{self.low}, {self.high}]"


@dataclass(frozen=True, init=False)
class EnumFragment(Fragment):
    """One of a fixed set of hashable values (the first is the default)."""

    choices: tuple

    def __init__(self, choices: Sequence[Any]):
        choices = tuple(choices)
        if not choices:
            raise exc.InvalidConfig("EnumFragment needs at least one choice.")
        object.__setattr__(self, "choices", choices)

    def candidates(self) -> list[Any]:
        return list(self.choices)

    def default(self) -> Any:
        return self.choices[0]


@dataclass(frozen=True)
class BooleanFragment(Fragment):
    """True or False (default False)."""

    default_val: bool = False

    def candidates(self) -> list[bool]:
        return [False, True]

    def default(self) -> bool:
        return self.default_val

    def allows(self, value: Any) -> bool:
        return isinstance(value, bool)


def check_tunable(name: Any, fragment: Any) -> None:
    """The arguments of `hl.register_tunable`, checked."""
    if not isinstance(name, str) or not name.isidentifier():
        raise exc.UnsupportedSyntax(f"hl.register_tunable(name, fragment): name must be an identifier "
                                    f"string, got {name!r}.")
    if not isinstance(fragment, Fragment):
        raise exc.UnsupportedSyntax(
            f"hl.register_tunable({name!r}, ...): the second argument must be a fragment "
            "(hl.PowerOfTwoFragment, hl.IntegerFragment, hl.EnumFragment, hl.BooleanFragment), "
            f"got {type(fragment).__name__}.")


def tunable_value(name: str, fragment: Fragment, values: dict[str, Any]) -> Any:
    """The value a trace or a reference run reads: the config's, else the default."""
    check_tunable(name, fragment)
    if name not in values:
        return fragment.default()
    value = values[name]
    if not fragment.allows(value):
        raise exc.InvalidConfig(f"Config value {name}={value!r} is not legal for its "
                                f"hl.register_tunable fragment: expected {fragment.describe()}.")
    return value
