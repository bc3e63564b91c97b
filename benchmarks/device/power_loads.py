"""H200 board power under four steady loads: idle, bf16 GEMM, HBM copy and a launch-bound kernel stream.

For each load the GPU runs the work for ``--seconds`` (default 25 s) after a settle period, while nvidia-smi samples
``power.draw``, the SM clock and the temperature every 100 ms (``nvidia-smi --query-gpu=... -lms 100``). One JSON row
per load: median / p10 / p90 board power (W), median SM clock (MHz), the achieved rate of the work (TFLOP/s for the
GEMM, GB/s for the copy, kernels/s for the launch-bound stream) and the power limit the driver enforces.

    python3 benchmarks/device/power_loads.py --out power.jsonl

The loads stand for the phases of a training step the whole-run energy model prices: tensor-core-bound compute
(GEMM), memory-bound kernels and communication-like streaming (HBM copy), a host-bound step where the GPU waits
on launches (launch-bound), and stalls (idle, context created, no work).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import env_info, warm_clocks  # noqa: E402

QUERY = "power.draw,clocks.sm,temperature.gpu,enforced.power.limit"


class Sampler:
    """nvidia-smi sampling every 100 ms in a background process, read line by line on a thread."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, float, float, float]] = []
        self.proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                                      "-lms", "100"], stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.rows.append(tuple(float(v) for v in line.split(",")))
            except ValueError:
                continue

    def mark(self) -> int:
        return len(self.rows)

    def since(self, start: int) -> list[tuple[float, float, float, float]]:
        return self.rows[start:]

    def stop(self) -> None:
        self.proc.terminate()


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def run_load(name: str, step, work_per_step: float, unit: str, sampler: Sampler, seconds: float,
             settle: float) -> dict:
    """Run ``step`` back to back for settle + seconds; sample power over the last ``seconds``."""
    torch.cuda.synchronize()
    end_settle = time.perf_counter() + settle
    while time.perf_counter() < end_settle:
        step()
    torch.cuda.synchronize()
    start = sampler.mark()
    t0 = time.perf_counter()
    steps = 0
    while time.perf_counter() - t0 < seconds:
        step()
        steps += 1
        if steps % 64 == 0:
            torch.cuda.synchronize()   # bound the queue so the sampled window is the work's
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    samples = sampler.since(start)
    power = [s[0] for s in samples]
    clock = [s[1] for s in samples]
    return {"load": name, "power_W_median": statistics.median(power), "power_W_p10": _quantile(power, 0.1),
            "power_W_p90": _quantile(power, 0.9), "sm_clock_MHz_median": statistics.median(clock),
            "temperature_C_max": max(s[2] for s in samples), "power_limit_W": samples[-1][3],
            "samples": len(samples), "duration_s": elapsed,
            "achieved": work_per_step * steps / elapsed if work_per_step else None, "achieved_unit": unit}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="power.jsonl")
    parser.add_argument("--seconds", type=float, default=25.0)
    parser.add_argument("--settle", type=float, default=5.0)
    args = parser.parse_args()
    device = torch.device("cuda")
    sampler = Sampler()
    time.sleep(1.0)
    n = 8192
    a = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    b = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    src = torch.empty(4 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    tiny = torch.zeros(1, device=device)
    loads = [
        ("idle", lambda: time.sleep(0.05), 0.0, ""),
        ("gemm_bf16", lambda: torch.mm(a, b), 2.0 * n**3 / 1e12, "TFLOP/s"),
        ("hbm_copy", lambda: dst.copy_(src), 2.0 * src.numel() / 1e9, "GB/s (read + write)"),
        ("launch_bound", lambda: tiny.add_(1.0), 1.0, "kernels/s"),
    ]
    warm_clocks(5.0)
    with open(args.out, "w") as fh:
        meta = env_info()
        for name, step, work, unit in loads:
            row = run_load(name, step, work, unit, sampler, args.seconds, args.settle)
            row.update({"gpu": meta["gpu"], "driver": meta["driver"], "torch": meta["torch"],
                        "date_utc": meta["date_utc"]})
            fh.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    sampler.stop()


if __name__ == "__main__":
    main()
