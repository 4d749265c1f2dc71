"""`python -m pallasite` (also the `pallasite` console script).

  report MODULE:KERNEL [--block-sizes 64,64] [--loop-type fori_loop]
      the kernel's schedule report (`pallasite.report`) for the module's example_inputs()
  autotune MODULE:KERNEL [--effort full] [--seed 0] [--chip v6e] [--top 5] [--out STEM]
      search its configs for example_inputs(): a table of the best with the cost model's
      breakdown, and the search history as STEM.csv (and STEM.png with matplotlib)
  code MODULE:KERNEL [--config JSON]
      print the generated module (default: the config a call runs)
  lower MODULE:KERNEL [--config JSON] [--chips v5e,v6e,v7x]
      lower the generated module to Mosaic for each TPU generation (`jax.export`, no TPU
      needed): proof the kernel compiles for a TPU, not only that interpret mode runs it
  run MODULE
      run the module's check()
  forms [--write | --check] [--out PATH]
      the supported-forms page (docs/supported-forms.md), generated from the op registry, the
      index forms and `hl`: print it, write it, or check the written one is current
"""
from __future__ import annotations

import argparse
import importlib
import os
import json
import sys
from pathlib import Path

from . import exc
from .plan.loops import STRATEGIES
from .runtime.cpu_devices import request_cpu_devices
from .report import format_report, schedule_report
from .runtime.kernel import Kernel


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pallasite")
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser("report", help="print a kernel's schedule for its module's example_inputs()")
    report.add_argument("target", help="MODULE:KERNEL, e.g. examples.attention:attention")
    report.add_argument("--block-sizes", help="comma-separated block sizes, e.g. 64,64")
    report.add_argument("--loop-type", choices=sorted(STRATEGIES), help="pallas_loop_type")
    tune = commands.add_parser("autotune", help="search a kernel's configs for its module's example_inputs()")
    tune.add_argument("target", help="MODULE:KERNEL")
    tune.add_argument("--effort", choices=("quick", "full"), default="full",
                      help="search effort (default: full); the search is shown, not cached: a kernel's "
                           "first call tunes, checks the winner's output and caches it")
    tune.add_argument("--seed", type=int, help="autotune_random_seed (default: the kernel's)")
    tune.add_argument("--chip", help="TPU generation the cost model ranks for (default: the compile target)")
    tune.add_argument("--top", type=int, default=5, help="configs in the table")
    tune.add_argument("--out", help="file stem of the history (default: autotune_KERNEL)")
    code = commands.add_parser("code", help="print the generated module")
    code.add_argument("target", help="MODULE:KERNEL")
    code.add_argument("--config", help='a config as JSON, e.g. \'{"block_sizes": [64, 128]}\'')
    lower = commands.add_parser("lower", help="lower a kernel to Mosaic for each TPU generation (no TPU needed)")
    lower.add_argument("target", help="MODULE:KERNEL")
    lower.add_argument("--config", help='a config as JSON (default: the config a call runs)')
    lower.add_argument("--chips", default="v5e,v6e,v7x", help="TPU generations, comma-separated (default: all)")
    run = commands.add_parser("run", help="run an example module's check()")
    run.add_argument("module", help="MODULE, e.g. examples.matmul")
    forms = commands.add_parser("forms", help="print, write or check the supported-forms page")
    action = forms.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="write the page (default: print it)")
    action.add_argument("--check", action="store_true", help="exit 1 if the written page is not current")
    forms.add_argument("--out", help="the page's path (default: docs/supported-forms.md of this checkout)")
    return parser


class _Usage(Exception):
    """A command line that names no usable target (exit status 2)."""


def _import(name: str):
    """The module `name` (dotted, or a path to a .py file), imported as `python -m` would
    from the working directory — the console script does not put it on sys.path itself."""
    if name.endswith(".py"):
        name = name[:-3].replace("/", ".").replace("\\", ".")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name and name.startswith(err.name):
            raise _Usage(f"no module {name!r} importable from {os.getcwd()} ({err})") from None
        raise


def _target(text: str):
    module_name, _, kernel_name = text.partition(":")
    if not kernel_name:
        raise _Usage(f"expected MODULE:KERNEL, got {text!r}")
    module = _import(module_name)
    if not hasattr(module, "example_inputs"):
        raise _Usage(f"{module_name} has no example_inputs()")
    if not hasattr(module, kernel_name):
        raise _Usage(f"{module_name} has no kernel {kernel_name!r}")
    kernel = getattr(module, kernel_name)
    if not isinstance(kernel, Kernel):
        raise _Usage(f"{module_name}.{kernel_name} is not a @pallasite.kernel (a {type(kernel).__name__})")
    return module, kernel


def _config_option(text: str | None) -> dict:
    """`--config`: a JSON object of config keys (`{"block_sizes": [64, 128]}`), or none."""
    if not text:
        return {}
    try:
        config = json.loads(text)
    except json.JSONDecodeError as err:
        raise _Usage(f"--config is not JSON ({err}): write e.g. '{{\"block_sizes\": [64, 128]}}'") from None
    if not isinstance(config, dict):
        raise _Usage(f"--config must be a JSON object of config keys, e.g. '{{\"block_sizes\": [64, 128]}}', "
                     f"got {text!r}")
    return config


def _report(options) -> int:
    module, kernel = _target(options.target)
    config = {}
    if options.block_sizes:
        config["block_sizes"] = [int(b) for b in options.block_sizes.split(",")]
    if options.loop_type:
        config["pallas_loop_type"] = options.loop_type
    report = schedule_report(kernel, module.example_inputs(), **config)
    print(format_report(f"schedule of {options.target}", report))
    return 0


def _autotune(options) -> int:
    import dataclasses

    from .autotune.summary import format_table, write_history

    module, kernel = _target(options.target)
    args = tuple(module.example_inputs())
    if options.seed is not None:
        kernel.tune = dataclasses.replace(kernel.tune, random_seed=options.seed)
    bound = kernel.bind(args)
    result = bound.autotune(args, effort=options.effort, chip=options.chip)
    print(format_table(result, kernel, args, chip=options.chip, top=options.top))
    stem = Path(options.out or f"autotune_{kernel.__name__}")
    written = write_history(result, stem, f"autotune {options.target} ({options.effort})")
    print("search history written to " + ", ".join(str(p) for p in written))
    print("(not cached: a call of the kernel tunes, checks the winner's output and caches it)")
    if not any(p.suffix == ".png" for p in written):
        print("matplotlib is not installed: no plot (pip install matplotlib, then run again)")
    return 0


def _code(options) -> int:
    module, kernel = _target(options.target)
    config = _config_option(options.config) or None
    print(kernel.bind(tuple(module.example_inputs())).to_code(config), end="")
    return 0


def _lower(options) -> int:
    from .testing import check_tpu_lowering

    module, kernel = _target(options.target)
    config = _config_option(options.config)
    chips = [chip.strip() for chip in options.chips.split(",") if chip.strip()]
    if not chips:
        raise _Usage("--chips names no TPU generation: write e.g. --chips v5e,v6e,v7x")
    check_tpu_lowering(kernel, tuple(module.example_inputs()), chips=chips, **config)
    print(f"{options.target}: lowered to Mosaic for {', '.join(chips)}")
    return 0


def _run(options) -> int:
    module = _import(options.module)
    if not hasattr(module, "check"):
        raise _Usage(f"{options.module} has no check()")
    if isinstance(getattr(module, "DEVICES", None), int):  # a mesh example: that many CPU devices
        request_cpu_devices(module.DEVICES)
    result = module.check()
    print(f"{options.module}: check() passed" + (f" ({result})" if result is not None else ""))
    return 0


def _forms(options) -> int:
    from . import supported_forms

    path = Path(options.out) if options.out else supported_forms.PAGE_PATH
    if options.write:
        print(f"wrote {supported_forms.write(path)}")
        return 0
    if options.check:
        if path.exists() and path.read_text() == supported_forms.render():
            return 0
        print(f"{path} is not current: run `{supported_forms.REGENERATE}`", file=sys.stderr)
        return 1
    print(supported_forms.render(), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    options = _parser().parse_args(argv)
    command = {"report": _report, "autotune": _autotune, "code": _code, "lower": _lower, "run": _run,
               "forms": _forms}[options.command]
    try:
        return command(options)
    except _Usage as err:
        print(err, file=sys.stderr)
        return 2
    except exc.PallasiteError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
