"""Benchmark: build a 1024-GPU (128 nodes x 8) group's cost model, then a 30-size sweep of every operation.

Targets (issue 3): build < 1 s, full sweep < 50 ms. Prints medians over repeats. "Build" is measured from scratch:
the 128-node topology graph, the group's placement on it, and the cost model (a copy of the default coefficients
bypasses build_cost_model's cache).
Run: python benchmarks/bench_collectives.py
"""

import statistics
import time

import numpy as np

from simulator.collectives import DEFAULT_COEFFICIENTS, OPS, build_cost_model, evaluate, place_group
from simulator.hardware import load_cluster
from simulator.topology import Topology


def _median_s(fn, repeats):
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    cluster = load_cluster("dgx_h100", 128)

    def build_from_scratch():
        topology = Topology(cluster)
        placement = place_group(topology, list(range(1024)))
        return build_cost_model(placement, DEFAULT_COEFFICIENTS.model_copy())

    sizes = np.geomspace(256, 8 * 2**30, 30)
    build = _median_s(build_from_scratch, 10)
    model = build_from_scratch()
    sweep = _median_s(lambda: [evaluate(model, op, sizes) for op in OPS], 50)
    print(f"1024 GPUs (128 nodes x 8), {len(OPS)} ops x {sizes.size} sizes")
    print(f"topology + placement + cost model: median {build * 1e3:8.2f} ms   (target < 1000 ms)")
    print(f"sweep all ops   : median {sweep * 1e3:8.2f} ms   (target < 50 ms)")


if __name__ == "__main__":
    main()
