"""Median wall time to execute each notebooks/*.ipynb top to bottom in a fresh python3 kernel (target: < 60 s
each on 2 CPU cores), beside the median time of a one-cell notebook measured in the same run (kernel start and
the package import), so a loaded machine shows as a larger baseline rather than a slower notebook.

tests/notebooks executes the notebooks and checks their findings; how long they take is measured here, not there
(a timed test flakes on a shared CI machine: 07_multimodal_distmm took 76.7 s under CI's load, 18 s here idle).
Run: python benchmarks/bench_notebooks.py [--runs 3] [--only 07]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import nbclient
import nbformat

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 60.0
BASELINE_SOURCE = "import simulator"


def _execute(nb: nbformat.NotebookNode) -> float:
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}})
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="executions per notebook (the median is reported)")
    parser.add_argument("--only", default="", help="run only notebooks whose name contains this")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    os.environ["MPLBACKEND"] = "agg"
    baseline_nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(BASELINE_SOURCE)])
    baseline = statistics.median(_execute(baseline_nb) for _ in range(args.runs))
    print(f"baseline (kernel start + {BASELINE_SOURCE!r}): median {baseline:.2f} s over {args.runs} runs")
    print(f"{'notebook':<40} {'median s':>9} {'/ baseline':>10}  target < {TARGET_S:.0f} s")
    over = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        if args.only not in path.stem:
            continue
        times = [_execute(nbformat.read(path, as_version=4)) for _ in range(args.runs)]
        median = statistics.median(times)
        print(f"{path.stem:<40} {median:>9.2f} {median / baseline:>10.1f}")
        if median >= TARGET_S:
            over.append(path.stem)
    print(f"over the target: {', '.join(over) or 'none'}")


if __name__ == "__main__":
    main()
