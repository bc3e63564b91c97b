"""Benchmark: time to the answer of the Korthikanti plan searches against another checkout, in one sitting (issue 30,
"Done when", second bullet: no more than issue 13's time, with the larger space).

For each case (scenarios/korthikanti_*.yaml: 175b, 530b, 1t, without their ``parallel:``: the whole default space) and
each source tree, one cold search in a fresh Python process: the CPU seconds (``time.process_time``) of
``search(data)``, the scenario read before the clock starts. The trees take turns within each repeat (this checkout,
then each baseline), so every tree sees the same machine load; the report is each tree's median over the repeats, the
best step its space found (a tree with a smaller space may find a slower plan) and the ratio of this checkout's median
to each baseline's. The machine is shared: only ratios within one run mean anything.

A baseline is a source tree of another commit, exported without its git history, e.g. issue 13's code, whose time on
its own smaller space is issue 30's target:
    git archive 68ddc77 | (mkdir -p /tmp/issue13 && tar -x -C /tmp/issue13)
Run: ``python benchmarks/search_time_to_answer.py --baseline /tmp/issue13 [--baseline DIR ...] [--repeats 3]
[--cases 175b,530b,1t]`` (the trees need only their own ``simulator/`` and ``scenarios/``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = ("175b", "530b", "1t")

#: run in the child process with the tree first on sys.path; prints {"cpu_s": ..., "step_s": ...}
CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from simulator.scenario.document import read_document
from simulator.search.run import search
data = read_document(f"{sys.argv[1]}/{sys.argv[2]}").data
data.pop("parallel")
start = time.process_time()
best = search(data).plans[0]
print(json.dumps({"cpu_s": time.process_time() - start, "step_s": best["step_s"]}))
"""


def cold_search(tree: Path, case: str) -> dict:
    """One cold search of ``case`` by the code of ``tree``, in a fresh process (no PYTHONPATH leaks in)."""
    scenario = str(Path("scenarios") / f"korthikanti_{case}.yaml")
    out = subprocess.run([sys.executable, "-c", CHILD, str(tree), scenario], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"}, cwd=tree)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", action="append", default=[], type=Path, help="another commit's source tree")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown or args.repeats < 1:
        parser.error(f"--cases takes {', '.join(CASES)} (got {unknown}); --repeats at least 1")
    trees = [ROOT, *(b.resolve() for b in args.baseline)]
    missing = [str(t) for t in trees if not (t / "simulator").is_dir()]
    if missing:
        parser.error(f"--baseline: not a source tree (no simulator/ folder): {', '.join(missing)}")
    runs: dict[tuple[str, Path], list[dict]] = {}
    for _ in range(args.repeats):
        for case in cases:
            for tree in trees:
                runs.setdefault((case, tree), []).append(cold_search(tree, case))
    print(f"cold whole-default-space searches, CPU s, median of {args.repeats} (fresh process each, trees in turn)")
    for case in cases:
        here = statistics.median(r["cpu_s"] for r in runs[case, ROOT])
        for tree in trees:
            cpu = [r["cpu_s"] for r in runs[case, tree]]
            med = statistics.median(cpu)
            ratio = "" if tree == ROOT else f"  this checkout / it: {here / med:.2f}x"
            print(f"  {case:>4}  {str(tree):<40} {med:6.3f} s  ({', '.join(f'{c:.3f}' for c in cpu)})"
                  f"  best step {runs[case, tree][0]['step_s']:.3f} s{ratio}")


if __name__ == "__main__":
    main()
