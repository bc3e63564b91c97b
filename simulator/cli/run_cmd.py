"""``simulator run [SCENARIO] [--json|--csv|--markdown]`` and ``simulator memory SCENARIO``."""

from __future__ import annotations

import json

from simulator.cli.args import output_path
from simulator.errors import UserError
from simulator.report.memory import render_items, render_memory_table
from simulator.report.result import header, render_result
from simulator.resources import default_scenario
from simulator.scenario import load_scenario, simulate

DEFAULT_SCENARIO = default_scenario()  # shipped with the package: `simulator run` works from any folder


def register(subparsers) -> None:
    run = subparsers.add_parser("run", help="evaluate a scenario (default: scenarios/quickstart.yaml)")
    run.add_argument("scenario", nargs="?", default=str(DEFAULT_SCENARIO), help="scenario YAML")
    formats = run.add_mutually_exclusive_group()
    formats.add_argument("--json", action="store_true", help="print docs/interface.md's JSON object")
    formats.add_argument("--csv", action="store_true", help="print one CSV row (flattened keys)")
    formats.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    run.add_argument("--plot", metavar="FILE", type=output_path, help="draw memory per stage, time breakdown and timeline into FILE")
    run.add_argument("--trace", metavar="FILE", type=output_path, help="write a Chrome trace of the step (opens in Perfetto)")
    run.set_defaults(handler=_run)
    memory = subparsers.add_parser("memory", help="per-GPU memory per pipeline stage of a scenario")
    memory.add_argument("scenario", help="scenario YAML")
    memory.add_argument("--items", action="store_true", help="list every item of every stage with its formula")
    memory.add_argument("--json", action="store_true", help="print the memory object as JSON")
    memory.set_defaults(handler=_memory)


def _run(args) -> int:
    result = simulate(load_scenario(args.scenario))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    elif args.csv:
        print(result.to_frame().to_csv(index=False), end="")
    else:
        print(render_result(result, "markdown" if args.markdown else "text"))
    if args.plot:
        from simulator.report.plots import plot_result

        print(f"wrote {plot_result(result, args.plot)}")
    if args.trace:
        from simulator.report.trace import write_chrome_trace

        if result.step is None:
            raise UserError("--trace needs a training step; this scenario is training.mode: inference")

        print(f"wrote {write_chrome_trace(result.step, args.trace)}")
    return 0


def _memory(args) -> int:
    result = simulate(load_scenario(args.scenario))
    if args.json:
        print(json.dumps(result.to_dict()["memory"], indent=2))
        return 0
    print(header(result))
    print()
    print(render_memory_table(result.memory))
    if args.items:
        for stage in range(len(result.memory.stages)):
            print()
            print(render_items(result.memory, stage))
    return 0
