"""Benchmark: memory of a 4096-GPU plan of a 1T model (target: median under 5 ms).

Run: ``python benchmarks/bench_memory.py``. Times :func:`estimate_memory` on an already resolved plan, and, for
information, :func:`resolve_plan` + :func:`estimate_memory` together.
"""

from __future__ import annotations

import statistics
import time

from simulator.memory import estimate_memory
from simulator.model import load_model_preset
from simulator.plan import resolve_plan
from simulator.units.constants import MILLI

TARGET_S = 5 * MILLI
PARALLEL = {"tp": 8, "pp": 64, "cp": 2, "sp": True, "distributed_optimizer": True, "recompute": "selective"}
TRAINING = {"seq_len": 4096, "micro_batch": 1, "global_batch": 1024}
WORLD = 4096


def _median(fn, repeats: int = 200) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    model = load_model_preset("korthikanti-1t")
    plan = resolve_plan(model, PARALLEL, TRAINING, WORLD)
    estimate = _median(lambda: estimate_memory(plan))
    both = _median(lambda: estimate_memory(resolve_plan(model, PARALLEL, TRAINING, WORLD)))
    print(f"1T model, {WORLD} GPUs (tp 8, pp 64, cp 2, dp {plan.dp}): estimate_memory median "
          f"{estimate / MILLI:.3f} ms; resolve_plan + estimate_memory median {both / MILLI:.3f} ms "
          f"(target {TARGET_S / MILLI:.0f} ms)")
    return 0 if estimate < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
