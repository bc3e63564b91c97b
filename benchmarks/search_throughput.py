"""Benchmark: plans per second per core of the plan search, against ``simulate()`` on the same plans, in one run.

Cases (issue 13):
  (a) Llama-3-70B on 16 DGX H100 nodes (scenarios/search_llama3_70b_h100.yaml), the default plan space;
  (b) the 1T model on 512 A100s (Korthikanti et al. 2023 Table 5: scenarios/korthikanti_1t.yaml without its
      ``parallel:``), the default plan space.

For each case, medians over ``--repeats`` full searches (caches cleared before each):
  - candidates/s: every point of the space through the rules, memory pruning and (when valid) the step time;
  - valid plans/s: the plans that pass rules and memory (those whose step time is computed) per second of search;
and, on ``--reference`` valid plans drawn from the result (seeded), seconds per plan of the fast path
(``evaluate_points`` on just those plans, caches cleared) and of ``simulate()``, and their ratio; and the whole
search's seconds per valid plan (rejected candidates included) against ``simulate()``'s per plan. One process, one
core; times are the process's CPU time (``time.process_time``), so that other work on the machine does not count.
Run: ``python benchmarks/search_throughput.py [--case a|b|both] [--repeats 3] [--reference 20]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

from simulator.memory import activations, estimate, nccl
from simulator.model import flops, spec, strict
from simulator.plan import params, ranks, rules
from simulator.scenario.document import read_document
from simulator.scenario.simulate import simulate
from simulator.schedule import fast_timeline
from simulator.search import evaluate, search
from simulator.search.evaluate import evaluate_points, resolve
from simulator.search.run import search_context

ROOT = Path(__file__).resolve().parents[1]
CASES = {"a": ("Llama-3-70B, 16 x DGX H100", ROOT / "scenarios" / "search_llama3_70b_h100.yaml", 20_000),
         "b": ("1T, 512 x A100 (Korthikanti)", ROOT / "scenarios" / "korthikanti_1t.yaml", 5_000)}


def _clear() -> None:
    """Empty every process-wide cache a search fills, so each repeat starts cold."""
    for cached in (fast_timeline._graph, params._stage_params, params._all_stage_params,
                   activations.cached_layer_items, activations.cached_layer_bytes, estimate._states,
                   estimate._scaled_items, estimate._fixed_sum, flops._layer_kinds, flops.model_flops,
                   spec.moe_layer_flags, rules.parse_order, nccl._nccl_bytes, strict._numeric_fields,
                   ranks._grid_groups, evaluate._reason):
        cached.cache_clear()
    estimate._SCALED_BY_ID.clear()
    nccl._BY_LAYOUT.clear()
    nccl._FABRICS.clear()


def _point(row: dict) -> dict:
    keys = ("gpus", "tp", "cp", "pp", "vpp", "ep", "schedule", "sp", "recompute", "sharding", "micro_batch")
    return {k: row[k] for k in keys}


def run_case(key: str, repeats: int, reference: int) -> dict:
    name, path, target = CASES[key]
    data = read_document(path).data
    data.pop("parallel", None)
    rates, valid_rates, seconds = [], [], []
    for _ in range(repeats):
        _clear()
        start = time.process_time()
        result = search(data)
        cpu = time.process_time() - start
        rates.append(result.evaluated / cpu)
        valid_rates.append(result.valid / cpu)
        seconds.append(cpu)
    ctx = search_context(data)
    rows = random.Random(0).sample(result.plans, min(reference, len(result.plans)))
    points = [{**_point(r), "sp": r["sp"] or r["tp"] == 1} for r in rows]
    _clear()
    start = time.process_time()
    evaluate_points(ctx, points)
    fast_s = (time.process_time() - start) / len(points)
    start = time.process_time()
    for p in points:
        simulate(ctx.fixed.with_plan(resolve(ctx, p)))
    sim_s = (time.process_time() - start) / len(points)
    return {"name": name, "evaluated": result.evaluated, "valid": result.valid, "candidates_per_s":
            statistics.median(rates), "valid_per_s": statistics.median(valid_rates), "fast_s": fast_s,
            "simulate_s": sim_s, "reference": len(points), "target": target,
            "search_s_per_valid": statistics.median(seconds) / result.valid}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=("a", "b", "both"), default="both")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reference", type=int, default=20)
    args = parser.parse_args()
    for key in ("a", "b") if args.case == "both" else (args.case,):
        r = run_case(key, args.repeats, args.reference)
        print(f"({key}) {r['name']}: {r['evaluated']:,} candidates, {r['valid']:,} valid\n"
              f"    search: {r['candidates_per_s']:,.0f} candidates/s/core, {r['valid_per_s']:,.0f} valid plans/s/core "
              f"(median of {args.repeats}; target {r['target']:,} plans/s/core)\n"
              f"    {r['reference']} valid plans alone: fast path {r['fast_s'] * 1e3:.2f} ms/plan, simulate() "
              f"{r['simulate_s'] * 1e3:.2f} ms/plan: {r['simulate_s'] / r['fast_s']:.1f}x\n"
              f"    the whole search per valid plan (rejected candidates included): "
              f"{r['search_s_per_valid'] * 1e3:.2f} ms vs simulate() {r['simulate_s'] * 1e3:.2f} ms per plan: "
              f"{r['simulate_s'] / r['search_s_per_valid']:.1f}x")


if __name__ == "__main__":
    main()
