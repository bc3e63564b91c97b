"""How much a resident communication-like kernel slows a compute-bound GEMM beside it, on one GPU.

Question it settles (issue 11): the step-time model charges a collective hidden behind compute
``interference x hidden seconds`` (simulator/pricing/overlap.py). For a collective whose traffic crosses the
network it uses the share of SMs NCCL's channels hold (one resident block per channel, NCCL src/enqueue.cc
ncclLaunchKernel): channels / SMs. Two NCCL ranks cannot share one GPU, so this script emulates the two ends of
what such a kernel does with ``n`` resident blocks of 512 threads (NCCL's blocks have up to 640):

* ``spin``: each block chases pointers in a 4 KiB table (L1/L2 hits, almost no HBM traffic): a channel waiting on
  the NIC, as a network-bound collective's blocks mostly do;
* ``copy``: each block streams a 64 MiB slice HBM -> HBM as fast as one block can: the opposite end, a channel
  moving data at full speed through HBM.

The side kernel is launched first on its own stream and sized to outlast the GEMM loop; the GEMM loop's time
beside it over its time alone gives the slowdown, and ``k = (t_with - t_alone) / t_with`` is the interference per
second of overlap (the side kernel runs during all of ``t_with``). Medians of ``--repeats`` rounds.

    python3 benchmarks/device/overlap_interference.py --out overlap_interference.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import triton
import triton.language as tl
from _bench import env_info, time_once, warm_clocks

THREADS_WARPS = 16  # 512 threads per block


@triton.jit
def _spin(table, out, iters):
    pid = tl.program_id(0)
    x = tl.load(table + pid % 1024)
    for _ in range(iters):
        x = tl.load(table + (x & 1023))
    tl.store(out + pid, x)


@triton.jit
def _copy(src, dst, per_block, reps, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    base = pid * per_block
    for _ in range(reps):
        for off in range(0, per_block, BLOCK):
            idx = base + off + tl.arange(0, BLOCK)
            tl.store(dst + idx, tl.load(src + idx))


def gemm_loop(a, b, calls):
    def run():
        for _ in range(calls):
            torch.matmul(a, b)
    return run


def side_launcher(kind, n, scale, bufs):
    table, out, src, dst = bufs
    if kind == "spin":
        return lambda: _spin[(n,)](table, out, scale, num_warps=THREADS_WARPS)
    per_block = (64 << 20) // 2  # bf16 elements: 64 MiB per block
    return lambda: _copy[(n,)](src, dst, per_block, scale, BLOCK=4096, num_warps=THREADS_WARPS)


def sized(kind, n, bufs, target_s):
    """The side kernel's loop count that makes it last about target_s with n blocks."""
    scale = 64 if kind == "spin" else 1
    while True:
        t = time_once(side_launcher(kind, n, scale, bufs))
        if t >= target_s:
            return scale, t
        scale = int(scale * max(2.0, 1.2 * target_s / max(t, 1e-6)))


def with_side(run, launch, side_stream):
    """Seconds of ``run`` on the current stream while ``launch``'s kernel is resident on ``side_stream``."""
    main = torch.cuda.current_stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side_stream):
        launch()
    torch.cuda._sleep(2_000_000)  # ~1 ms: the side kernel's blocks become resident first
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(main)
    run()
    end.record(main)
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.manual_seed(0)
    warm_clocks()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = [dict(kind="env", sms=sms, **env_info())]
    table = torch.randint(0, 1024, (1024,), device="cuda", dtype=torch.int32)
    out = torch.empty(4096, device="cuda", dtype=torch.int32)
    src = torch.empty(66 * (32 << 20), device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    bufs = (table, out, src, dst)
    shapes = {"square_8192": (8192, 8192, 8192), "wgrad_22b_fc1": (6144, 8192, 24576)}
    side = torch.cuda.Stream()
    for name, (m, k, n_) in shapes.items():
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n_, device="cuda", dtype=torch.bfloat16)
        one = statistics.median(time_once(lambda a=a, b=b: torch.matmul(a, b)) for _ in range(5))
        calls = max(5, int(0.05 / one))
        run = gemm_loop(a, b, calls)
        run()
        alone = statistics.median(time_once(run) for _ in range(args.repeats))
        for kind in ("spin", "copy"):
            for blocks in (2, 8, 16, 24, 32, 48):
                scale, side_s = sized(kind, blocks, bufs, 1.5 * alone + 0.01)
                launch = side_launcher(kind, blocks, scale, bufs)
                withs = [with_side(run, launch, side) for _ in range(args.repeats)]
                alones = [time_once(run) for _ in range(args.repeats)]
                t_with, t_alone = statistics.median(withs), statistics.median(alones)
                row = dict(kind="interference", gemm=name, m=m, k=k, n=n_, calls=calls, side=kind, blocks=blocks,
                           sms=sms, side_alone_s=side_s, gemm_alone_s=t_alone, gemm_with_s=t_with,
                           slowdown=t_with / t_alone, interference=(t_with - t_alone) / t_with,
                           sm_share=blocks / sms)
                rows.append(row)
                print(json.dumps(row), flush=True)
    with open(args.out, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
