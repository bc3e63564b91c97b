"""Profile one plain-PyTorch GPT training step (benchmarks/device/train_step_gpt.py's model) on one GPU.

Prints JSON: wall time of the step, the sum of GPU kernel time, and GPU time by kernel class (GEMM, attention,
elementwise/norm, optimizer, copies/casts, loss), to tell GPU work from host (launch) stalls.

    python3 benchmarks/device/profile_train_step.py --layers 24 --hidden 1024 --heads 16 --ffn 4096 --seq 4096 \
            --micro-batch 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_step_gpt import GPT, make_step  # noqa: E402

CLASSES = (("gemm", ("gemm", "cutlass", "sm90_xmma", "nvjet", "ampere_", "cublas")), ("attention", ("flash", "fmha")),
           ("optimizer", ("adam", "multi_tensor")), ("loss", ("log_softmax", "nll_loss", "softmax")),
           ("copy_cast", ("copy", "cast", "to_copy")), ("norm", ("layer_norm", "layernorm")),
           ("elementwise", ("elementwise", "vectorized", "gelu", "add", "mul", "fill")))


def classify(name: str) -> str:
    lower = name.lower()
    for cls, keys in CLASSES:
        if any(k in lower for k in keys):
            return cls
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser()
    for name, default in (("layers", 24), ("hidden", 1024), ("heads", 16), ("ffn", 4096), ("vocab", 32000),
                          ("seq", 4096), ("micro-batch", 2)):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    device = torch.device("cuda")
    model = GPT(args.layers, args.hidden, args.heads, args.ffn, args.vocab, args.seq).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, args.vocab, (args.micro_batch, args.seq), device=device)

    step = make_step(model, optimizer, tokens, args.vocab)
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    by_class: Counter = Counter()
    kernels = 0
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels += 1
            by_class[classify(event.name)] += event.device_time_total / 1e6 if hasattr(event, "device_time_total") \
                else event.cuda_time_total / 1e6
    top = Counter()
    for event in prof.key_averages():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            top[event.key[:80]] += getattr(event, "device_time_total", 0) / 1e6
    print(json.dumps({"config": vars(args), "wall_s_profiled": wall, "kernels": kernels,
                      "gpu_s": sum(by_class.values()), "gpu_s_by_class": dict(by_class),
                      "top_kernels_s": dict(top.most_common(15))}))


if __name__ == "__main__":
    main()
