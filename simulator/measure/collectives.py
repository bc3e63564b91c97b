"""``simulator measure collectives``: time NCCL collectives through PyTorch and write nccl-tests logs.

Two modes:
- launcher (no ``WORLD_SIZE`` in the environment): for each NCCL setting, starts ``torchrun`` with that setting's
  environment (NCCL reads NCCL_ALGO/NCCL_PROTO once, at communicator creation), then keeps rank 0's tuning table;
- worker (under torchrun, one process per GPU): times every operation and size, and rank 0 writes the logs.

Each size is timed as replays of a CUDA graph holding many back-to-back calls: an eager loop adds tens of
microseconds of launch cost per call, which would swamp small messages.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
from pathlib import Path

from simulator.measure.gemm import warm_on_side_stream
from simulator.measure.nccl_tests_format import Measurement, extract_tuning_table, format_log
from simulator.measure.settings import ops_for, setting_env, sweep_sizes

GRAPH_TARGET_S = 2e-3      # aim for at least this much work per graph replay
MIN_CALLS, MAX_CALLS = 10, 50
REPLAYS = 10


def launch(out_dir: str, gpus: int, settings: list[str], ops: list[str], min_bytes: int, max_bytes: int,
           factor: int, timeout_s: float | None = None) -> int:
    """Run one torchrun per setting (each stopped after ``timeout_s``); returns the number of settings that
    failed or timed out."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    failures = 0
    for setting in settings:
        env = {**os.environ, **setting_env(setting), "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING",
               "NCCL_DEBUG_FILE": str(out / f"nccl_debug.{setting}.%p.txt")}
        command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={gpus}", "-m",
                   "simulator.measure", "collectives", "--worker", "--out", str(out), "--setting", setting,
                   "--ops", ",".join(ops), "--min-bytes", str(min_bytes), "--max-bytes", str(max_bytes),
                   "--factor", str(factor)]
        print(f"[measure] setting {setting}: {' '.join(f'{k}={v}' for k, v in setting_env(setting).items())}",
              flush=True)
        process = subprocess.Popen(command, env=env, start_new_session=True)
        try:
            failures += process.wait(timeout=timeout_s) != 0
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # torchrun and its workers: none may keep the GPUs
            process.wait()
            print(f"[measure] setting {setting} timed out after {timeout_s:g} s", flush=True)
            failures += 1
        _keep_tuning_table(out, setting)
    return failures


def _keep_tuning_table(out: Path, setting: str) -> None:
    debug_files = sorted(out.glob(f"nccl_debug.{setting}.*.txt"))
    for path in debug_files:
        table = extract_tuning_table(path.read_text(errors="replace"))
        if table and not (out / f"nccl_tuning_table.{setting}.txt").exists():
            (out / f"nccl_tuning_table.{setting}.txt").write_text(table)
        path.unlink()


def run_worker(out_dir: str, setting: str, ops: list[str], min_bytes: int, max_bytes: int, factor: int) -> None:
    """Under torchrun: time each operation at each size; rank 0 writes ``<op>_perf.<setting>.txt``."""
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    cpu_group = dist.new_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    sizes = sweep_sizes(min_bytes, max_bytes, factor)
    env_line = " ".join(f"{k}={v}" for k, v in setting_env(setting).items())
    for op in ops_for(setting, tuple(ops)):
        rows = []
        for size in sizes:
            call = _make_call(op, size, world, rank, torch, dist)
            if call is None:
                continue
            rows.append(Measurement(size, _time_in_graph(call, size, torch, cpu_group, dist)))
            if rank == 0:
                print(f"[measure] {setting} {op} {size} B: {rows[-1].time_s * 1e6:.2f} us", file=sys.stderr,
                      flush=True)
        if rank == 0 and rows:
            comments = [f"{world}x {torch.cuda.get_device_name(0)}; bf16; simulator measure collectives; "
                        f"each size timed as {REPLAYS} replays of a CUDA graph of {MIN_CALLS}-{MAX_CALLS} "
                        "back-to-back calls (median replay)",
                        f"nccl {'.'.join(map(str, torch.cuda.nccl.version()))}  torch {torch.__version__}  "
                        f"ranks {world}  setting {setting}  env {env_line}"]
            text = format_log(op, world, rows, comments=comments)
            Path(out_dir, f"{op}_perf.{setting}.txt").write_text(text)
            print(text, flush=True)
    dist.destroy_process_group()


def _make_call(op: str, size: int, world: int, rank: int, torch, dist):
    """A closure running one ``op`` of ``size`` bytes (nccl-tests' convention) on preallocated bf16 buffers."""
    elem = 2
    total = size // elem
    if op in ("all_gather", "reduce_scatter", "all_to_all") and total % world:
        return None
    device = torch.device("cuda", torch.cuda.current_device())

    def buffer(n):
        return torch.ones(max(n, 1), dtype=torch.bfloat16, device=device)

    if op == "all_reduce":
        x = buffer(total)
        return lambda: dist.all_reduce(x)
    if op == "all_gather":
        inp, out = buffer(total // world), buffer(total)
        return lambda: dist.all_gather_into_tensor(out, inp)
    if op == "reduce_scatter":
        inp, out = buffer(total), buffer(total // world)
        return lambda: dist.reduce_scatter_tensor(out, inp)
    if op == "all_to_all":
        inp, out = buffer(total), buffer(total)
        return lambda: dist.all_to_all_single(out, inp)
    if op == "broadcast":
        x = buffer(total)
        return lambda: dist.broadcast(x, src=0)
    if op == "sendrecv":
        send, recv = buffer(total), buffer(total)
        peer_next, peer_prev = (rank + 1) % world, (rank - 1) % world

        def exchange():
            ops = [dist.P2POp(dist.isend, send, peer_next), dist.P2POp(dist.irecv, recv, peer_prev)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        return exchange
    raise ValueError(f"unknown op {op}")


def _calls_per_graph(size_bytes: int) -> int:
    """Back-to-back calls per graph: enough for ``GRAPH_TARGET_S`` of work at a rough 15 us + 100 GB/s guess."""
    guess_s = 15e-6 + size_bytes / 100e9
    return int(min(MAX_CALLS, max(MIN_CALLS, math.ceil(GRAPH_TARGET_S / guess_s))))


def _time_in_graph(call, size_bytes: int, torch, cpu_group, dist) -> float:
    """Seconds per call: median over replays of a CUDA graph of back-to-back calls.

    Between replays the ranks meet on a CPU (gloo) barrier, never on an eager NCCL call: mixing eager NCCL
    collectives and graph replays on one communicator can stall (pytorch/pytorch#196133).
    """
    warm_on_side_stream(torch, call, 3)
    dist.barrier(group=cpu_group)
    calls = _calls_per_graph(size_bytes)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for replay in range(2 + REPLAYS):
        dist.barrier(group=cpu_group)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        if replay >= 2:
            times.append(start.elapsed_time(end) / 1e3 / calls)
    del graph
    return statistics.median(times)


def topology_report(out_dir: str) -> None:
    """Save ``nvidia-smi topo -m`` and ``nvidia-smi nvlink -s`` next to the logs (when nvidia-smi exists)."""
    if shutil.which("nvidia-smi") is None:
        return
    for name, args in (("topo_m.txt", ["topo", "-m"]), ("nvlink_s.txt", ["nvlink", "-s"])):
        result = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True)
        Path(out_dir, name).write_text(result.stdout + result.stderr)
