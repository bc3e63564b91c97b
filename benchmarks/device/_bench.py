"""Shared timing helpers for the one-GPU micro-benchmarks in benchmarks/device/ (fp8_gemm, fp8_cast, moe_*).

* ``warm_clocks``: a cold H200 idles near 345 MHz and reads about half rate at first, so each script first runs
  bf16 8192^3 matrix products back to back for a few seconds (``simulator.measure.gemm.warm_clocks``).
* ``warm_on_side_stream``: the warm-up before a CUDA-graph capture; ``median_time``: eager CUDA-event median.
* ``time_once``: seconds of one call, timed with CUDA events.
* ``bench``: CUDA-graph timing. ``fn`` is captured ``calls`` times back to back in one graph (enough for about
  ``target_s`` of GPU work, or fewer when its outputs would take too much memory), the graph is replayed once to
  warm up and then ``repeats`` times, each replay timed with CUDA events; the result is the median replay time over
  ``calls``. Graphs remove the host launch gaps that would otherwise dominate kernels of a few microseconds. If the
  capture fails (an op that cannot be captured), it falls back to an eager loop timed the same way.
* ``rotating``: memory-bound ops are timed over several copies of their input (at least ``min_bytes`` in all), one
  copy per captured call in turn, so that repeated calls do not hit the 60 MB L2 cache.
* ``env_info`` / ``gpu_clocks``: torch, CUDA, driver versions and the SM / memory clocks (nvidia-smi) for READMEs.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: the calibration kit's helper
from simulator.measure.gemm import warm_clocks as _warm_clocks  # noqa: E402 - stdlib-only module, torch passed in
from simulator.measure.gemm import warm_on_side_stream as _warm_on_side_stream  # noqa: E402


def warm_clocks(seconds: float = 5.0) -> None:
    _warm_clocks(torch, "cuda", seconds)


def warm_on_side_stream(fn, times: int = 1) -> None:
    """Run ``fn`` ``times`` on a side stream and wait for it, as torch.cuda.graphs recommends before a capture."""
    _warm_on_side_stream(torch, fn, times)


def median_time(fn, repeats: int = 15, warmups: int = 3) -> float:
    """Median seconds of ``repeats`` CUDA-event timings of ``fn`` after ``warmups`` untimed calls (eager)."""
    for _ in range(warmups):
        fn()
    torch.cuda.synchronize()
    return statistics.median(time_once(fn) for _ in range(repeats))


def time_once(fn) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def bench(fn, target_s: float = 0.02, repeats: int = 7, max_calls: int = 200, out_bytes: int = 0,
          max_graph_bytes: int = 4 << 30, use_graph: bool = True) -> dict:
    """Median seconds per call of ``fn`` (a closure over preallocated inputs). Returns a dict with time_s, the
    spread (min/max per-call over the repeats), calls per timed replay, repeats, and the method used."""
    fn()  # warm-up: handles, workspace, autotuning, lazy module load
    torch.cuda.synchronize()
    once = max(time_once(fn), 1e-6)
    calls = int(max(1, min(max_calls, math.ceil(target_s / once))))
    if out_bytes:
        calls = max(1, min(calls, max_graph_bytes // max(out_bytes, 1)))
    method = "eager"
    run = None
    if use_graph:
        try:
            warm_on_side_stream(fn)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(calls):
                    fn()
            graph.replay()
            torch.cuda.synchronize()
            run, method = graph.replay, "cuda_graph"
        except Exception as exc:  # noqa: BLE001 - fall back to eager timing
            print(f"  graph capture failed ({type(exc).__name__}: {str(exc)[:120]}); eager loop", flush=True)
            torch.cuda.synchronize()
            run = None
    if run is None:
        def run():
            for _ in range(calls):
                fn()
        run()
        torch.cuda.synchronize()
    samples = [time_once(run) / calls for _ in range(repeats)]
    del run
    return {"time_s": statistics.median(samples), "time_min_s": min(samples), "time_max_s": max(samples),
            "calls_per_replay": calls, "repeats": repeats, "timing": method}


def rotating(make, nbytes: int, min_bytes: int = 256 << 20, max_copies: int = 32) -> list:
    """Copies of an input (``make()`` builds one of ``nbytes``), enough to exceed ``min_bytes`` in all."""
    copies = int(max(1, min(max_copies, math.ceil(min_bytes / max(nbytes, 1)))))
    return [make() for _ in range(copies)]


def gpu_clocks() -> dict:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,clocks.max.sm,power.draw,"
                              "temperature.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
        keys = ("sm_clock_mhz", "mem_clock_mhz", "max_sm_clock_mhz", "power_w", "temp_c", "mem_used_mib",
                "mem_total_mib")
        return dict(zip(keys, (v.strip() for v in out.split(",")), strict=False))
    except Exception as exc:  # noqa: BLE001
        return {"error": str(exc)[:200]}


def env_info() -> dict:
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:  # noqa: BLE001
        driver = None
    props = torch.cuda.get_device_properties(0)
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "cuda_compiled": _cuda_compiled_version(),
            "driver": driver, "gpu": props.name, "sm_count": props.multi_processor_count,
            "mem_total_bytes": props.total_memory, "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _cuda_compiled_version():
    try:
        return torch._C._cuda_getCompiledVersion()
    except Exception:  # noqa: BLE001
        return None


def log_json(path, row: dict) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(row) + "\n")


def record_failure(row: dict, parts: list, name: str, exc: Exception) -> None:
    """A measurement that raised: the error on its JSON row, ERR in the printed summary, the device drained."""
    row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    parts.append(f"{name}=ERR")
    torch.cuda.synchronize()
