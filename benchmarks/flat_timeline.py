"""Benchmark: is the per-plan cost flat in micro-batches? (issue 30, "Done when", first bullet)

The 1T model of Korthikanti et al. 2023 (scenarios/korthikanti_1t.yaml: tp 8, SP, selective recompute, 512 A100s)
at pp 8 x 64 micro-batches (dp 8, global batch 512) and at pp 64 x 1024 micro-batches (dp 1, global batch 1024),
1F1B. For each, the median CPU seconds (``time.process_time``, one core) over ``repeats`` calls, caches warm:
  - fast path: what the plan search does per plan after the rules and memory (docs/search.md, "The fast path",
    steps 3-5: ``prepare_step`` with the search's shared cache, the schedule's timeline without the replay,
    ``finish_step`` without the comm table); memory is left out because the pp 8 plan does not fit in 80 GB (the
    search would prune it before timing it);
  - ``simulate()``: the whole prediction (memory, step, breakdown, comm table);
  - the event replay (``simulate_step(..., replay=True)``), the reference and what a trace runs;
and the ratio of the pp 64 x 1024 cost to the pp 8 x 64 cost (the issue's target: within 2x).
Run: ``PYTHONPATH=. python benchmarks/flat_timeline.py [--repeats 15]`` (also printed by search_throughput.py).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from simulator import load_scenario, simulate
from simulator.scenario.document import read_document
from simulator.schedule.step import fast_or_replay, finish_step, prepare_step, replay_timelines, simulate_step
from simulator.search.evaluate import resolve
from simulator.search.run import search_context
from simulator.topology import topology_of

ROOT = Path(__file__).resolve().parents[1]
SHAPES = ((8, 64), (64, 1024))
"""(pp, micro-batches) measured; gpus 512 and tp 8 fix dp = 64 / pp, the global batch is m dp (micro-batch 1)"""


def _data(pp: int, m: int) -> dict:
    data = read_document(ROOT / "scenarios" / "korthikanti_1t.yaml").data
    dp = 512 // (8 * pp)
    data["parallel"] = {**data["parallel"], "pp": pp, "dp": dp}
    data["training"] = {**data["training"], "global_batch": m * dp}
    return data


def _median(fn, repeats: int) -> float:
    fn()        # caches warm
    seconds = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        seconds.append(time.process_time() - start)
    return statistics.median(seconds)


def measure(pp: int, m: int, repeats: int) -> dict[str, float]:
    """Median seconds per plan of the fast path, ``simulate()`` and the replay at one shape (module docstring)."""
    data = _data(pp, m)
    scenario = load_scenario(data)
    assert scenario.plan.num_microbatches == m
    searched = {k: v for k, v in data.items() if k != "parallel"}
    ctx = search_context(searched)
    point = {"gpus": 512, "tp": 8, "cp": 1, "pp": pp, "vpp": 1, "ep": 1, "schedule": "1f1b", "sp": True,
             "recompute": "selective", "sharding": "none", "micro_batch": 1}

    def parts():
        plan = resolve(ctx, point)
        return prepare_step(ctx.fixed.model, plan, ctx.topology, calibration=ctx.calibration, moe=ctx.fixed.moe,
                            gpu_speed_sigma=ctx.fixed.system.gpu_speed_sigma, cache=ctx.step_cache)

    def fast() -> float:
        got = parts()
        return finish_step(got, fast_or_replay(got), comm_table=False).step_s

    topology = topology_of(scenario.cluster)
    step = fast()
    replayed = finish_step(parts(), replay_timelines(parts()), comm_table=False).step_s
    assert abs(step - replayed) <= 1e-9 * replayed, (step, replayed)     # the same step as the replay's
    return {"fast_s": _median(fast, repeats), "simulate_s": _median(lambda: simulate(scenario), repeats),
            "replay_s": _median(lambda: simulate_step(scenario.model, scenario.plan, topology, replay=True),
                                max(1, repeats // 3)),
            "step_s": step}


def flat_report(repeats: int = 15) -> str:
    """The table of :func:`measure` at both shapes and the ratios, as printed."""
    rows = {shape: measure(*shape, repeats) for shape in SHAPES}
    small, large = rows[SHAPES[0]], rows[SHAPES[1]]
    out = [f"per-plan cost, 1T model (Korthikanti), 1F1B, medians of {repeats} (CPU ms, one core):",
           f"    {'pp x micro-batches':<20}{'fast path':>12}{'simulate()':>12}{'replay':>12}{'step_s':>10}"]
    for (pp, m), r in rows.items():
        out.append(f"    {f'{pp} x {m}':<20}{r['fast_s'] * 1e3:>12.2f}{r['simulate_s'] * 1e3:>12.2f}"
                   f"{r['replay_s'] * 1e3:>12.2f}{r['step_s']:>10.2f}")
    out.append(f"    {'ratio':<20}{large['fast_s'] / small['fast_s']:>11.2f}x"
               f"{large['simulate_s'] / small['simulate_s']:>11.2f}x{large['replay_s'] / small['replay_s']:>11.2f}x"
               "   (target: within 2x)")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    print(flat_report(parser.parse_args().repeats))


if __name__ == "__main__":
    main()
