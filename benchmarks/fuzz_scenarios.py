"""Fuzz benchmark (issue #17): N mutated copies of the shipped scenarios through the API, in worker processes.

Each scenario runs under a 10 s alarm in a worker whose address space is capped (--memory-gib, default 3: the
interpreter with numpy/pandas/networkx maps ~1 GiB before any work); a finding is an exception other than a located
UserError, a non-finite JSON value, a run over 10 s, or a worker that ran out of memory. Prints the counts, the
slowest run, the largest worker RSS and every distinct finding with a seed that reproduces it.
Run: python benchmarks/fuzz_scenarios.py [--scenarios 10000] [--seed 0] [--workers 8]
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import random
import resource
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cli import scenario_mutations  # noqa: E402 - the mutations live next to the fuzz test that shares them

SECONDS = 10


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout


def _init(memory_gib: float) -> None:
    limit = int(memory_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(signal.SIGALRM, _alarm)
    global BASES
    BASES = scenario_mutations.base_documents()


def run_one(seed: int) -> tuple[int, str, float, int, str]:
    """(seed, outcome, seconds, worker max RSS in KiB, finding text)."""
    rng = random.Random(seed)
    path, data = rng.choice(BASES)
    mutated = scenario_mutations.mutate(data, rng, rng.randint(1, 3))
    start = time.perf_counter()
    signal.alarm(SECONDS)
    try:
        outcome, finding = scenario_mutations.check(path, mutated), ""
    except Timeout:
        outcome, finding = "finding", f"{path.name}: over {SECONDS} s"
    except MemoryError:
        outcome, finding = "finding", f"{path.name}: out of memory"
    except Exception as exc:  # noqa: BLE001 - every other exception is a finding
        outcome, finding = "finding", f"{path.name}: {type(exc).__name__}: {str(exc)[:200]}"
    finally:
        try:
            signal.alarm(0)
        except Timeout:  # the alarm fired between the end of the check and this line: the run finished in time
            pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return seed, outcome, time.perf_counter() - start, rss, finding


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=multiprocessing.cpu_count())
    parser.add_argument("--memory-gib", type=float, default=3.0)
    args = parser.parse_args()
    start = time.perf_counter()
    seeds = range(args.seed, args.seed + args.scenarios)
    with multiprocessing.Pool(args.workers, _init, (args.memory_gib,), maxtasksperchild=500) as pool:
        rows = pool.map(run_one, seeds, chunksize=50)
    counts = collections.Counter(r[1] for r in rows)
    findings: dict[str, int] = {}
    for seed, outcome, _, _, finding in rows:
        if outcome == "finding":
            findings.setdefault(finding, seed)
    slowest = max(rows, key=lambda r: r[2])
    print(f"{args.scenarios} scenarios in {time.perf_counter() - start:.1f} s on {args.workers} workers: "
          f"{counts['ok']} ok, {counts['error']} located user errors, {counts['finding']} findings")
    print(f"slowest {slowest[2]:.2f} s (seed {slowest[0]}); largest worker RSS {max(r[3] for r in rows) / 2**20:.2f} GiB")
    for finding, seed in findings.items():
        print(f"finding (seed {seed}): {finding}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
