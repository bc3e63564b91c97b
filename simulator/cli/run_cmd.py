"""``simulator run [SCENARIO] [--json|--csv|--markdown]`` and ``simulator memory SCENARIO``."""

from __future__ import annotations

import sys

from simulator import load_scenario, simulate
from simulator.cli.args import output_path, plot_path, scenario_path
from simulator.cli.output import print_json
from simulator.errors import UserError
from simulator.report.memory import render_items, render_memory_table
from simulator.report.result import header, render_result
from simulator.resources import default_scenario

DEFAULT_SCENARIO = default_scenario()  # shipped with the package: `simulator run` works from any folder


def register(subparsers) -> None:
    run = subparsers.add_parser("run", help="evaluate a scenario (default: scenarios/quickstart.yaml)")
    run.add_argument("scenario", nargs="?", default=str(DEFAULT_SCENARIO), type=scenario_path, help="scenario YAML or shipped scenario name")
    formats = run.add_mutually_exclusive_group()
    formats.add_argument("--json", action="store_true", help="print docs/interface.md's JSON object")
    formats.add_argument("--csv", action="store_true", help="print one CSV row (flattened keys)")
    formats.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    run.add_argument("--plot", metavar="FILE", type=plot_path, help="draw memory per stage, time breakdown and timeline into FILE")
    run.add_argument("--trace", metavar="FILE", type=output_path, help="write a Chrome trace of the step (opens in Perfetto)")
    force_calibration_argument(run)
    run.set_defaults(handler=_run)
    memory = subparsers.add_parser("memory", help="per-GPU memory per pipeline stage of a scenario")
    memory.add_argument("scenario", type=scenario_path, help="scenario YAML or shipped scenario name")
    memory.add_argument("--items", action="store_true", help="list every item of every stage with its formula")
    memory.add_argument("--json", action="store_true", help="print the memory object as JSON")
    force_calibration_argument(memory)
    memory.set_defaults(handler=_memory)


def force_calibration_argument(parser) -> None:
    parser.add_argument("--force-calibration", action="store_true",
                        help="apply system.calibration even if it was measured on another system (a warning)")


def load(path: str, force_calibration: bool = False):
    """The scenario at ``path``; its notes (a forced calibration) are printed as warnings on stderr."""
    scenario = load_scenario(path, {"system": {"force_calibration": True}} if force_calibration else None)
    for note in scenario.notes:
        print(f"warning: {note}", file=sys.stderr)
    return scenario


def _run(args) -> int:
    from simulator.cli.multimodal_cmd import is_multimodal, run_multimodal

    if is_multimodal(args.scenario):  # a `multimodal:` section: submodules with plans of their own
        return run_multimodal(args)
    scenario = load(args.scenario, args.force_calibration)
    if args.trace and scenario.training.mode == "inference":
        raise UserError("--trace needs a training step; this scenario is training.mode: inference")
    result = simulate(scenario)
    if args.json:
        print_json(result.to_dict(), indent=2)
    elif args.csv:
        print(result.to_frame().to_csv(index=False), end="")
    else:
        print(render_result(result, "markdown" if args.markdown else "text"))
    if args.plot:
        from simulator.report.plots import plot_result

        print(f"wrote {plot_result(result, args.plot)}")
    if args.trace:
        from simulator.report.trace import write_chrome_trace

        print(f"wrote {write_chrome_trace(result.step, args.trace)}")
    return 0


def _memory(args) -> int:
    result = simulate(load(args.scenario, args.force_calibration))
    if args.json:
        print_json(result.to_dict()["memory"], indent=2)
        return 0
    print(header(result))
    print()
    print(render_memory_table(result.memory))
    if args.items:
        for stage in range(len(result.memory.stages)):
            print()
            print(render_items(result.memory, stage))
    return 0
