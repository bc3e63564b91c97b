"""Benchmark (issue 27, item 1): `simulator calibrate` reads and fits logs in linear time.

Before the fix, 1 MB of nccl-tests log took 2.2 s and 8 MB 90 s (fit_two_regime tried every split, two least
squares each: quadratic in the sizes). Times, against the size of the log: a stepped sweep at the size limit
(MAX_LOG_SIZES data lines) and a log of MAX_LOG_BYTES whose bulk is per-rank header lines (a 131,072-rank run).
Target: each under 2 s on this 2-core machine, and time per byte flat as the log grows.
Run: python benchmarks/bench_calibrate.py
"""

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.collectives import calibrate, placement_for_profile  # noqa: E402
from simulator.collectives.fit import fit_two_regime  # noqa: E402
from simulator.collectives.nccl_logs import parse_nccl_tests  # noqa: E402
from simulator.limits import MAX_LOG_BYTES, MAX_LOG_SIZES  # noqa: E402
from simulator.measure.nccl_tests_format import Measurement, format_log  # noqa: E402


def _stepped(sizes: int) -> str:
    rows = [Measurement(i << 20, 10e-6 + (i << 20) / 300e9) for i in range(1, sizes + 1)]
    return format_log("all_reduce", 2, rows)


def _rank_headers(total_bytes: int) -> str:
    sweep = format_log("all_reduce", 8, [Measurement(1 << i, 10e-6 + (1 << i) / 300e9) for i in range(8, 34)])
    line = "#  Rank {:6d} Group  0 Pid 123456 on node{:05d} device  {} [0x1b] NVIDIA H200\n"
    headers, size, rank = [], len(sweep), 0
    while size < total_bytes - 100:
        headers.append(line.format(rank, rank // 8, rank % 8))
        size += len(headers[-1])
        rank += 1
    return "".join(headers) + sweep


def _time(folder: Path, name: str, text: str) -> None:
    """Seconds to read and fit (the whole calibration when the log is of 2 ranks; a many-rank log is read and its
    lines fitted, the placement of its ranks is not what is measured here)."""
    path = folder / "all_reduce_perf.default.txt"
    path.write_text(text)
    start = time.perf_counter()
    m = parse_nccl_tests(path, op="all_reduce")
    if m.n_ranks == 2:
        calibrate([path], placement_for_profile("h200_x2", 2, 2), op="all_reduce")
    else:
        fit_two_regime(m.sizes_bytes, m.times_s)
    seconds = time.perf_counter() - start
    print(f"{name:44s} {len(text) / 2**20:7.2f} MiB {seconds:6.2f} s {seconds / len(text) * 2**20 * 1e3:7.1f} ms/MiB")


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        for sizes in (MAX_LOG_SIZES // 4, MAX_LOG_SIZES // 2, MAX_LOG_SIZES):
            _time(folder, f"stepped sweep, {sizes:,} sizes", _stepped(sizes))
        for fraction in (4, 2, 1):
            _time(folder, f"rank headers, 1/{fraction} of MAX_LOG_BYTES", _rank_headers(MAX_LOG_BYTES // fraction))


if __name__ == "__main__":
    main()
