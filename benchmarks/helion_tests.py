"""Run Helion's unittest files, unchanged, on pallasite, and count the tests that pass.

Helion's Pallas test files import `helion`, `helion.language` and `helion._testing`
(`TestCase`, `code_and_output`, `onlyBackends`, `skipUnlessPallas`, ...). Each file
runs in a child process whose `sys.modules` maps those names onto pallasite through
`_helion_names.install()` (as `helion_corpus.py` does for example programs), with the
test stand-ins below added to `helion._testing`. Every test ends in one of:

  passed    it ran and its checks held (an `xfailIfPallas*` test that passes counts)
  refused   it asserts that Helion refuses a kernel (`assertRaises(Regex)` with Helion's
            exception class and wording) and pallasite refused it too, with its own
            `pallasite.exc` error, whose class and words differ: the row shows pallasite's
  failed    a wrong result or an error; the row shows the error's first line
  excluded  it reads Helion internals: asserts on generated code text (the
            `code` from `code_and_output`, journals), imports `helion._compiler`,
            `helion.autotuner.base_search`, ...; such a test says nothing of pallasite
  skipped   by the file's own decorators (`onlyBackends(["triton"])`, GPU only, ...)

The score is (passed + refused) of (passed + refused + failed); the strict score, printed
beside it, counts a refusal in pallasite's words as a failure. A test expecting a refusal
where pallasite runs the kernel fails either way.

    PYTHONPATH=. python benchmarks/helion_tests.py /tmp/helion_tests/test_pallas.py \
        [more files] [--timeout 120] [--only test_add] [--out results.txt]

Tests run one at a time, each with a time limit; a test that hangs or kills the
child process is a failure and the file's remaining tests run in a new child.
The test files are not part of this repository; bring your own copy.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import re
import queue
import signal
import subprocess
import sys
import threading
import traceback
import types
import unittest
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
INTERNALS = "reads Helion internals: "
_ROW, _START, _DONE = "HELION_TESTS_ROW ", "HELION_TESTS_START ", "HELION_TESTS_DONE"


# ============================================================== the child process


class ReadsInternals(unittest.SkipTest):
    """The test looked at something only Helion has (its generated code, its modules)."""

    def __init__(self, what: str) -> None:
        super().__init__(INTERNALS + what)


class TestTimeout(Exception):
    pass


class GeneratedCode(str):
    """pallasite's generated code, returned where Helion returns its own: a test that
    reads the text is asserting on Helion's code generation, not on results."""


def _reading(name: str):
    def read(self, *args, **kwargs):
        raise ReadsInternals(f"inspects the generated code (str.{name})")
    return read


for _name in ("__contains__", "count", "find", "rfind", "index", "rindex", "split", "splitlines",
              "startswith", "endswith", "__iter__", "__getitem__", "__len__", "strip", "lower"):
    setattr(GeneratedCode, _name, _reading(_name))
GeneratedCode.__eq__ = lambda self, other: _reading("__eq__")(self)  # type: ignore[method-assign]
GeneratedCode.__hash__ = str.__hash__  # type: ignore[method-assign]


def _regex_reading_code(function):
    """`re.findall(pattern, code)` and kin: reading the generated code's text, as str methods do."""
    def read(*args, **kwargs):
        if _reads_code(*args, *kwargs.values()):
            raise ReadsInternals(f"inspects the generated code (re.{function.__name__})")
        return function(*args, **kwargs)
    return read


def _reads_code(*values) -> bool:
    return any(isinstance(v, GeneratedCode) for v in values)


class HelionTestCase(unittest.TestCase):
    """`helion._testing.TestCase`: journals and assertions on code text are Helion internals."""

    def assertExpectedJournal(self, *args, **kwargs):
        raise ReadsInternals("assertExpectedJournal (Helion's recorded generated code)")

    def _guarded(name):  # noqa: N805 - builds the methods below
        original = getattr(unittest.TestCase, name)

        def method(self, *args, **kwargs):
            if _reads_code(*args, *kwargs.values()):
                raise ReadsInternals(f"{name} on the generated code")
            return original(self, *args, **kwargs)
        method.__name__ = name
        return method

    for _assert in ("assertIn", "assertNotIn", "assertRegex", "assertNotRegex", "assertEqual",
                    "assertNotEqual", "assertTrue", "assertFalse", "assertCountEqual",
                    "assertMultiLineEqual"):
        locals()[_assert] = _guarded(_assert)
    del _assert, _guarded

    def assertRaises(self, expected, *args, **kwargs):
        return self._refusal(super().assertRaises(expected, msg=kwargs.pop("msg", None)), args, kwargs)

    def assertRaisesRegex(self, expected, regex, *args, **kwargs):
        return self._refusal(super().assertRaisesRegex(expected, regex, msg=kwargs.pop("msg", None)),
                             args, kwargs)

    def _refusal(self, context, args, kwargs):
        refusal = _Refusal(self, context)
        if not args:
            return refusal
        with refusal:
            args[0](*args[1:], **kwargs)
        return None

    def __getattr__(self, name: str):
        # Helion's own assertion helpers (assertNotInExpectedJournal, ...) are about its code.
        if name.startswith("assert"):
            def internal(*args, **kwargs):
                raise ReadsInternals(name)
            return internal
        raise AttributeError(name)


class _Refusal:
    """`assertRaises(Regex)`'s context: the expected error passes as in unittest; a
    `pallasite.exc` error of another class or wording in its place marks the test `refused`
    (pallasite refused the kernel too, in its own words); no error fails as in unittest."""

    def __init__(self, test, context) -> None:
        self.test, self.context = test, context

    def __enter__(self):
        return self.context.__enter__()

    def __exit__(self, exc_type, error, tb):
        from pallasite.exc import PallasiteError

        try:
            if self.context.__exit__(exc_type, error, tb):
                return True
        except AssertionError:
            if not isinstance(error, PallasiteError):
                raise
        if not isinstance(error, PallasiteError):
            return False
        self.test._pallasite_refusal = _first_line(error)
        return True


def code_and_output(fn, args, **config):
    """Run the kernel once with `config` (its default config if none): (code, output)."""
    import pallasite.testing

    code, output = pallasite.testing.code_and_output(fn, args, **config)
    return GeneratedCode(code), output


def _decorator(make):
    """A decorator factory used as `@name(reason)`, `@name` or `@name(backends)`."""
    def factory(*args, **kwargs):
        if len(args) == 1 and not kwargs and (isinstance(args[0], type) or callable(args[0])) \
                and not isinstance(args[0], (str, list, tuple)):
            return make(None)(args[0])
        return make(*args, **kwargs)
    return factory


def _skip(why: str):
    return _decorator(lambda reason=None, *_: unittest.skip(f"{why}: {reason}" if reason else why))


def _run_as_written(reason=None, *_args, **_kwargs):
    """Helion expects the test to fail on its Pallas backend; here it runs, and counts
    as passed when it passes."""
    def mark(obj):
        obj.__helion_xfail__ = reason or "xfail"
        return obj
    return mark


def _only_backends(backends=(), *_args, **_kwargs):
    if "pallas" in backends:
        return lambda obj: obj
    return unittest.skip(f"only for backends {list(backends)}")


EXAMPLES_ENV = "PALLASITE_HELION_EXAMPLES_DIR"


def _testing_stand_ins() -> dict:
    import _helion_names
    import torch

    return dict(
        TestCase=HelionTestCase, code_and_output=code_and_output, DEVICE=torch.device("cpu"),
        onlyBackends=_decorator(_only_backends),
        skipUnlessPallas=_decorator(lambda reason=None, *_: (lambda obj: obj)),
        skipIfPallas=_skip("skipped by Helion on its Pallas backend"),
        skipIfPallasInterpret=_skip("skipped by Helion in Pallas interpret mode"),
        skipIfPallasTpu=_decorator(lambda reason=None, *_: (lambda obj: obj)),  # not a real TPU here
        xfailIfPallas=_decorator(_run_as_written),
        xfailIfPallasInterpret=_decorator(_run_as_written),
        xfailIfPallasTpu=_decorator(_run_as_written),
        skipIfCpu=_skip("skipped by Helion on CPU"),
        skipIfRefEager=_decorator(lambda reason=None, *_: (lambda obj: obj)),
        skipIfNotCUDA=_skip("CUDA only"), skipIfRocm=_decorator(lambda reason=None, *_: (lambda obj: obj)),
        skipIfXPU=_decorator(lambda reason=None, *_: (lambda obj: obj)),
        skipIfTileIR=_decorator(lambda reason=None, *_: (lambda obj: obj)),
        is_pallas_interpret=lambda: True,
        assert_ref_eager_mode=_assert_ref_eager_mode,
        # Helion's examples folder (`--examples-dir`; beside the test folder, as in Helion's tree, by
        # default) and its loader: a test importing an example gets it under the name mapping
        EXAMPLES_DIR=Path(os.environ.get(EXAMPLES_ENV) or Path.cwd().parent / "examples"),
        import_path=_helion_names.load_program,
    )


@contextlib.contextmanager
def _assert_ref_eager_mode():
    """Helion's check that a block ran its kernels in reference mode: here, that nothing
    in it compiled a kernel (`pallasite.runtime.compiled.COMPILE_OBSERVERS`)."""
    from pallasite.runtime import compiled

    compiles: list = []
    compiled.COMPILE_OBSERVERS.append(compiles.append)
    try:
        yield
    finally:
        compiled.COMPILE_OBSERVERS.remove(compiles.append)
    assert not compiles, f"{len(compiles)} kernel variant(s) compiled inside assert_ref_eager_mode()"


class _InternalModule(types.ModuleType):
    """A Helion module pallasite has no counterpart of: using any of its names
    marks the test as reading Helion internals."""

    __path__: list = []

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Internal(f"{self.__name__}.{attr}")


_LOADING = False  # while the test file itself runs (its module level), not its tests


class _Internal:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Internal(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        if _LOADING:  # at module level: a placeholder, refused where a test uses it
            return _Internal(f"{self._name}(...)")
        raise ReadsInternals(f"uses {self._name}")

    def __mro_entries__(self, bases):
        raise ReadsInternals(f"subclasses {self._name}")

    def __iter__(self):
        raise ReadsInternals(f"iterates {self._name}")

    def __getitem__(self, key):
        raise ReadsInternals(f"indexes {self._name}")


class _InternalFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves `helion.<anything not mapped>` as an `_InternalModule`."""

    def find_spec(self, name, path=None, target=None):
        if name.startswith("helion.") and name not in sys.modules:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _InternalModule(spec.name)

    def exec_module(self, module):
        pass


def _install() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:  # torch.testing._internal (Helion's parametrize helpers) imports expecttest
        import expecttest  # noqa: F401
    except ImportError:
        sys.modules["expecttest"] = types.ModuleType("expecttest", "stand-in: no expect tests")
        sys.modules["expecttest"].TestCase = unittest.TestCase
    import _helion_names

    _helion_names.install()
    from pallasite.runtime.kernel import BoundKernel

    to_code = BoundKernel.to_code

    def generated_code(self, *args, **kwargs):
        if any(isinstance(a, _Internal) for a in (*args, *kwargs.values())):  # Helion's code options
            raise ReadsInternals(next(a._name for a in (*args, *kwargs.values()) if isinstance(a, _Internal)))
        return GeneratedCode(to_code(self, *args, **kwargs))

    BoundKernel.to_code = generated_code
    helion = sys.modules["helion"]
    missing = helion.__getattr__
    # A name pallasite lacks, met while the file loads (`_OPTIONS = helion.OutputCodeOptions(...)`
    # at module level), is a placeholder: the tests that use it read Helion internals, the others run.
    helion.__getattr__ = lambda attr: _Internal(f"helion.{attr}") if (
        (_LOADING and not attr.startswith("__")) or attr in _HELION_CODEGEN_NAMES) else missing(attr)
    testing = sys.modules["helion._testing"]
    testing.__dict__.update(_testing_stand_ins())
    sys.meta_path.insert(0, _InternalFinder())
    for name in ("findall", "finditer", "search", "match", "fullmatch", "sub", "subn", "split"):
        setattr(re, name, _regex_reading_code(getattr(re, name)))


def _first_line(error: BaseException) -> str:
    text = (str(error).strip().splitlines() or [""])[0][:160]
    return f"{type(error).__name__}: {text}"


def _reads_internals(error: BaseException) -> str | None:
    """Why an error shows the test reaching for Helion internals (else None)."""
    text = str(error)
    if isinstance(error, ImportError) and "No module named 'helion." in text:
        return "imports " + text.split("'")[1]
    if type(error).__name__ == "MissingName" and ("._" in text.split(" ")[0]):
        return "uses the private " + text.split(" ")[0]
    if "unexpected keyword argument '_" in text:  # `kernel(..., _launcher=...)`: Helion's private hooks
        return "passes a Helion-private argument (" + text.split("argument ")[-1].splitlines()[0][:40] + ")"
    if isinstance(error, AttributeError) and any(name in text for name in _HELION_ONLY_ATTRIBUTES):
        return "uses a Helion-only attribute (" + text.splitlines()[0][:80] + ")"
    return None


# Helion's public names about its own code generation: a test using them reads internals.
_HELION_CODEGEN_NAMES = frozenset({"OutputCodeOptions"})

# Attributes of Helion's kernel objects and generated modules that say nothing of results.
_HELION_ONLY_ATTRIBUTES = ("to_triton_code", "config_spec", "_bound_kernels", "__globals__",
                           "host_function", "'env'", "_helion_",
                           "'BlockSizeSpec'", "'ConfigSpec'", "_flat_fields")


class _Result(unittest.TestResult):
    """One row per test, printed as it finishes; a per-test time limit (SIGALRM)."""

    def __init__(self, timeout: float) -> None:
        super().__init__()
        self.timeout = timeout
        self.rows: dict[str, dict] = {}

    def _row(self, test, outcome: str, detail: str = "") -> None:
        name = _test_name(test)
        row = self.rows.setdefault(name, {"test": name, "outcome": outcome, "detail": detail})
        if outcome == "failed" or row["outcome"] in ("passed", "refused"):  # a failing subtest fails the test
            row.update(outcome=outcome, detail=detail)
        if row["outcome"] != "failed" and getattr(_method(test), "__helion_xfail__", None):
            row["detail"] = "xfail in Helion; " + row["detail"]

    def startTest(self, test):
        super().startTest(test)
        print(_START + _test_name(test), flush=True)
        signal.alarm(int(self.timeout))

    def stopTest(self, test):
        signal.alarm(0)
        super().stopTest(test)
        row = self.rows.get(_test_name(test)) or {"test": _test_name(test), "outcome": "passed", "detail": ""}
        print(_ROW + json.dumps(row), flush=True)

    def addSuccess(self, test):
        refusal = getattr(test, "_pallasite_refusal", None)
        self._row(test, *(("refused", refusal) if refusal else ("passed",)))

    def addUnexpectedSuccess(self, test):
        self._row(test, "passed", "unexpected success")

    def addExpectedFailure(self, test, err):
        self._row(test, "failed", "expected failure: " + _first_line(err[1]))

    def addSkip(self, test, reason):
        if reason.startswith(INTERNALS):
            self._row(test, "excluded", reason[len(INTERNALS):])
        else:
            self._row(test, "skipped", reason)

    def addError(self, test, err):
        why = _reads_internals(err[1])
        if why:
            self._row(test, "excluded", why)
        else:
            self._row(test, "failed", _first_line(err[1]))
        if os.environ.get("HELION_TESTS_TRACEBACKS"):
            traceback.print_exception(*err, file=sys.stderr)

    addFailure = addError

    def addSubTest(self, test, subtest, err):
        if err is None:
            return
        if issubclass(err[0], unittest.SkipTest):
            self.addSkip(test, str(err[1]))
        else:
            self.addError(test, err)


def _test_name(test) -> str:
    """The test's row name; a subtest's (`with self.subTest(...)`) is its test's, so a subtest
    that reads Helion internals or fails marks the whole test."""
    test = getattr(test, "test_case", test)
    return test.id().split(".", 1)[-1]


def _method(test):
    return getattr(test, getattr(test, "_testMethodName", ""), None)


def _alarm(signum, frame):
    raise TestTimeout("over the per-test time limit")


def _tests_of(suite) -> list:
    tests = []
    for item in suite:
        tests.extend(_tests_of(item) if isinstance(item, unittest.TestSuite) else [item])
    return tests


def child_main(path: Path, timeout: float, done: set[str], only: list[str]) -> int:
    _install()
    signal.signal(signal.SIGALRM, _alarm)
    sys.path.insert(0, str(path.resolve().parent))
    spec = importlib.util.spec_from_file_location(path.stem, path.resolve())
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    global _LOADING
    _LOADING = True
    try:
        spec.loader.exec_module(module)
    except BaseException as error:  # noqa: BLE001 - a file that does not load is one row
        print(_ROW + json.dumps({"test": "(loading the file)", "outcome": "failed",
                                 "detail": _first_line(error)}), flush=True)
        traceback.print_exc()
        print(_DONE, flush=True)
        return 0
    _LOADING = False
    tests = [t for t in _tests_of(unittest.defaultTestLoader.loadTestsFromModule(module))
             if _test_name(t) not in done and (not only or any(o in _test_name(t) for o in only))]
    result = _Result(timeout)
    for test in tests:
        test(result)
    print(_DONE, flush=True)
    return 0


# ============================================================== the parent process


def run_file(path: Path, timeout: float, only: list[str], emit) -> list[dict]:
    """All rows of one file: children run until every test has a row."""
    rows: list[dict] = []
    done: set[str] = set()
    while True:
        env = dict(os.environ, PALLASITE_AUTOTUNE_EFFORT="none")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
        env.setdefault("JAX_PLATFORMS", "cpu")
        skip_file = Path(f"/tmp/helion_tests_done_{os.getpid()}.json")
        skip_file.write_text(json.dumps(sorted(done)))
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(path),
               "--done", str(skip_file), "--timeout", str(timeout), "--only", ",".join(only)]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, cwd=str(path.parent))
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout] + [lines.put(None)],
                         daemon=True).start()
        running, finished = None, False
        while True:
            try:  # loading the file (imports, JAX) gets a time limit of its own too
                line = lines.get(timeout=timeout + 60)
            except queue.Empty:
                proc.kill()
                break
            if line is None:
                break
            if line.startswith(_START):
                running = line[len(_START):].strip()
            elif line.startswith(_ROW):
                row = json.loads(line[len(_ROW):])
                rows.append(row)
                done.add(row["test"])
                running = None
                emit(row)
            elif line.startswith(_DONE):
                finished = True
        proc.wait()
        skip_file.unlink(missing_ok=True)
        if finished or running is None:
            return rows
        row = {"test": running, "outcome": "failed",
               "detail": f"hung or killed its process (rc {proc.returncode})"}
        rows.append(row)
        done.add(running)
        emit(row)


def summarize(per_file: dict[str, list[dict]]) -> list[str]:
    lines = ["", f"{'file':<40} {'passed':>6} {'refused':>7} {'counted':>7} {'%':>6} {'strict %':>8} "
                 f"{'excluded':>8} {'skipped':>7}"]
    causes: collections.Counter = collections.Counter()
    for name, rows in per_file.items():
        n = collections.Counter(r["outcome"] for r in rows)
        counted = n["passed"] + n["refused"] + n["failed"]
        share = 100.0 * (n["passed"] + n["refused"]) / counted if counted else 0.0
        strict = 100.0 * n["passed"] / counted if counted else 0.0
        lines.append(f"{name:<40} {n['passed']:>6} {n['refused']:>7} {counted:>7} {share:>5.1f}% {strict:>7.1f}% "
                     f"{n['excluded']:>8} {n['skipped']:>7}")
        causes.update(r["detail"] for r in rows if r["outcome"] == "failed")
    lines += ["", "failures by cause (first line of the error), most common first:"]
    lines += [f"{count:>5}  {cause}" for cause, count in causes.most_common()]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="Helion unittest files")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per test")
    parser.add_argument("--only", default="", help="comma-separated substrings of test names")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    parser.add_argument("--examples-dir", type=Path,
                        help="Helion's examples folder, for tests that import an example (default: "
                             "the test file's folder's sibling 'examples', as in Helion's tree)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--done", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    only = [o for o in args.only.split(",") if o]
    if args.child:
        done = set(json.loads(args.done.read_text())) if args.done else set()
        return child_main(args.child, args.timeout, done, only)
    if not args.files:
        parser.error("give one or more test files")
    if args.examples_dir:
        os.environ[EXAMPLES_ENV] = str(args.examples_dir.resolve())  # the children read it
    out = open(args.out, "w") if args.out else None

    def write(text: str) -> None:
        print(text, flush=True)
        if out:
            out.write(text + "\n")
            out.flush()

    per_file: dict[str, list[dict]] = {}
    for path in args.files:
        write(f"== {path.name}")
        per_file[path.name] = run_file(
            path, args.timeout, only,
            lambda row: write(f"{row['test']:<90} {row['outcome']:<9} {row['detail']}"))
    for line in summarize(per_file):
        write(line)
    if out:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
