"""Wall time of the hostile inputs that must be refused quickly (issue 27: timings left the unit tests, which keep
the exit codes and messages): each runs ``python -m simulator`` in a fresh process; over 10 s is a failure.

Inputs: a 6 MB YAML, a YAML just under the 1 MiB size limit (45,000 unknown keys), a YAML alias bomb, a topology
of 100,000 nodes, a collective of 10^9 ranks. Prints each time (median of --runs) and exits 1 when one is over.
Run: python benchmarks/bench_hostile.py [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cli.test_hostile_crashes import SMALL  # noqa: E402 - the inputs the hostile-input tests write

SECONDS = 10


def _inputs(folder: Path) -> dict[str, list[str]]:
    bomb = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    bomb += [f"{n}: &{n} [" + ", ".join([f"*{p}"] * 9) + "]" for p, n in zip("abcdefgh", "bcdefghi", strict=True)]
    files = {"six_megabyte_yaml": SMALL + "".join(f"key{i}: {i}\n" for i in range(200_000)),
             "yaml_under_size_limit": SMALL + "".join(f"k{i}: {i}\n" for i in range(45_000)),
             "yaml_alias_bomb": "\n".join(bomb) + "\n"}
    argvs = {}
    for name, text in files.items():
        (folder / f"{name}.yaml").write_text(text)
        argvs[name] = ["run", str(folder / f"{name}.yaml")]
    argvs["topology_100000_nodes"] = ["topology", "dgx_h100", "--nodes", "100000"]
    argvs["collective_1e9_ranks"] = ["collective", "--system", "dgx_h100", "--op", "all_reduce", "--ranks",
                                     str(10**9), "--bytes", "1GiB"]
    return argvs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    over = False
    with tempfile.TemporaryDirectory() as folder:
        for name, argv in _inputs(Path(folder)).items():
            times = []
            for _ in range(args.runs):
                start = time.perf_counter()
                proc = subprocess.run([sys.executable, "-m", "simulator", *argv], capture_output=True, cwd=ROOT)
                times.append(time.perf_counter() - start)
            median = statistics.median(times)
            over |= median >= SECONDS or proc.returncode != 2
            print(f"{name:24s} exit {proc.returncode}  {median:6.2f} s{'  OVER' if median >= SECONDS else ''}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
