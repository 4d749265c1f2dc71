"""`python -m pallasite.fuzz`: see `pallasite.fuzz.session.main`."""
from __future__ import annotations

import sys

from .session import main

sys.exit(main())
