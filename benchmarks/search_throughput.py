"""Benchmark: plans per second per core of the plan search, against ``simulate()`` on the same plans, in one run.

Cases (issue 13):
  (a) Llama-3-70B on 16 DGX H100 nodes (scenarios/search_llama3_70b_h100.yaml), the default plan space;
  (b) the 1T model on 512 A100s (Korthikanti et al. 2023 Table 5: scenarios/korthikanti_1t.yaml without its
      ``parallel:``), the default plan space.
Cases (issue 30), timed to the answer only (CPU seconds of a cold search, target < 10 s each):
  (c) 16,384 GPUs, dense: the 1T model on 2,048 DGX H100 nodes, 8,192 sequences of 2,048 tokens per step, the
      default plan space;
  (d) DeepSeek-V3-class MoE with DualPipe: scenarios/deepseek_v3_ep64.yaml (256 DGX H100 nodes) with pp 16, its
      uneven pipeline_layers and schedule dualpipe pinned, every other dimension searched.

For each case, medians over ``--repeats`` full searches (caches cleared before each), three rates, because a
"plan per second" can be read three ways and the issue's target names no denominator (docs/search/throughput.md, "What the
target means"):
  - points/s: every point of the plan space (most fail a structural rule and are rejected in bulk);
  - plans/s: the points the plan rules accept (the issue's "valid plans"), each either pruned by memory or timed;
  - timed plans/s: the plans that also fit in memory, whose step time is computed (the strictest reading);
then the same candidates evaluated again in the same context (every shared cache filled: what a search does per
plan, without the work it does once per layer shape, group placement or pipeline structure; this pass has no
bound, so it times the plans a search's bound skips, docs/search.md "Pruning by a bound"), and, on
``--reference`` timed plans drawn from the result (seeded), seconds per plan of ``simulate()``: each rate's ratio
to ``simulate()`` is printed beside it. One process, one core; times are the process's CPU time
(``time.process_time``), so that other work on the machine does not count.
Then the per-plan cost on the 1T model at pp 8 x 64 and pp 64 x 1024 micro-batches, fast path and ``simulate()``,
and their ratio (:mod:`benchmarks.flat_timeline`, issue 30).
Run: ``PYTHONPATH=. python benchmarks/search_throughput.py [--case a|b|c|d|both|all] [--repeats 3] [--reference 20]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

from benchmarks.flat_timeline import flat_report
from simulator.entries.simulate import simulate
from simulator.scenario.document import read_document
from simulator.search import evaluate, search
from simulator.search.bound import BOUND_REASON
from simulator.search.caches import clear_process_caches
from simulator.search.evaluate import evaluate_points, resolve
from simulator.search.run import MAX_SEARCH_PLANS, candidates, search_context

ROOT = Path(__file__).resolve().parents[1]
CASES = {"a": ("Llama-3-70B, 16 x DGX H100", ROOT / "scenarios" / "search_llama3_70b_h100.yaml", 20_000),
         "b": ("1T, 512 x A100 (Korthikanti)", ROOT / "scenarios" / "korthikanti_1t.yaml", 5_000)}


#: the issue-30 cases: name, scenario (a mapping), time-to-the-answer target (CPU seconds)
ANSWER_TARGET_S = 10.0


def answer_case(key: str) -> tuple[str, dict]:
    """(name, scenario) of case (c) or (d) (module docstring)."""
    if key == "c":
        return ("1T dense, 16,384 x H100 (2,048 DGX H100)",
                {"name": "search-1t-16k-h100", "system": {"profile": "dgx_h100", "nodes": 2048},
                 "model": {"preset": "korthikanti-1t"},
                 "training": {"seq_len": 2048, "global_batch": 8192, "precision": "bf16"}})
    data = read_document(ROOT / "scenarios" / "deepseek_v3_ep64.yaml").data
    data["parallel"] = {"pp": 16, "pipeline_layers": data["parallel"]["pipeline_layers"], "schedule": "dualpipe"}
    return "DeepSeek-V3-class MoE, DualPipe pp 16, 2,048 x H100", data


def run_answer_case(key: str, repeats: int) -> dict:
    name, data = answer_case(key)
    seconds = []
    for _ in range(repeats):
        clear_process_caches()
        start = time.process_time()
        result = search(data, max_plans=10**8)
        seconds.append(time.process_time() - start)
    best = result.plans[0]
    return {"name": name, "points": result.evaluated, "timed": result.valid, "seconds": seconds,
            "memory": result.rejected.get(evaluate.OOM_REASON, 0), "bound": result.rejected.get(BOUND_REASON, 0),
            "group": result.pruned_by_group_bound,
            "replayed": sum(p["timeline"].startswith("replay") for p in result.plans), "best": best}


def report_answer(key: str, r: dict) -> str:
    b = r["best"]
    plan = " ".join(f"{k} {b[k]}" for k in ("tp", "pp", "vpp", "dp", "ep", "schedule", "split", "tp_comm_overlap",
                                            "recompute", "recompute_modules", "sharding", "micro_batch"))
    cold = statistics.median(r["seconds"])
    return (f"({key}) {r['name']}: {r['points']:,} points, {r['timed']:,} plans timed ({r['replayed']:,} by the "
            f"replay), {r['memory']:,} pruned by memory, {r['bound']:,} by the bound, {r['group']:,} points in groups "
            f"the bound pruned before resolving them\n"
            f"    time to the answer (cold search, median of {len(r['seconds'])}): {cold:.2f} s CPU "
            f"({'within' if cold < ANSWER_TARGET_S else 'above'} the {ANSWER_TARGET_S:.0f} s target)\n"
            f"    best: {plan}: {b['step_s']:.3f} s per step, MFU {b['mfu']:.3f}")


def _point(row: dict) -> dict:
    keys = ("gpus", "tp", "cp", "ulysses", "pp", "vpp", "split", "ep", "schedule", "sp", "tp_comm_overlap", "offload",
            "recompute", "sharding", "micro_batch")
    out = {k: row[k] for k in keys}
    if row["recompute"] == "selective" and row["recompute_modules"] != "core_attn":
        out["recompute"] = "selective:" + row["recompute_modules"]
    return out


def run_case(key: str, repeats: int, reference: int) -> dict:
    name, path, target = CASES[key]
    data = read_document(path).data
    data.pop("parallel", None)
    seconds = []
    for _ in range(repeats):
        clear_process_caches()
        start = time.process_time()
        result = search(data)
        seconds.append(time.process_time() - start)
    cold = statistics.median(seconds)
    # plans known to pass the rules (the points of groups pruned by the bound are not resolved: not counted)
    plans = result.valid + result.pruned_by_memory + result.pruned_by_bound
    # the same candidates again in one context: what is left once every shared cache is filled
    clear_process_caches()
    ctx = search_context(data)
    points, _ = candidates(ctx, MAX_SEARCH_PLANS)
    evaluate_points(ctx, points)
    warm = []
    for _ in range(repeats):
        start = time.process_time()
        evaluate_points(ctx, points)
        warm.append(time.process_time() - start)
    rows = random.Random(0).sample(result.plans, min(reference, len(result.plans)))
    start = time.process_time()
    for r in rows:
        simulate(ctx.fixed.with_plan(resolve(ctx, {**_point(r), "sp": r["sp"] or r["tp"] == 1})))
    sim_s = (time.process_time() - start) / len(rows)
    return {"name": name, "points": result.evaluated, "plans": plans, "timed": result.valid, "cold_s": cold,
            "group": result.pruned_by_group_bound,
            "warm_s": statistics.median(warm), "simulate_s": sim_s, "reference": len(rows), "target": target}


def report(key: str, r: dict, repeats: int) -> str:
    sim = r["simulate_s"]
    rate = lambda n, s: f"{n / s:>9,.0f}/s/core, {s / n * 1e6:8.1f} us each, {sim * n / s:7.1f}x simulate()"  # noqa: E731
    return (f"({key}) {r['name']}: {r['points']:,} points, {r['plans']:,} plans pass the rules (of the points "
            f"resolved: {r['group']:,} in groups the bound pruned are not), {r['timed']:,} fit and are timed\n"
            f"    cold search (median of {repeats}, caches cleared): {r['cold_s'] * 1e3:.0f} ms CPU\n"
            f"      points       {rate(r['points'], r['cold_s'])}\n"
            f"      plans        {rate(r['plans'], r['cold_s'])}   target {r['target']:,}/s/core\n"
            f"      timed plans  {rate(r['timed'], r['cold_s'])}\n"
            f"    the same candidates again, shared caches filled: {r['warm_s'] * 1e3:.0f} ms CPU "
            f"(work done once per search: {(r['cold_s'] - r['warm_s']) * 1e3:.0f} ms, "
            f"{(r['cold_s'] - r['warm_s']) / r['cold_s']:.0%})\n"
            f"      plans        {rate(r['plans'], r['warm_s'])}\n"
            f"      timed plans  {rate(r['timed'], r['warm_s'])}\n"
            f"    simulate() on {r['reference']} of the timed plans: {sim * 1e3:.2f} ms per plan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=("a", "b", "c", "d", "both", "all"), default="both")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reference", type=int, default=20)
    args = parser.parse_args()
    keys = {"both": ("a", "b"), "all": ("a", "b", "c", "d")}.get(args.case, (args.case,))
    for key in keys:
        if key in CASES:
            print(report(key, run_case(key, args.repeats, args.reference), args.repeats), flush=True)
        else:
            print(report_answer(key, run_answer_case(key, args.repeats)), flush=True)
    if any(k in CASES for k in keys):
        print(flat_report())  # issue 30: the per-plan cost at pp 8 x 64 and pp 64 x 1024 micro-batches, and the ratio


if __name__ == "__main__":
    main()
