"""The ``simulator`` command line: argument parsing and printing only.

Every subcommand lives in its own module with a ``register(subparsers)`` function that adds its parser and sets
``handler``. A :class:`~simulator.errors.UserError` becomes one ``error:`` line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys

from simulator.errors import UserError

EXIT_USER_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    from simulator.cli import (
        collective_cmd,
        hardware_cmd,
        measure_cmd,
        moe_cmd,
        regress_cmd,
        run_cmd,
        schema_cmd,
        sweep_cmd,
        topology_cmd,
    )

    parser = argparse.ArgumentParser(
        prog="simulator",
        description="Analytical cost model for distributed LLM training: memory per GPU and step time.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (run_cmd, sweep_cmd, collective_cmd, hardware_cmd, topology_cmd, moe_cmd, measure_cmd,
                   schema_cmd, regress_cmd):
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USER_ERROR
    try:
        return args.handler(args) or 0
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except BrokenPipeError:
        return 0
