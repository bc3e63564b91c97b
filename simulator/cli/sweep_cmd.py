"""``simulator sweep S.yaml -o results.csv`` and ``simulator compare A.yaml B.yaml``."""

from __future__ import annotations

import sys

from simulator.report.compare import render_comparison
from simulator.report.files import write_text
from simulator.scenario import load_scenario, simulate
from simulator.scenario.sweep import plan_sweep, run_sweep


def register(subparsers) -> None:
    sweep = subparsers.add_parser("sweep", help="evaluate every plan of a sweep file into a CSV")
    sweep.add_argument("scenario", help="scenario YAML with sweep: and/or zip:")
    sweep.add_argument("-o", "--output", required=True, help="CSV file (one row per plan)")
    sweep.add_argument("--processes", type=int, default=None, help="worker processes (default: all cores)")
    sweep.add_argument("--no-progress", action="store_true", help="no progress bar")
    sweep.set_defaults(handler=_sweep)
    compare = subparsers.add_parser("compare", help="two scenarios side by side with deltas")
    compare.add_argument("a", help="scenario A")
    compare.add_argument("b", help="scenario B")
    compare.add_argument("--markdown", action="store_true")
    compare.set_defaults(handler=_compare)


def _sweep(args) -> int:
    import pandas as pd

    plan = plan_sweep(args.scenario)
    progress = None
    if not args.no_progress:
        from tqdm import tqdm

        def progress(iterator):
            return tqdm(iterator, total=len(plan.points), unit="plan", file=sys.stderr, mininterval=0.5)
    rows = run_sweep(plan, processes=args.processes, progress=progress)
    frame = pd.DataFrame(rows)
    write_text(args.output, frame.to_csv(index=False))
    counts = frame["status"].value_counts().to_dict()
    print(f"{len(rows)} plans -> {args.output}: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in ("ok", "oom",
                                                                                                 "invalid")))
    return 0


def _compare(args) -> int:
    a, b = simulate(load_scenario(args.a)), simulate(load_scenario(args.b))
    print(render_comparison(a, b, "markdown" if args.markdown else "text"))
    return 0
