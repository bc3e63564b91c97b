"""A 10,800-plan sweep of Llama-3-70B on 16 DGX H100 nodes (tp x pp x vpp x cp x zero x micro-batch x recompute).

Target (issue 6): under 30 s on 2 cores, progress bar, CSV loadable by pandas with one row per plan.
Run: python benchmarks/bench_sweep.py [--processes N] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.entries.sweep import plan_sweep, run_sweep  # noqa: E402

SWEEP = """\
name: llama3-70b-16-nodes-sweep
system: {profile: dgx_h100, nodes: 16}
model: {preset: llama3-70b}
parallel: {distributed_optimizer: false}
training: {seq_len: 8192, micro_batch: 1, global_batch: 1024, precision: bf16}
sweep:
  parallel.tp: [1, 2, 4, 8]
  parallel.pp: [1, 2, 4, 8, 16]
  parallel.vpp: [1, 2, 4]
  parallel.cp: [1, 2, 4]
  parallel.zero: [0, 1, 2, 3]
  training.micro_batch: [1, 2, 4, 8, 16]
  parallel.recompute: [none, selective, full]
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sweep.yaml"
        path.write_text(SWEEP)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            plan = plan_sweep(path)
            rows = run_sweep(plan, processes=args.processes)
            frame = pd.DataFrame(rows)
            frame.to_csv(Path(tmp) / "out.csv", index=False)
            times.append(time.perf_counter() - start)
        loaded = pd.read_csv(Path(tmp) / "out.csv")
    counts = loaded["status"].value_counts().to_dict()
    print(f"{len(plan.points)} plans, {len(loaded)} CSV rows ({counts}); processes {args.processes}")
    print(f"median {statistics.median(times):.2f} s over {args.repeats} runs (min {min(times):.2f}, "
          f"max {max(times):.2f}); target < 30 s")


if __name__ == "__main__":
    main()
