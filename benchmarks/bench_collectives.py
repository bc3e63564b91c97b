"""Benchmark: build a 1024-GPU (128 nodes x 8) group's cost model, then a 30-size sweep of every operation.

Targets (issue 3): build < 1 s, full sweep < 50 ms. Prints medians over repeats.
Run: python benchmarks/bench_collectives.py
"""

import statistics
import time

import numpy as np

from simulator.collectives import OPS, build_cost_model, evaluate, placement_for_profile


def _median_s(fn, repeats):
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    placement = placement_for_profile("dgx_h100", 1024, 8)
    sizes = np.geomspace(256, 8 * 2**30, 30)
    build = _median_s(lambda: build_cost_model(placement), 20)
    model = build_cost_model(placement)
    sweep = _median_s(lambda: [evaluate(model, op, sizes) for op in OPS], 50)
    print(f"1024 GPUs (128 nodes x 8), {len(OPS)} ops x {sizes.size} sizes")
    print(f"build_cost_model: median {build * 1e3:8.2f} ms   (target < 1000 ms)")
    print(f"sweep all ops   : median {sweep * 1e3:8.2f} ms   (target < 50 ms)")


if __name__ == "__main__":
    main()
