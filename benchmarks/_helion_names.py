"""The name mapping `benchmarks/helion_corpus.py` installs in each child process.

`install()` puts modules named `helion`, `helion.language`, `helion._testing`,
... into `sys.modules`, each backed by pallasite or by a small stand-in
written here, so a program written for Helion imports and runs unchanged.
Only the child process that runs one program calls it.
"""
from __future__ import annotations

import contextlib
import importlib.util
import sys
import traceback
import types
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

import pallasite
import pallasite.autotuner
import pallasite.exc
import pallasite.language


class Record:
    """What the stand-ins saw: how many results were compared with torch."""

    def __init__(self) -> None:
        self.compared = 0


RECORD = Record()
_ORIGINAL_ASSERT_CLOSE = torch.testing.assert_close


class MissingName(AttributeError):
    """A program asked for a Helion name that has no pallasite counterpart."""


def _module(name: str, doc: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name, doc)
    module.__dict__.update(attrs)

    def missing(attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise MissingName(f"{name}.{attr} has no pallasite counterpart")

    module.__getattr__ = missing  # type: ignore[attr-defined]
    sys.modules[name] = module
    return module


# ------------------------------------------------------------ testing stand-ins

_TOLERANCE = {  # (rtol, atol) floors by dtype: a kernel is held to its dtype's precision
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
    torch.float32: (1e-4, 1e-5),
}


class BaselineUnavailable(Exception):
    """The program's own torch baseline gives NaN at the inputs its driver builds, or fails
    on the CPU: the kernel ran, but there is nothing to compare it with."""


def _assert_close(got, expected, rtol: float, atol: float) -> None:
    """Compare nested results (tensors, tuples, lists, dicts) the way the examples expect."""
    if isinstance(expected, dict):
        got = got if isinstance(got, dict) else dict(got)
        for key in expected:
            _assert_close(got[key], expected[key], rtol, atol)
        return
    if isinstance(expected, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(expected), (
            f"result structure differs: {type(got).__name__} vs {type(expected).__name__} of {len(expected)}")
        for g, e in zip(got, expected):
            _assert_close(g, e, rtol, atol)
        return
    if expected is None:
        return
    if not isinstance(expected, torch.Tensor):
        expected = torch.as_tensor(expected)
    if not isinstance(got, torch.Tensor):
        got = torch.as_tensor(got)
    if expected.is_floating_point() and expected.isnan().any():
        raise BaselineUnavailable(f"the torch baseline itself gives NaN ({int(expected.isnan().sum())} of "
                          f"{expected.numel()} values) at these inputs: nothing to compare with")
    floor_rtol, floor_atol = _TOLERANCE.get(expected.dtype, (0.0, 0.0))
    _ORIGINAL_ASSERT_CLOSE(
        got.detach().to(torch.float32).cpu(), expected.detach().to(torch.float32).cpu(),
        rtol=max(rtol, floor_rtol), atol=max(atol, floor_atol))
    RECORD.compared += 1


def run_example(kernel_fn, baseline_fn, args, kernel_name: str = "helion", baseline_name: str = "torch",
                rtol: float = 1e-2, atol: float = 1e-1, bwd: bool = False, **_ignored) -> None:
    """Run every kernel on `args` and check it against the first baseline (forward, and
    gradients when `bwd`); no benchmarking."""
    kernels = kernel_fn if isinstance(kernel_fn, dict) else {kernel_name: kernel_fn}
    baselines = baseline_fn if isinstance(baseline_fn, dict) else {baseline_name: baseline_fn}
    first_name, first = next(iter(baselines.items()))
    # The kernels run before the baseline, so a program whose kernel pallasite refuses is
    # reported for that even when its torch baseline cannot run here (or is slow).
    others = {name: fn for name, fn in {**kernels, **baselines}.items() if name != first_name}
    results = {}
    for name, fn in others.items():
        print(f"running {name}", file=sys.stderr)
        results[name] = fn(*args)
    try:
        expected = first(*args)
    except pallasite.exc.PallasiteError:
        raise  # a baseline that calls a pallasite kernel: its error is ours
    except Exception as error:  # noqa: BLE001 - the program's own torch code, on a CPU
        raise BaselineUnavailable(f"its torch baseline fails on the CPU ({type(error).__name__}: "
                          f"{(str(error).splitlines() or [''])[0][:120]}): nothing to compare with") from error
    for name, got in results.items():
        print(f"checking {name} against {first_name}", file=sys.stderr)
        _assert_close(got, expected, rtol, atol)
    if bwd:
        _check_gradients(kernels, first, args, rtol, atol)


def _check_gradients(kernels, baseline, args, rtol, atol) -> None:
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    assert leaves, "bwd=True but no argument requires grad"
    out = baseline(*args)
    grad_out = torch.randn_like(out)
    expected = torch.autograd.grad(out, leaves, grad_out, allow_unused=True)
    for name, fn in kernels.items():
        print(f"checking gradients of {name}", file=sys.stderr)
        got = torch.autograd.grad(fn(*args), leaves, grad_out, allow_unused=True)
        for g, e in zip(got, expected):
            assert (g is None) == (e is None), "a gradient is missing"
            if e is not None:
                _assert_close(g, e, rtol, atol)


def check_example(name, args, expected, fn_name=None, skip_accuracy=False, atol=1e-1, rtol=1e-2,
                  **_ignored):
    """Run `fn_name` (default `name`) from the program `name`.py beside the running one."""
    module = sys.modules.get(name) or load_program(Path.cwd() / f"{name}.py")
    result = getattr(module, fn_name or name)(*args)
    if not skip_accuracy:
        _assert_close(result, expected, rtol, atol)
    return ""


def code_and_output(fn, args, **_config):
    return "", fn(*args)


def _counted_assert_close(original):
    def assert_close(actual, expected, *args, **kwargs):
        original(actual, expected, *args, **kwargs)
        RECORD.compared += 1
    return assert_close


# ------------------------------------------------------------------- install


def _do_bench(fn, *args, **kwargs) -> float:
    fn()
    return 1.0


def _exc_with_stand_in_warnings() -> types.ModuleType:
    """`pallasite.exc`, where a missing name becomes a new Warning class (diagnosis only:
    it lets a program that names a Helion warning in `ignore_warnings=` run on, to show
    what stops it next)."""
    module = types.ModuleType("helion.exc", "pallasite.exc with stand-in warnings")
    module.__dict__.update({k: v for k, v in vars(pallasite.exc).items() if not k.startswith("__")})

    def stand_in(attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        cls = type(attr, (UserWarning,), {})
        setattr(module, attr, cls)
        return cls

    module.__getattr__ = stand_in  # type: ignore[attr-defined]
    return module


_PROGRAM_DIRS: set[str] = set()


def _serve_do_bench_to_programs() -> None:
    """A program's `from triton.testing import do_bench` gets a stand-in that runs the
    function once; any other Triton import from a program finds no Triton. Nothing is
    put in `sys.modules`, so torch's own search for Triton is not misled."""
    import builtins

    real_import = builtins.__import__
    testing = types.ModuleType("triton.testing", "no benchmarking")
    testing.do_bench = _do_bench

    def import_(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and (name == "triton" or name.startswith("triton.")) and _from_program(globals):
            if name == "triton.testing" and fromlist:
                return testing
            raise ModuleNotFoundError(f"No module named {name!r} (a TPU run has no Triton)", name=name)
        return real_import(name, globals, locals, fromlist, level)

    builtins.__import__ = import_


def _from_program(globals_) -> bool:
    path = (globals_ or {}).get("__file__") or ""
    return str(Path(path).parent) in _PROGRAM_DIRS


def _kernel_without_unknown_settings(fn=None, **options):
    """`pallasite.kernel`, retried without the settings it reports unknown (diagnosis only)."""
    import re

    if fn is None:
        return lambda f: _kernel_without_unknown_settings(f, **options)
    while True:
        try:
            return pallasite.kernel(fn, **options)
        except pallasite.exc.InvalidConfig as error:
            found = re.match(r"Unknown kernel settings: (.*)\.", str(error))
            if not found:
                raise
            unknown = [name.strip() for name in found.group(1).split(",")]
            print(f"diagnosis: dropping kernel settings {unknown}", file=sys.stderr)
            options = {k: v for k, v in options.items() if k not in unknown}


def install(stand_in_warnings: bool = False) -> Record:
    """Map Helion's module names onto pallasite in this process's `sys.modules`.
    `stand_in_warnings` (diagnosis only, not the measure): Helion warning names pallasite
    lacks resolve to new warning classes and unknown kernel settings are dropped, to see
    what stops a program next."""
    exc = _exc_with_stand_in_warnings() if stand_in_warnings else pallasite.exc
    helion = _module(
        "helion", "pallasite under Helion's names",
        kernel=_kernel_without_unknown_settings if stand_in_warnings else pallasite.kernel, Kernel=pallasite.Kernel, Config=pallasite.Config,
        RefMode=pallasite.RefMode,
        language=pallasite.language, exc=exc, autotuner=pallasite.autotuner,
        cdiv=pallasite.cdiv, next_power_of_2=pallasite.next_power_of_2, __path__=[],
    )
    sys.modules["helion.language"] = pallasite.language
    sys.modules["helion.exc"] = exc
    sys.modules["helion.autotuner"] = pallasite.autotuner
    settings = _module("helion.runtime.settings", "backend query",
                       _get_backend=lambda: "pallas", is_pallas_interpret=lambda: True)
    config = _module("helion.runtime.config", "Config", Config=pallasite.Config)
    helion.runtime = _module("helion.runtime", "runtime", settings=settings, config=config,
                             Config=pallasite.Config, Kernel=pallasite.Kernel, __path__=[])
    helion._testing = _module(
        "helion._testing", "test stand-ins for a CPU run",
        DEVICE=torch.device("cpu"), HALF_DTYPE=torch.float16, LONG_INT_TYPE=torch.int32,
        run_example=run_example, check_example=check_example, code_and_output=code_and_output,
        is_cuda=lambda: False, is_cpu=lambda: True,
    )
    _serve_do_bench_to_programs()
    torch.testing.assert_close = _counted_assert_close(torch.testing.assert_close)
    return RECORD


def load_program(path: Path) -> types.ModuleType:
    _PROGRAM_DIRS.add(str(path.resolve().parent))
    if "examples" not in sys.modules:  # programs import each other as `examples.<name>`
        package = types.ModuleType("examples")
        package.__path__ = [str(path.resolve().parent)]
        sys.modules["examples"] = package
    spec = importlib.util.spec_from_file_location(path.stem, path.resolve())
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    with cuda_as_cpu():
        spec.loader.exec_module(module)
    return module


# ------------------------------------------------- "cuda" in a program -> cpu


def _is_cuda(device) -> bool:
    return (isinstance(device, str) and device.startswith("cuda")) or (
        isinstance(device, torch.device) and device.type == "cuda")


class _CudaAsCpu(TorchFunctionMode):
    """Programs written for a GPU say `device="cuda"`; here their tensors live on the CPU."""

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = "cpu"
        if func in (torch.Tensor.to, torch.Tensor.cuda):
            args = tuple("cpu" if _is_cuda(a) else a for a in args)
            if func is torch.Tensor.cuda:
                return args[0]
        return func(*args, **kwargs)


@contextlib.contextmanager
def cuda_as_cpu():
    torch.cuda.synchronize = lambda *a, **k: None
    with _CudaAsCpu():
        yield


# -------------------------------------------------------------- classifying


def classify(error: BaseException) -> tuple[str, str]:
    """(outcome, one-line detail) for an exception that ended a program."""
    first_line = (str(error).strip().splitlines() or [""])[0][:200]
    if isinstance(error, SyntaxError):
        return "not drivable", f"the program file does not parse: {first_line} (line {error.lineno})"
    if isinstance(error, BaselineUnavailable):
        return "not drivable", first_line
    if isinstance(error, pallasite.exc.PallasiteError):
        return "pallasite error", f"{type(error).__name__}: {first_line}"
    if isinstance(error, AssertionError) and _from_comparison(error):
        return "wrong result", first_line
    if isinstance(error, (ImportError, AttributeError)) and _names_helion(str(error)):
        return "other exception", f"missing Helion name: {first_line}"
    if isinstance(error, ModuleNotFoundError) and error.name and error.name.split(".")[0] not in _STANDARD:
        return "not drivable", f"needs the module {error.name!r}, which is not part of the examples"
    where = _innermost_frame(error)
    if "Torch not compiled with CUDA" in first_line:  # torch.cuda in the program's host code
        return "other exception", f"outside pallasite: the program calls torch.cuda (GPU only): {first_line} [{where}]"
    inside = any("/pallasite/" in f.filename for f in traceback.extract_tb(error.__traceback__))
    prefix = "" if inside else "outside pallasite: "
    return "other exception", f"{prefix}{type(error).__name__}: {first_line} [{where}]"


# Top-level modules a program may import that this harness provides or Python ships; any
# other missing module is the program's own dependency (a task file, a tuning framework).
_STANDARD = frozenset(sys.stdlib_module_names) | {"torch", "helion", "examples", "numpy", "jax", "pallasite"}


def _names_helion(message: str) -> bool:
    """True when the error is a name the program took from `helion` (mapped onto pallasite)."""
    return any(name in message for name in (
        "helion", "pallasite.language'", "pallasite.autotuner'", "pallasite.exc'",
        "pallasite.language.", "pallasite.autotuner", "'pallasite'"))


def _from_comparison(error: BaseException) -> bool:
    frames = traceback.extract_tb(error.__traceback__)
    return any("torch/testing" in f.filename or f.name == "_assert_close" for f in frames)


def _innermost_frame(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "?"
    f = frames[-1]
    return f"{Path(f.filename).name}:{f.lineno}"
