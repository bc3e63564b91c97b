"""bf16 GEMM sweep on one H200 with warmed clocks, timed as CUDA-graph replays (no launch gaps): square products
1024-16384 and the forward / input-gradient (dgrad) / weight-gradient (wgrad) products of every linear layer of
Llama-3.2-1B and Qwen2.5-1.5B (dims from hf_common.CONFIGS, i.e. the published config.json) at 4096, 8192 and
16384 tokens. Layouts as torch.nn.Linear runs them: y = x @ W.T (fwd), dx = dy @ W (dgrad), dW = dy.T @ x
(wgrad). Per product: median over 5 replays of a graph of ``reps`` back-to-back products (CUDA events), ms per
product and TFLOP/s (2*M*N*K). One JSON line per product in ``--out``/gemm_sweep.jsonl. Data only.

    python3 benchmarks/device/gemm_graph_sweep.py --out OUTDIR
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_common import CONFIGS, Clock, Log, env_info, warm_clocks  # noqa: E402

TOKENS = (4096, 8192, 16384)
SQUARES = (1024, 2048, 4096, 8192, 16384)


def linears(name: str):
    """(layer, out_features N, in_features K) of one decoder layer and the head of model ``name``."""
    c = CONFIGS[name]
    h, f = c["hidden_size"], c["intermediate_size"]
    hd = c.get("head_dim", h // c["num_attention_heads"])
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    return [("q_proj", q, h), ("k_proj", kv, h), ("o_proj", h, q), ("gate_proj", f, h), ("down_proj", h, f),
            ("lm_head", c["vocab_size"], h)]


def operands(kind: str, t: int, n: int, k: int):
    """The two operands (views with torch.nn.Linear's layouts) and (M, N, K) of the product."""
    bf = dict(device="cuda", dtype=torch.bfloat16)
    if kind == "square":
        return torch.randn(t, t, **bf), torch.randn(t, t, **bf), (t, t, t)
    if kind == "fwd":  # x[t,k] @ W[n,k].T
        return torch.randn(t, k, **bf), torch.randn(n, k, **bf).t(), (t, n, k)
    if kind == "dgrad":  # dy[t,n] @ W[n,k]
        return torch.randn(t, n, **bf), torch.randn(n, k, **bf), (t, k, n)
    return torch.randn(t, n, **bf).t(), torch.randn(t, k, **bf), (n, k, t)  # wgrad: dy.T[n,t] @ x[t,k]


def time_graph(a, b, flops: float) -> tuple[float, int]:
    out = a @ b
    reps = int(max(3, min(200, 0.02 / (flops / 600e12))))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            torch.matmul(a, b, out=out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            torch.matmul(a, b, out=out)
    graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        graph.replay()
        e1.record()
        e1.synchronize()
        samples.append(e0.elapsed_time(e1) / 1e3 / reps)
    del graph, out
    return statistics.median(samples), reps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget-s", type=float, default=90)
    args = parser.parse_args()
    clock = Clock(args.budget_s)
    log = Log(os.path.join(args.out, "gemm_sweep.jsonl"))
    warm_clocks("cuda", 8.0)
    log.row({"section": "env", **env_info("cuda")})
    cases = [("square", None, "square", s, s, s) for s in SQUARES]
    for model in ("llama-3.2-1b", "qwen2.5-1.5b"):
        for t in TOKENS:
            for layer, n, k in linears(model):
                for kind in ("fwd", "dgrad", "wgrad"):
                    cases.append((model, layer, kind, t, n, k))
    for model, layer, kind, t, n, k in cases:
        if clock.left() < 3:
            log.row({"model": model, "layer": layer, "kind": kind, "tokens": t, "skipped": "deadline"})
            continue
        a, b, (m, nn, kk) = operands(kind, t, n, k)
        flops = 2.0 * m * nn * kk
        try:
            sec, reps = time_graph(a, b, flops)
            row = {"model": model, "layer": layer, "kind": kind, "tokens": t, "M": m, "N": nn, "K": kk,
                   "reps": reps, "ms": sec * 1e3, "tflops": flops / sec / 1e12}
        except Exception as exc:  # noqa: BLE001 - one failed product must not lose the others
            row = {"model": model, "layer": layer, "kind": kind, "tokens": t, "error": f"{type(exc).__name__}: {exc}"}
        log.row(row)
        del a, b
    log.row({"section": "env_end", **env_info("cuda")})


if __name__ == "__main__":
    main()
