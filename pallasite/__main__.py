"""`python -m pallasite report MODULE:KERNEL [--block-sizes 64,64] [--loop-type fori_loop]`.

Prints the kernel's schedule report (`pallasite.report`) for the module's
`example_inputs()`, under the kernel's own config unless options override it.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from . import exc
from .plan.loops import STRATEGIES
from .report import format_report, schedule_report


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pallasite")
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser("report", help="print a kernel's schedule for its module's example_inputs()")
    report.add_argument("target", help="MODULE:KERNEL, e.g. examples.attention:attention")
    report.add_argument("--block-sizes", help="comma-separated block sizes, e.g. 64,64")
    report.add_argument("--loop-type", choices=sorted(STRATEGIES), help="pallas_loop_type")
    return parser


def main(argv: list[str] | None = None) -> int:
    options = _parser().parse_args(argv)
    module_name, _, kernel_name = options.target.partition(":")
    if not kernel_name:
        print(f"expected MODULE:KERNEL, got {options.target!r}", file=sys.stderr)
        return 2
    module = importlib.import_module(module_name)
    kernel = getattr(module, kernel_name)
    if not hasattr(module, "example_inputs"):
        print(f"{module_name} has no example_inputs()", file=sys.stderr)
        return 2
    config = {}
    if options.block_sizes:
        config["block_sizes"] = [int(b) for b in options.block_sizes.split(",")]
    if options.loop_type:
        config["pallas_loop_type"] = options.loop_type
    try:
        report = schedule_report(kernel, module.example_inputs(), **config)
    except exc.PallasiteError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(format_report(f"schedule of {options.target}", report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
