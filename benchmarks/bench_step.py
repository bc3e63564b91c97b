"""Benchmark: one simulate_step of the 1T model (Korthikanti et al. 2023: TP 8, PP 64, SP + selective recompute)
on 3072 A100 GPUs (384 DGX A100 nodes, DP 6, global batch 3072, 512 micro-batches per pipeline).

Reports the median over repeats of (a) the simulate call on a built topology and (b) build + simulate from
scratch (profile loading, topology graph, plan, step); the target is < 0.5 s for a whole ``simulator run``.
Run: ``python benchmarks/bench_step.py [repeats]``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from simulator.hardware import load_cluster
from simulator.model import load_model_preset
from simulator.plan import resolve_plan
from simulator.schedule import simulate_step
from simulator.topology import Topology

GPUS, NODES = 3072, 384
PARALLEL = dict(tp=8, pp=64, sp=True, recompute="selective", distributed_optimizer=True, overlap_grad_reduce=True)
TRAINING = dict(seq_len=2048, micro_batch=1, global_batch=3072)
TARGET_S = 0.5


def build_and_simulate() -> tuple[float, float]:
    """Seconds of the whole path and of simulate_step alone."""
    t0 = time.perf_counter()
    model = load_model_preset("korthikanti-1t")
    topology = Topology(load_cluster("dgx_a100_80gb", nodes=NODES))
    plan = resolve_plan(model, PARALLEL, TRAINING, GPUS)
    t1 = time.perf_counter()
    result = simulate_step(model, plan, topology)
    t2 = time.perf_counter()
    assert result.step_s > 0
    return t2 - t0, t2 - t1


SCENARIO = f"""\
system: {{profile: dgx_a100_80gb, nodes: {NODES}}}
model: {{preset: korthikanti-1t}}
parallel: {{tp: 8, pp: 64, sp: true, recompute: selective, distributed_optimizer: true, overlap_grad_reduce: true}}
training: {{seq_len: 2048, micro_batch: 1, global_batch: 3072}}
"""


def cli_run_s() -> float:
    """Wall time of a fresh ``python -m simulator run SCENARIO --json`` process (start-up, imports, everything)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "one_t.yaml"
        path.write_text(SCENARIO)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "simulator", "run", str(path), "--json"], check=True,
                       stdout=subprocess.DEVNULL, cwd=Path(__file__).resolve().parents[1])
        return time.perf_counter() - start


def main(repeats: int = 5) -> int:
    runs = [build_and_simulate() for _ in range(repeats)]
    total = statistics.median(r[0] for r in runs)
    step = statistics.median(r[1] for r in runs)
    cli = statistics.median(cli_run_s() for _ in range(repeats))
    print(f"1T model on {GPUS} GPUs: simulate_step median {step:.3f} s, build + simulate median {total:.3f} s, "
          f"whole `simulator run` process median {cli:.3f} s (target < {TARGET_S} s; {repeats} repeats)")
    return 0 if cli < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 5))
