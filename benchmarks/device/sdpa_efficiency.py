"""Measure PyTorch's F.scaled_dot_product_attention (causal, bf16) forward and backward on one GPU.

Prints one JSON line per shape: time of forward and of backward (median of timed repeats after warm-up, clocks
warmed first) and the achieved TFLOP/s with the causal-half FLOP count (forward 2 * 2*b*heads*s^2*d / 2; backward
2.5x forward: dQ, dK, dV and the recomputation of the scores, as FlashAttention-2 counts it).

    python3 benchmarks/device/sdpa_efficiency.py > sdpa.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import median_time, warm_clocks  # noqa: E402

SHAPES = [  # (batch, heads, seq, head_dim)
    (4, 16, 2048, 128), (2, 32, 2048, 128), (2, 16, 4096, 64), (8, 16, 2048, 64), (1, 32, 8192, 128),
    (1, 64, 4096, 128), (4, 32, 4096, 128), (1, 16, 16384, 64), (16, 16, 1024, 64), (2, 8, 8192, 128),
]


def main() -> None:
    device = torch.device("cuda")
    warm_clocks(5.0)
    for b, h, s, d in SHAPES:
        q, k, v = (torch.randn(b, h, s, d, dtype=torch.bfloat16, device=device, requires_grad=True) for _ in range(3))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        grad = torch.randn_like(out)
        fwd = median_time(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=True), 20)

        def fwd_bwd(q=q, k=k, v=v, grad=grad):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.autograd.grad(o, (q, k, v), grad)
        both = median_time(fwd_bwd, 20)
        flops_fwd = 2 * 2 * b * h * s * s * d / 2
        print(json.dumps({"batch": b, "heads": h, "seq": s, "head_dim": d, "fwd_s": fwd, "bwd_s": both - fwd,
                          "fwd_tflops": flops_fwd / fwd / 1e12, "bwd_tflops": 2.5 * flops_fwd / (both - fwd) / 1e12,
                          "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}), flush=True)


if __name__ == "__main__":
    main()
