"""``simulator sweep S.yaml -o results.csv`` and ``simulator compare A.yaml B.yaml``."""

from __future__ import annotations

import sys

from simulator import simulate
from simulator.cli.args import bounded_int, output_path, plot_path, positive_int, scenario_path
from simulator.cli.run_cmd import force_calibration_argument, load
from simulator.entries.simulate import SUMMARY_KEYS
from simulator.entries.sweep import plan_sweep, run_sweep
from simulator.errors import UserError
from simulator.limits import MAX_SWEEP_PLANS
from simulator.report.compare import render_comparison
from simulator.report.files import write_text


def register(subparsers) -> None:
    sweep = subparsers.add_parser("sweep", help="evaluate every plan of a sweep file into a CSV")
    sweep.add_argument("scenario", type=scenario_path, help="scenario YAML with sweep: and/or zip:")
    sweep.add_argument("-o", "--output", required=True, type=output_path, help="CSV file (one row per plan)")
    sweep.add_argument("--processes", type=positive_int, default=None, help="worker processes (default: all cores)")
    sweep.add_argument("--max-plans", type=bounded_int(1, what="a plan count"), default=MAX_SWEEP_PLANS,
                       help=f"refuse a sweep of more plans than this (default {MAX_SWEEP_PLANS:,})")
    sweep.add_argument("--no-progress", action="store_true", help="no progress bar")
    sweep.add_argument("--plot", metavar="FILE", type=plot_path, help="heat map of --value over --x and --y")
    sweep.add_argument("--x", help="swept key on the x axis (default: the first swept key)")
    sweep.add_argument("--y", help="swept key on the y axis (default: the second swept key)")
    sweep.add_argument("--value", default="memory.peak_GiB", help="column to colour by (default memory.peak_GiB)")
    force_calibration_argument(sweep)
    sweep.set_defaults(handler=_sweep)
    compare = subparsers.add_parser("compare", help="two scenarios side by side with deltas")
    compare.add_argument("a", type=scenario_path, help="scenario A")
    compare.add_argument("b", type=scenario_path, help="scenario B")
    compare.add_argument("--markdown", action="store_true")
    force_calibration_argument(compare)
    compare.set_defaults(handler=_compare)


def _sweep(args) -> int:
    import pandas as pd

    plan = plan_sweep(args.scenario, max_plans=args.max_plans, force_calibration=args.force_calibration)
    axes = _heatmap_axes(args, plan) if args.plot else None
    print(f"{len(plan.points):,} plans to evaluate", file=sys.stderr)
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
    if axes:
        from simulator.report.plots import plot_sweep_heatmap

        print(f"wrote {plot_sweep_heatmap(frame, *axes, args.plot)}")
    return 0


def _heatmap_axes(args, plan) -> tuple[str, str, str]:
    """--x, --y and --value: columns of the sweep (swept keys or result columns), checked before any plan runs."""
    keys = list(plan.keys)
    x, y = args.x or (keys[0] if keys else None), args.y or (keys[1] if len(keys) > 1 else None)
    columns = [*keys, *SUMMARY_KEYS]
    for flag, key in (("--x", x), ("--y", y), ("--value", args.value)):
        if key is None or key not in columns:
            raise UserError(f"{flag} {key!r} is not a column of the sweep; swept keys: {', '.join(keys)}; result "
                            f"columns: {', '.join(SUMMARY_KEYS)}")
    return x, y, args.value


def _compare(args) -> int:
    a, b = simulate(load(args.a, args.force_calibration)), simulate(load(args.b, args.force_calibration))
    print(render_comparison(a, b, "markdown" if args.markdown else "text"))
    return 0
