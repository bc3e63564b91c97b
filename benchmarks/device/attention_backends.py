"""Fused attention kernels on one GPU, by backend: FlashAttention-2 (PyTorch's FLASH_ATTENTION backend is the
vendored FlashAttention-2) against cuDNN's fused attention (CUDNN_ATTENTION), causal bf16, forward and backward
timed separately; and the sustained rate of a long run of large bf16 GEMMs (does a minutes-long training step
run at the rate of the short CUDA-graph GEMM timings the compute model was fitted to?).

FLOPs as FlashAttention counts them: forward 2 GEMMs x 2 x b x heads x s^2 x d / 2 (causal half); backward 2.5x the
forward (dQ, dK, dV and the recomputed scores). Each timing: median of CUDA-event-timed repeats after warm-up,
clocks warmed first (benchmarks/device/_bench.py).

    python3 benchmarks/device/attention_backends.py --out attention.jsonl [--sustain-s 60]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import env_info, gpu_clocks, log_json, median_time, warm_clocks  # noqa: E402

SHAPES = [  # (batch, heads, seq, head_dim): training shapes of one rank (Llama-3 8B/70B at TP 1-8)
    (1, 32, 2048, 128), (1, 32, 4096, 128), (1, 16, 8192, 128), (1, 32, 8192, 128), (1, 8, 16384, 128),
    (1, 64, 4096, 128), (2, 16, 8192, 128), (1, 16, 4096, 64), (1, 32, 8192, 64),
]
BACKENDS = {"flash2": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def attention(out: str) -> None:
    for b, h, s, d in SHAPES:
        q, k, v = (torch.randn(b, h, s, d, dtype=torch.bfloat16, device="cuda", requires_grad=True)
                   for _ in range(3))
        grad = torch.randn(b, h, s, d, dtype=torch.bfloat16, device="cuda")
        flops_fwd = 2 * 2 * b * h * s * s * d / 2
        for name, backend in BACKENDS.items():
            row = {"kind": "attention", "backend": name, "batch": b, "heads": h, "seq": s, "head_dim": d,
                   "fwd_flops": flops_fwd, "bwd_flops": 2.5 * flops_fwd}
            try:
                with sdpa_kernel([backend]):
                    fwd = median_time(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=True))

                    def both(q=q, k=k, v=v, grad=grad):
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        torch.autograd.grad(o, (q, k, v), grad)
                    total = median_time(both)
                row.update(fwd_s=fwd, bwd_s=total - fwd, fwd_tflops=flops_fwd / fwd / 1e12,
                           bwd_tflops=2.5 * flops_fwd / (total - fwd) / 1e12,
                           fwd_bwd_tflops=3.5 * flops_fwd / total / 1e12)
            except Exception as exc:  # noqa: BLE001 - a backend may not support a shape
                row["error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
            log_json(out, row)
            print(row, flush=True)
        del q, k, v, grad
        torch.cuda.empty_cache()


def sustained(out: str, seconds: float, window_s: float = 5.0) -> None:
    """bf16 8192^3 products back to back for ``seconds``: achieved TFLOP/s, SM clock, power and temperature per
    window."""
    n = 8192
    a, b = (torch.randn(n, n, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    c = torch.empty_like(a)
    flops = 2 * n**3
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0, calls = time.perf_counter(), 0
        ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ev0.record()
        while time.perf_counter() - t0 < window_s:
            for _ in range(20):
                torch.matmul(a, b, out=c)
            calls += 20
            torch.cuda.synchronize()
        ev1.record()
        ev1.synchronize()
        gpu_s = ev0.elapsed_time(ev1) / 1e3
        row = {"kind": "sustained_gemm", "n": n, "elapsed_s": time.perf_counter() - start,
               "tflops": flops * calls / gpu_s / 1e12, **gpu_clocks()}
        log_json(out, row)
        print(row, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--sustain-s", type=float, default=60.0)
    args = ap.parse_args()
    log_json(args.out, {"kind": "env", **env_info()})
    warm_clocks()
    log_json(args.out, {"kind": "clocks_after_warmup", **gpu_clocks()})
    attention(args.out)
    sustained(args.out, args.sustain_s)


if __name__ == "__main__":
    main()
