"""``simulator measure gemm``: sustained matmul throughput per shape and dtype on one GPU, as a CSV.

The clocks are warmed first (a cold GPU idles near 345 MHz and reads about half its sustained rate for the first
fraction of a second), then each shape runs back to back for about ``seconds_per_shape`` into a preallocated
output. The CSV (dtype, m, k, n, time_ms, tflops) is what the compute-efficiency calibration reads.
"""

from __future__ import annotations

import time
from pathlib import Path

#: (m, k, n) shapes: square, transformer projections of common hidden sizes, and skinny/small ones
DEFAULT_SHAPES: tuple[tuple[int, int, int], ...] = (
    (4096, 4096, 4096), (8192, 8192, 8192), (16384, 8192, 8192), (8192, 4096, 12288), (8192, 4096, 16384),
    (8192, 16384, 4096), (8192, 8192, 24576), (8192, 8192, 28672), (8192, 28672, 8192), (2048, 4096, 4096),
    (1024, 4096, 4096), (512, 4096, 4096), (256, 4096, 4096), (128, 4096, 4096), (64, 4096, 4096),
    (16, 8192, 8192), (1, 8192, 8192), (8192, 12288, 4608), (8192, 1536, 12288), (8192, 7168, 2048),
    (4096, 7168, 2048), (8192, 6144, 2304), (8192, 768, 6144), (8192, 6144, 3072), (8192, 3072, 6144),
    (16384, 12288, 4608), (16384, 1536, 12288), (8192, 2048, 7168), (4096, 5120, 5120), (3000, 3000, 3000),
    (8192, 8192, 1024), (8192, 1024, 8192), (32768, 4096, 4096),
)
DTYPES = ("bf16", "fp16", "fp32", "tf32")


def measure(out_path: str, dtypes: list[str], shapes: list[tuple[int, int, int]] | None = None,
            warmup_s: float = 5.0, seconds_per_shape: float = 0.2) -> list[dict]:
    """Time each (dtype, shape); write the CSV and return its rows."""
    import torch

    device = torch.device("cuda")
    warm_clocks(torch, device, warmup_s)
    rows = []
    for dtype in dtypes:
        torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
                       "tf32": torch.float32}[dtype]
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        for m, k, n in shapes or DEFAULT_SHAPES:
            a = torch.randn(m, k, dtype=torch_dtype, device=device)
            b = torch.randn(k, n, dtype=torch_dtype, device=device)
            c = torch.empty(m, n, dtype=torch_dtype, device=device)
            seconds = _time_shape(torch, a, b, c, seconds_per_shape)
            rows.append({"dtype": dtype, "m": m, "k": k, "n": n, "time_ms": seconds * 1e3,
                         "tflops": 2 * m * k * n / seconds / 1e12})
            print(f"{dtype:5s} {m:6d} {k:6d} {n:6d} {seconds * 1e3:9.4f} ms {rows[-1]['tflops']:7.1f} TFLOP/s",
                  flush=True)
            del a, b, c
    torch.backends.cuda.matmul.allow_tf32 = False
    header = (f"# simulator measure gemm on {torch.cuda.get_device_name(0)}, torch {torch.__version__}; clocks "
              f"warmed {warmup_s:g} s; each shape run back to back for ~{seconds_per_shape:g} s into a "
              "preallocated output\n")
    lines = ["dtype,m,k,n,time_ms,tflops"] + [
        f"{r['dtype']},{r['m']},{r['k']},{r['n']},{r['time_ms']:.4f},{r['tflops']:.1f}" for r in rows]
    Path(out_path).write_text(header + "\n".join(lines) + "\n")
    return rows


def warm_clocks(torch, device, seconds: float) -> None:
    """bf16 8192^3 products back to back for ``seconds``: a cold GPU idles near 345 MHz and reads about half its
    sustained rate at first (also the warm-up of the one-GPU benchmarks in benchmarks/device/)."""
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    c = torch.empty_like(a)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for _ in range(20):
            torch.matmul(a, a, out=c)
        torch.cuda.synchronize()


def warm_on_side_stream(torch, fn, times: int = 1) -> None:
    """Run ``fn`` ``times`` on a side stream and wait for it: the warm-up torch.cuda.graphs asks for before a
    capture (also used by the collectives kit and benchmarks/device/_bench.py)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(times):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def _time_shape(torch, a, b, c, seconds: float) -> float:
    for _ in range(3):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.matmul(a, b, out=c)
    end.record()
    end.synchronize()
    once = max(start.elapsed_time(end) / 1e3, 1e-6)
    calls = max(5, int(seconds / once))
    start.record()
    for _ in range(calls):
        torch.matmul(a, b, out=c)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / calls
