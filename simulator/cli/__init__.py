"""The ``simulator`` command line: argument parsing and printing only.

Every subcommand lives in its own module with a ``register(subparsers)`` function that adds its parser and sets
``handler``. Exit status (docs/errors.md): 0 success (warnings on stderr), 2 a user mistake (a
:class:`~simulator.errors.UserError` becomes one ``error:`` message on stderr), 1 a bug of ours: a short request to
report it, with the traceback shown only under ``--debug``.
"""

from __future__ import annotations

import argparse
import sys

from simulator.errors import UserError

EXIT_USER_ERROR = 2
EXIT_BUG = 1


#: subcommand -> the module that registers it; only the module a command needs is imported (start-up time)
COMMANDS = {
    "run": "run_cmd", "memory": "run_cmd", "sweep": "sweep_cmd", "compare": "sweep_cmd",
    "collective": "collective_cmd", "calibrate": "collective_cmd", "moe": "moe_cmd", "hardware": "hardware_cmd",
    "topology": "topology_cmd", "validate": "validate_cmd", "regress": "regress_cmd", "schema": "schema_cmd",
    "measure": "measure_cmd", "serve": "serve_cmd", "search": "search_cmd", "scenarios": "scenarios_cmd",
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv`` naming a subcommand, only that subcommand's module is imported."""
    import importlib

    parser = argparse.ArgumentParser(
        prog="simulator",
        description="Analytical cost model for distributed LLM training: memory per GPU and step time.")
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an internal error (anywhere on the line)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    command = next((a for a in argv or () if not a.startswith("-")), None)
    modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        importlib.import_module(f"simulator.cli.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv  # accepted anywhere on the line
    argv = [a for a in argv if a != "--debug"]
    parser = build_parser(argv)
    args = parser.parse_args(argv)  # a bad argument: argparse prints usage and the rule, SystemExit(2)
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
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence: a bug, reported as one
        return _internal_error(exc, argv, debug)


def _internal_error(exc: Exception, argv: list[str], debug: bool) -> int:
    """A bug of ours (not a user mistake): say so, ask for a report, and keep the traceback behind ``--debug``."""
    import traceback

    if debug:
        traceback.print_exc()
    print(f"internal error: {type(exc).__name__}: {exc}\n"
          f"This is a bug in the simulator, not a mistake in your input. Please report it with the command line\n"
          f"  simulator {' '.join(argv)}\n"
          f"and the files it reads{'' if debug else '; rerun with --debug for the traceback'}.",
          file=sys.stderr)
    return EXIT_BUG


def console() -> None:
    """Entry point of the ``simulator`` console script and ``python -m simulator``: run :func:`main`, flush, and
    leave without tearing the interpreter down (freeing a large cluster's graph object by object takes ~0.15 s;
    every file the CLI writes is closed before this point)."""
    import os

    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader (``| head``) left early: not an error of ours
        pass
    os._exit(code)

