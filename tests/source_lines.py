"""Where an error points: the user's source line of a kernel (for the error tests)."""
from __future__ import annotations

import inspect

from pallasite import exc


def line_of(kernel, text: str) -> int:
    """The file line number of the (single) line of `kernel`'s source containing `text`."""
    lines, first = inspect.getsourcelines(kernel.fn)
    matches = [first + i for i, line in enumerate(lines) if text in line]
    assert len(matches) == 1, f"{text!r} occurs {len(matches)} times in {kernel.fn.__name__}"
    return matches[0]


def assert_points_at(err: exc.PallasiteError, kernel, text: str) -> None:
    """The error carries the user's source line containing `text`, and shows it."""
    assert err.location is not None, f"no source location on: {err}"
    assert err.location.lineno == line_of(kernel, text)
    assert text in err.location.text
    assert text in str(err)
