"""``simulator sweep S.yaml -o results.csv`` and ``simulator compare A.yaml B.yaml``."""

from __future__ import annotations

import sys

from simulator.cli.args import output_path
from simulator.report.compare import render_comparison
from simulator.report.files import write_text
from simulator.scenario import load_scenario, simulate
from simulator.scenario.sweep import plan_sweep, run_sweep


def register(subparsers) -> None:
    sweep = subparsers.add_parser("sweep", help="evaluate every plan of a sweep file into a CSV")
    sweep.add_argument("scenario", help="scenario YAML with sweep: and/or zip:")
    sweep.add_argument("-o", "--output", required=True, type=output_path, help="CSV file (one row per plan)")
    sweep.add_argument("--processes", type=int, default=None, help="worker processes (default: all cores)")
    sweep.add_argument("--no-progress", action="store_true", help="no progress bar")
    sweep.add_argument("--plot", metavar="FILE", type=output_path, help="heat map of --value over --x and --y")
    sweep.add_argument("--x", help="swept key on the x axis (default: the first swept key)")
    sweep.add_argument("--y", help="swept key on the y axis (default: the second swept key)")
    sweep.add_argument("--value", default="memory.peak_GiB", help="column to colour by (default memory.peak_GiB)")
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
    if args.plot:
        _heatmap(args, plan, frame)
    return 0


def _heatmap(args, plan, frame) -> None:
    from simulator.errors import UserError
    from simulator.report.plots import plot_sweep_heatmap

    keys = list(plan.keys)
    x, y = args.x or (keys[0] if keys else None), args.y or (keys[1] if len(keys) > 1 else None)
    for flag, key in (("--x", x), ("--y", y), ("--value", args.value)):
        if key is None or key not in frame:
            raise UserError(f"{flag} {key!r} is not a column of the sweep; columns: {', '.join(frame.columns)}")
    print(f"wrote {plot_sweep_heatmap(frame, x, y, args.value, args.plot)}")


def _compare(args) -> int:
    a, b = simulate(load_scenario(args.a)), simulate(load_scenario(args.b))
    print(render_comparison(a, b, "markdown" if args.markdown else "text"))
    return 0
