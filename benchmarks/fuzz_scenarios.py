"""Fuzz benchmark (issue #17): N mutated copies of the shipped scenarios through the API, in worker processes.

Each scenario runs under a 10 s alarm in a worker whose address space is capped (--memory-gib, default 3: the
interpreter with numpy/pandas/networkx maps ~1 GiB before any work); a finding is an exception other than a located
UserError, a non-finite JSON value, a run over 10 s, or a worker that ran out of memory. Prints the counts, the
slowest run, the largest worker RSS and every distinct finding with a seed that reproduces it.
Run: python benchmarks/fuzz_scenarios.py [--scenarios 10000] [--seed 0] [--workers 8]
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuzz_harness import SECONDS, install_alarm, summary, timed_check  # noqa: E402 - run as a script from benchmarks/

from tests.cli import scenario_mutations  # noqa: E402 - the mutations live next to the fuzz test that shares them


def _init(memory_gib: float, seconds: int) -> None:
    limit = int(memory_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    install_alarm(seconds)
    global BASES
    BASES = scenario_mutations.base_documents()


def run_one(seed: int) -> tuple[int, str, float, int, str]:
    """(seed, outcome, seconds, worker max RSS in KiB, finding text)."""
    rng = random.Random(seed)
    path, data = rng.choice(BASES)
    mutated = scenario_mutations.mutate(data, rng, rng.randint(1, 3))
    outcome, seconds, finding = timed_check(lambda: scenario_mutations.check(path, mutated), path.name)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return seed, outcome, seconds, rss, finding


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=multiprocessing.cpu_count())
    parser.add_argument("--memory-gib", type=float, default=3.0)
    parser.add_argument("--seconds", type=int, default=SECONDS,
                        help="a run longer than this is a finding (0: no time limit, as the test suite runs it)")
    args = parser.parse_args()
    start = time.perf_counter()
    seeds = range(args.seed, args.seed + args.scenarios)
    with multiprocessing.Pool(args.workers, _init, (args.memory_gib, args.seconds), maxtasksperchild=500) as pool:
        rows = pool.map(run_one, seeds, chunksize=50)
    lines, found = summary(rows, "scenarios", time.perf_counter() - start, args.workers)
    lines[1] += f"; largest worker RSS {max(r[3] for r in rows) / 2**20:.2f} GiB"
    print("\n".join(lines))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
