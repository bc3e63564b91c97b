"""Median wall time of ``simulator validate`` (every default report) in fresh interpreters, and its ratio to the
CLI's start-up (``simulator --help``) timed in the same run, so a loaded machine moves both (issue 27 item 7: the
target is under 2 s). ``--reports`` adds each report's median time inside one process (fresh caches each run).
``--baseline DIR`` also times ``simulator validate`` from another checkout (``git archive REV | tar -x -C DIR``),
alternating with this one run by run, and prints the ratio of the medians (wall and CPU seconds of the child
processes): on a shared machine only a ratio measured in one run means anything.

Run: python benchmarks/bench_validate.py [--runs 5] [--reports] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

TARGET_S = 2.0


def _cli_median(args: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "simulator", *args], check=False, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _versus(baseline_dir: str, runs: int) -> None:
    """Median wall and CPU seconds of ``simulator validate`` from ``baseline_dir`` and from this checkout,
    alternated run by run; exits if the two print different tables."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    times: dict[str, tuple[list[float], list[float]]] = {"baseline": ([], []), "this": ([], [])}
    outputs: dict[str, bytes] = {}
    for _ in range(runs):
        for label, root in (("baseline", baseline_dir), ("this", here)):
            env = {**os.environ, "PYTHONPATH": root}
            cpu, start = _children_cpu_s(), time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "simulator", "validate"], check=False, capture_output=True,
                                  env=env, cwd=root)
            times[label][0].append(time.perf_counter() - start)
            times[label][1].append(_children_cpu_s() - cpu)
            outputs[label] = done.stdout
    if outputs["baseline"] != outputs["this"]:
        sys.exit("the two checkouts print different tables")
    (bw, bc), (tw, tc) = ([statistics.median(x) for x in times[k]] for k in ("baseline", "this"))
    print(f"baseline {bw:.2f} s wall, {bc:.2f} s CPU; this {tw:.2f} s wall, {tc:.2f} s CPU; "
          f"ratio this/baseline {tw / bw:.2f} wall, {tc / bc:.2f} CPU (medians of {runs}, same output)")


def _report_medians(runs: int) -> dict[str, float]:
    from simulator.caching import clear_caches
    from simulator.validation.reports import REPORTS

    times: dict[str, list[float]] = {name: [] for name in REPORTS}
    for _ in range(runs):
        clear_caches(loaded=True)
        for name, report in REPORTS.items():
            start = time.perf_counter()
            report()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--reports", action="store_true", help="also time each report in one process")
    parser.add_argument("--baseline", metavar="DIR", help="another checkout to time against, alternating runs")
    args = parser.parse_args()
    if args.baseline:
        _versus(args.baseline, args.runs)
        return
    baseline = _cli_median(["--help"], args.runs)
    validate = _cli_median(["validate"], args.runs)
    print(f"simulator validate: median {validate:.2f} s over {args.runs} runs (target {TARGET_S:.1f} s); "
          f"simulator --help {baseline:.2f} s; ratio {validate / baseline:.1f}x")
    if args.reports:
        for name, seconds in sorted(_report_medians(args.runs).items(), key=lambda kv: -kv[1]):
            print(f"  {name:12s} {seconds:6.3f} s")


if __name__ == "__main__":
    main()
