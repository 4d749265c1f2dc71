"""Helion's import path of the tunable fragments (`from helion.autotuner import
PowerOfTwoFragment`), so such kernels port by renaming the package; the classes
live in `pallasite.language.tunables` (also `hl.PowerOfTwoFragment`, ...)."""
from .language.tunables import BooleanFragment, EnumFragment, Fragment, IntegerFragment, PowerOfTwoFragment

__all__ = ["BooleanFragment", "EnumFragment", "Fragment", "IntegerFragment", "PowerOfTwoFragment"]
