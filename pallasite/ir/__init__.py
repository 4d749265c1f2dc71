"""The kernel IR: host program, device loops, values, loads and stores; `ir.ops` is the op registry."""
from .nodes import *  # noqa: F401,F403
from .remote import *  # noqa: F401,F403
from .walk import *  # noqa: F401,F403
