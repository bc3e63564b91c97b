"""``simulator search SCENARIO``: the best plans for a scenario's model, system and batch (docs/search.md)."""

from __future__ import annotations

import sys

from simulator.cli.args import bounded_int, output_path, plot_path, positive_int, scenario_path
from simulator.cli.output import print_json
from simulator.report.files import write_parquet, write_text
from simulator.report.search import render_search
from simulator.search import MAX_SEARCH_PLANS, search
from simulator.search.rank import OBJECTIVES, why
from simulator.search.run import NoPlanFits


def register(subparsers) -> None:
    p = subparsers.add_parser("search", help="search every valid plan of a scenario and rank the best")
    p.add_argument("scenario", type=scenario_path, help="scenario YAML (parallel: values pin dimensions, search: restricts the others)")
    p.add_argument("--top", type=positive_int, default=10, help="plans to print (default 10)")
    p.add_argument("--objective", choices=tuple(OBJECTIVES), default="step_time",
                   help="rank by step time (smallest first), tokens per second per GPU (largest first), or the "
                        "whole run's days, cost or energy (smallest first; needs a run: section)")
    p.add_argument("--max-plans", type=bounded_int(1, what="a plan count"), default=MAX_SEARCH_PLANS,
                   help=f"refuse a plan space larger than this (default {MAX_SEARCH_PLANS:,})")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="evaluate here or on a Ray cluster (pip install -e '.[ray]')")
    p.add_argument("--ray-address", help="Ray cluster address (default: RAY_ADDRESS, else a local cluster)")
    p.add_argument("--json", action="store_true", help="print the JSON object of docs/interface.md")
    p.add_argument("--csv", metavar="FILE", type=output_path, help="write every valid plan as CSV")
    p.add_argument("--parquet", metavar="FILE", type=output_path, help="write every valid plan as Parquet")
    p.add_argument("--plot", metavar="FILE", type=plot_path,
                   help="step time vs device peak memory and vs GPU count of every valid plan, with "
                        "their Pareto fronts")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=_search)


def _search(args) -> int:
    progress, bar = None, None
    if not args.no_progress and not args.json and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(unit="plan", file=sys.stderr, mininterval=0.5)
        progress = bar.update
    try:
        result = search(args.scenario, objective=args.objective, max_plans=args.max_plans, executor=args.executor,
                        ray_address=args.ray_address, progress=progress)
    except NoPlanFits as exc:  # --json still prints its object (no plans, and why: no_fit); exit 2 with the message
        if args.json:
            print_json(exc.result)
        raise
    finally:
        if bar is not None:
            bar.close()
    if args.csv:
        write_text(args.csv, result.to_frame().to_csv(index=False))
    if args.parquet:
        write_parquet(args.parquet, result.to_frame())
    if args.plot:
        from simulator.report.search import plot_search

        plot_search(result, args.plot)
    if args.json:
        print_json(result.to_dict(args.top))
        return 0
    line = why(result.plans[0], result.plans[1]) if len(result.plans) > 1 else None
    print(render_search(result, args.top, line))
    for path in (args.csv, args.parquet, args.plot):
        if path:
            print(f"wrote {len(result.plans):,} plans to {path}")
    return 0
