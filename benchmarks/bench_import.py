"""Median wall time of ``python -c "import simulator"`` in fresh interpreters (target: < 0.3 s).

Also reports whether pandas, matplotlib, networkx or scipy were imported by the package import (they must not be).
Run: python benchmarks/bench_import.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

CHECK = "import sys, simulator; print(','.join(m for m in ('pandas', 'matplotlib', 'networkx', 'scipy') if m in sys.modules))"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import simulator"], check=True)
        times.append(time.perf_counter() - start)
    baseline = []
    for _ in range(args.runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        baseline.append(time.perf_counter() - start)
    heavy = subprocess.run([sys.executable, "-c", CHECK], check=True, capture_output=True, text=True).stdout.strip()
    print(f"import simulator: median {statistics.median(times):.3f} s over {args.runs} runs "
          f"(bare interpreter start {statistics.median(baseline):.3f} s)")
    print(f"heavy modules loaded by the import: {heavy or 'none'}")


if __name__ == "__main__":
    main()
