"""Fuzz benchmark (issue 27, item 1): N fuzzed nccl-tests logs through `simulator calibrate`'s API, in workers.

Each log (tests/cli/nccl_log_mutations.py: a plausible sweep with hostile edits) is calibrated under a 10 s alarm;
a finding is an exception other than a located UserError, a calibration with a non-finite or non-physical number
(a latency below 0, a bandwidth above the link's line rate), one that does not load back or price a collective to a
finite time, or a run over 10 s. Prints the counts, the slowest run and every distinct finding with its seed.
Run: python benchmarks/fuzz_nccl_logs.py [--logs 10000] [--seed 0] [--workers 8]
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cli import nccl_log_mutations  # noqa: E402 - the mutations live next to the fuzz test that shares them

SECONDS = 10


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout


def _init() -> None:
    signal.signal(signal.SIGALRM, _alarm)


def run_one(seed: int) -> tuple[int, str, float, str]:
    """(seed, outcome, seconds, finding text)."""
    start = time.perf_counter()
    signal.alarm(SECONDS)
    try:
        with tempfile.TemporaryDirectory() as folder:
            outcome, finding = nccl_log_mutations.check(Path(folder), seed), ""
    except Timeout:
        outcome, finding = "finding", f"over {SECONDS} s"
    except Exception as exc:  # noqa: BLE001 - every other exception is a finding
        outcome, finding = "finding", f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        try:
            signal.alarm(0)
        except Timeout:  # the alarm fired between the end of the check and this line: the run finished in time
            pass
    return seed, outcome, time.perf_counter() - start, finding


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=multiprocessing.cpu_count())
    args = parser.parse_args()
    start = time.perf_counter()
    seeds = range(args.seed, args.seed + args.logs)
    with multiprocessing.Pool(args.workers, _init, maxtasksperchild=1000) as pool:
        rows = pool.map(run_one, seeds, chunksize=100)
    counts = collections.Counter(r[1] for r in rows)
    findings: dict[str, int] = {}
    for seed, outcome, _, finding in rows:
        if outcome == "finding":
            findings.setdefault(finding, seed)
    slowest = max(rows, key=lambda r: r[2])
    print(f"{args.logs} logs in {time.perf_counter() - start:.1f} s on {args.workers} workers: "
          f"{counts['ok']} ok, {counts['error']} located user errors, {counts['finding']} findings")
    print(f"slowest {slowest[2]:.2f} s (seed {slowest[0]})")
    for finding, seed in findings.items():
        print(f"finding (seed {seed}): {finding}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
