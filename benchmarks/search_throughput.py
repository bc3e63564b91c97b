"""Benchmark: plans per second per core of the plan search's fast path, against ``simulate()`` on the same plans.

Cases (issue 13):
  (a) Llama-3-70B on 16 DGX H100 nodes (scenarios/search_llama3_70b_h100.yaml), the default plan space;
  (b) the 1T model on 512 A100s (Korthikanti et al. 2023 Table 5: scenarios/korthikanti_1t.yaml without its
      ``parallel:``), the default plan space.

For each case it draws ``--sample`` candidates of the space (seeded), and reports, as medians over ``--repeats``:
  - candidates/s: every candidate through the rules, memory pruning and (when valid) the step time, which is
    what a search sees;
  - valid plans/s: only the candidates that pass rules and memory (the ones whose step time is computed);
  - simulate() plans/s on the first ``--reference`` of those valid plans, and the fast path's ratio to it.
One process, one core (the machine's other cores are not used). Run:
``python benchmarks/search_throughput.py [--sample 400] [--repeats 3] [--reference 20]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

from simulator.errors import UserError
from simulator.scenario.document import read_document
from simulator.scenario.simulate import simulate
from simulator.search.evaluate import evaluate_points, resolve
from simulator.search.run import candidates, search_context

ROOT = Path(__file__).resolve().parents[1]
CASES = {"a: llama3-70b, 16 x DGX H100": ROOT / "scenarios" / "search_llama3_70b_h100.yaml",
         "b: 1T, 512 x A100 (Korthikanti)": ROOT / "scenarios" / "korthikanti_1t.yaml"}
TARGETS = {"a: llama3-70b, 16 x DGX H100": 20_000, "b: 1T, 512 x A100 (Korthikanti)": 5_000}


def _context(path: Path):
    data = read_document(path).data
    data.pop("parallel", None)
    return search_context(data)


def _valid(ctx, points):
    out = []
    for p in points:
        try:
            resolve(ctx, p)
        except UserError:
            continue
        out.append(p)
    return out


def run_case(name: str, path: Path, sample: int, repeats: int, reference: int, seed: int = 0) -> dict:
    ctx = _context(path)
    points, skipped = candidates(ctx, 10**8)
    rng = random.Random(seed)
    drawn = rng.sample(points, min(sample, len(points)))
    rates, valid_rates, valid_rows = [], [], []
    for _ in range(repeats):
        start = time.perf_counter()
        out = evaluate_points(ctx, drawn)
        seconds = time.perf_counter() - start
        rates.append(len(drawn) / seconds)
        valid_rows = out.rows
        valid_rates.append(len(out.rows) / seconds if out.rows else 0.0)
    fits = [p for p in _valid(ctx, drawn)][: 10 * reference]
    fast_rows = evaluate_points(ctx, fits).rows
    keys = {(r["tp"], r["pp"], r["vpp"], r["cp"], r["ep"], r["schedule"], r["recompute"], r["sharding"],
             r["micro_batch"]) for r in fast_rows}
    ref_points = [p for p in fits if (p["tp"], p["pp"], p["vpp"], p["cp"], p["ep"], p["schedule"], p["recompute"],
                                      p["sharding"], p["micro_batch"]) in keys][:reference]
    start = time.perf_counter()
    for p in ref_points:
        simulate(ctx.fixed.with_plan(resolve(ctx, p)))
    sim_s = (time.perf_counter() - start) / max(len(ref_points), 1)
    start = time.perf_counter()
    evaluate_points(ctx, ref_points)
    fast_s = (time.perf_counter() - start) / max(len(ref_points), 1)
    return {"case": name, "space": len(points) + skipped.evaluated, "sample": len(drawn),
            "valid_in_sample": len(valid_rows), "candidates_per_s": statistics.median(rates),
            "valid_plans_per_s": statistics.median(valid_rates), "simulate_plans_per_s": 1 / sim_s,
            "fast_plans_per_s_same_plans": 1 / fast_s, "ratio": sim_s / fast_s, "reference_plans": len(ref_points),
            "target": TARGETS[name]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reference", type=int, default=20)
    parser.add_argument("--case", choices=("a", "b", "both"), default="both")
    args = parser.parse_args()
    for name, path in CASES.items():
        if args.case != "both" and not name.startswith(args.case):
            continue
        r = run_case(name, path, args.sample, args.repeats, args.reference)
        print(f"{r['case']}: space {r['space']:,} candidates; sample {r['sample']} ({r['valid_in_sample']} valid)\n"
              f"  fast path: {r['candidates_per_s']:,.0f} candidates/s/core, {r['valid_plans_per_s']:,.0f} valid "
              f"plans/s/core (median of {args.repeats}; target {r['target']:,} plans/s/core)\n"
              f"  same {r['reference_plans']} valid plans: fast {r['fast_plans_per_s_same_plans']:,.1f} plans/s, "
              f"simulate() {r['simulate_plans_per_s']:,.1f} plans/s: {r['ratio']:.1f}x")


if __name__ == "__main__":
    main()
