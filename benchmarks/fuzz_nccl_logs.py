"""Fuzz benchmark (issue 27, item 1): N fuzzed nccl-tests logs through `simulator calibrate`'s API, in workers.

Each log (tests/cli/nccl_log_mutations.py: a plausible sweep with hostile edits) is calibrated under a 10 s alarm;
a finding is an exception other than a located UserError, a calibration with a non-finite or non-physical number
(a latency below 0, a bandwidth above the link's line rate), one that does not load back or price a collective to a
finite time, or a run over 10 s. Prints the counts, the slowest run and every distinct finding with its seed.
Run: python benchmarks/fuzz_nccl_logs.py [--logs 10000] [--seed 0] [--workers 8]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuzz_harness import SECONDS, install_alarm, summary, timed_check  # noqa: E402 - run as a script from benchmarks/

from tests.cli import nccl_log_mutations  # noqa: E402 - the mutations live next to the fuzz test that shares them


def run_one(seed: int) -> tuple[int, str, float, str]:
    """(seed, outcome, seconds, finding text)."""
    def check() -> str:
        with tempfile.TemporaryDirectory() as folder:
            return nccl_log_mutations.check(Path(folder), seed)
    return (seed, *timed_check(check))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=multiprocessing.cpu_count())
    parser.add_argument("--seconds", type=int, default=SECONDS,
                        help="a run longer than this is a finding (0: no time limit, as the test suite runs it)")
    args = parser.parse_args()
    start = time.perf_counter()
    seeds = range(args.seed, args.seed + args.logs)
    with multiprocessing.Pool(args.workers, install_alarm, (args.seconds,), maxtasksperchild=1000) as pool:
        rows = pool.map(run_one, seeds, chunksize=100)
    lines, found = summary(rows, "logs", time.perf_counter() - start, args.workers)
    print("\n".join(lines))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
