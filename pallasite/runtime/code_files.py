"""Generated modules as files and modules: where their text is written (for tracebacks
and readers) and how it is loaded."""
from __future__ import annotations

import hashlib
import os
import tempfile
import types
import warnings
from typing import Any

CODE_DIR_ENV = "PALLASITE_CODE_DIR"


def load_module(code: str, path: str, interpret: Any) -> types.ModuleType:
    """Execute generated source as a module whose tracebacks point at `path`."""
    module = types.ModuleType(f"pallasite_generated_{os.path.basename(path)[:-3]}")
    module.__file__ = path
    exec(compile(code, path, "exec"), module.__dict__)
    module.INTERPRET = interpret
    return module


def host_function(module: types.ModuleType, kernel_name: str) -> Any:
    """The generated module's host function: the kernel's own name, or the one `HOST_FUNCTION`
    gives when the module uses that name for something else (a kernel named `elementwise`)."""
    return getattr(module, getattr(module, "HOST_FUNCTION", kernel_name))


def code_dir() -> str:
    default = os.path.join(os.path.expanduser("~"), ".cache", "pallasite", "code")
    return os.environ.get(CODE_DIR_ENV, default)


def _write_code(name: str, code: str) -> str:
    """Write the generated module where tracebacks will point (named by its hash).

    The module runs from the in-memory text; the file is for tracebacks and
    readers. It is written atomically (a temporary file renamed into place),
    so concurrent compiles never see half a file; a cached file whose text
    differs (truncated, edited) is rewritten with a warning.
    """
    digest = hashlib.sha256(code.encode()).hexdigest()[:12]
    directory = code_dir()
    path = os.path.join(directory, f"{name}_{digest}.py")
    try:
        with open(path) as f:
            existing = f.read()
    except UnicodeDecodeError:
        existing = ""  # not text: corrupt
    except OSError:
        existing = None
    if existing == code:
        return path
    if existing is not None:
        warnings.warn(f"pallasite: the cached module {path} was corrupt; regenerated it.", stacklevel=3)
    try:
        os.makedirs(directory, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}_", suffix=".tmp")
        with os.fdopen(handle, "w") as f:
            f.write(code)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # as open() would create it, not mkstemp's 0600
        os.replace(temporary, path)
    except OSError:
        pass  # read-only home: tracebacks still name the path, the code is on the kernel
    return path
