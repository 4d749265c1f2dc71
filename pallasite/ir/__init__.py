"""The kernel IR: host program, device loops, values, loads and stores."""
from .nodes import *  # noqa: F401,F403
