"""MoE expert GEMMs on one GPU: grouped GEMM efficiency vs tokens per expert, bf16 and fp8.

Experts: DeepSeek-V3 (h 7168, expert ffn 2048, SwiGLU: fc1 7168->4096, fc2 2048->7168) and Mixtral 8x7B (h 4096,
ffn 14336: fc1 4096->28672, fc2 14336->4096). For E local experts with the same number of tokens each (T = E * tpe
rows in all), it times the forward GEMM of one layer, X [T, K] grouped by expert times W_e [K, N]:

* ``grouped_bf16``: torch._grouped_mm(X, W.transpose(-2, -1), offs) with W stored [E, N, K] (as nn.Linear)
* ``grouped_fp8`` / ``grouped_fp8_fastacc``: torch._scaled_grouped_mm, e4m3 operands, row-wise scales
  (scale_a [T], scale_b [E, N]), bf16 out, use_fast_accum off / on
* ``loop_bf16``: one torch.matmul per expert (X[offs slice] @ W_e.t()), E launches captured in one CUDA graph
* ``dense_bf16`` / ``dense_fp8_row``: one GEMM [T, K] x [K, N] of the same FLOPs (torch.matmul /
  torch._scaled_mm with row-wise scales): the ceiling for a perfectly batched expert layer

FLOPs = 2 * T * K * N; ``tflops`` is recorded per variant (divide by dense_bf16's of the same row set for the
fraction of a dense GEMM). Shapes whose
single call would exceed --max-tflop are skipped. Timing: CUDA graph, median of repeats (see _bench.py).

With ``--imbalance SIGMA[,SIGMA...]`` it instead times grouped_bf16 / grouped_fp8_fastacc with unequal expert
loads (the same total T = E * tpe): expert e gets a share p_e proportional to exp(SIGMA * z_e), z_e standard normal
(fixed seed), counts rounded to multiples of 16; rows record the loads' max/mean. Does the grouped GEMM's time
follow the total FLOPs or the busiest expert?

    python3 benchmarks/device/moe_gemm.py --out moe_gemm.jsonl [--budget-s 600]
    python3 benchmarks/device/moe_gemm.py --out moe_gemm_imbalance.jsonl --imbalance 0.3,0.7
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import bench, env_info, gpu_clocks, log_json, warm_clocks  # noqa: E402

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
GEMMS = (("deepseek_v3", "fc1", 7168, 4096), ("deepseek_v3", "fc2", 2048, 7168),
         ("mixtral_8x7b", "fc1", 4096, 28672), ("mixtral_8x7b", "fc2", 14336, 4096))
EXPERTS = (8, 32, 16)  # most wanted first
TOKENS_PER_EXPERT = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def rowwise(x: torch.Tensor):
    """Row-wise e4m3 quantization along the last dim: (q, scales with the last dim dropped)."""
    scale = (x.abs().amax(dim=-1).float() / FP8_MAX).clamp(min=1e-12)
    return (x.float() / scale.unsqueeze(-1)).to(FP8), scale


def loads(experts: int, tpe: int, sigma: float, gen: torch.Generator) -> list[int]:
    """Tokens per expert, multiples of 16 summing to experts * tpe, shares proportional to exp(sigma * z)."""
    total = experts * tpe
    share = torch.exp(sigma * torch.randn(experts, generator=gen, dtype=torch.float64))
    share = share / share.sum()
    counts = [int(round(float(c) * total / 16)) * 16 for c in share]
    counts[int(torch.tensor(counts).argmax())] += total - sum(counts)  # keep the total exact
    return counts


def time_calls(calls: dict, base: dict, args, ref=None) -> tuple[list[str], dict]:
    """Time each variant of one configuration, append a JSON line per variant; return short summaries and the
    seconds per variant."""
    parts, times = [], {}
    for variant, call in calls.items():
        row = {**base, "variant": variant}
        try:
            if ref is not None and variant.startswith("grouped"):
                out = call()  # correctness: the first expert's block against its bf16 product
                row["rel_err_expert0"] = float((out[:ref.shape[0]].float() - ref).norm() / ref.norm())
                del out
            t = bench(call, target_s=args.target_s, repeats=args.repeats, out_bytes=base["tokens"] * base["n"] * 2,
                      max_graph_bytes=8 << 30)
            row.update(**t, tflops=base["flops"] / t["time_s"] / 1e12)
            times[variant] = t["time_s"]
            parts.append(f"{variant}={row['tflops']:.0f}")
        except Exception as exc:  # noqa: BLE001 - record and go on
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            parts.append(f"{variant}=ERR")
            print("   ", variant, row["error"][:200], flush=True)
            torch.cuda.synchronize()
        log_json(args.out, row)
    return parts, times


def uniform_config(args, w, w8, w_scale, tpe: int, info: dict, base: dict) -> list[str]:
    """All variants for E experts (w: [E, N, K]) with tpe tokens each."""
    experts, n, k = w.shape
    x = torch.randn(experts * tpe, k, dtype=torch.bfloat16, device="cuda")
    offs = torch.arange(1, experts + 1, device="cuda", dtype=torch.int32) * tpe
    x8, xs = rowwise(x)
    calls = {}
    if info["has_grouped_mm"]:
        calls["grouped_bf16"] = lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
    if info["has_scaled_grouped_mm"]:
        for fast in (False, True):
            calls["grouped_fp8" + ("_fastacc" if fast else "")] = (
                lambda fast=fast: torch._scaled_grouped_mm(x8, w8.transpose(-2, -1), xs, w_scale, offs=offs,
                                                           out_dtype=torch.bfloat16, use_fast_accum=fast))

    def loop():
        for e in range(experts):
            torch.matmul(x[e * tpe:(e + 1) * tpe], w[e].t())
    calls["loop_bf16"] = loop
    wd = w[0].t().contiguous()  # [K, N] row-major, one expert's weight as the dense stand-in
    calls["dense_bf16"] = lambda: torch.matmul(x, wd)
    wd8, wd_scale = rowwise(w[0])  # [N, K]
    xs2, wds2 = xs.unsqueeze(1), wd_scale.unsqueeze(0)
    calls["dense_fp8_row"] = lambda: torch._scaled_mm(x8, wd8.t(), xs2, wds2, out_dtype=torch.bfloat16)
    ref = torch.matmul(x[:tpe], w[0].t()).float()
    parts, times = time_calls(calls, base, args, ref)
    if "dense_bf16" in times:
        log_json(args.out, {**base, "kind": "moe_dense_ref", "dense_bf16_time_s": times["dense_bf16"]})
    return parts


def imbalanced_config(args, x, x8, xs, w, w8, w_scale, counts: list[int], base: dict) -> list[str]:
    offs = torch.tensor(counts, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
    calls = {"grouped_bf16": lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs),
             "grouped_fp8_fastacc": lambda: torch._scaled_grouped_mm(
                 x8, w8.transpose(-2, -1), xs, w_scale, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=True)}
    return time_calls(calls, base, args)[0]


def imbalance(args) -> None:
    t0 = time.perf_counter()
    env = env_info()
    warm_clocks(3.0)
    log_json(args.out, {"kind": "env", **env, "clocks_after_warmup": gpu_clocks()})
    gen = torch.Generator().manual_seed(1)
    sigmas = [0.0] + [float(v) for v in args.imbalance.split(",")]
    for experts, (model, layer, k, n) in ((e, g) for e in (8, 32) for g in GEMMS):
        w = torch.randn(experts, n, k, dtype=torch.bfloat16, device="cuda") * 0.02
        w8, w_scale = rowwise(w)
        for tpe in (128, 512, 2048, 8192):
            tokens = experts * tpe
            if 2 * tokens * k * n > args.max_tflop * 1e12 or time.perf_counter() - t0 > args.budget_s:
                continue
            x = torch.randn(tokens, k, dtype=torch.bfloat16, device="cuda")
            x8, xs = rowwise(x)
            for sigma in sigmas:
                counts = loads(experts, tpe, sigma, gen) if sigma else [tpe] * experts
                base = {"kind": "moe_gemm_imbalance", "model": model, "layer": layer, "experts": experts,
                        "tokens_per_expert_mean": tpe, "tokens": tokens, "k": k, "n": n, "sigma": sigma,
                        "max_load": max(counts), "min_load": min(counts), "max_over_mean": max(counts) / tpe,
                        "loads": counts, "flops": 2 * tokens * k * n}
                parts = imbalanced_config(args, x, x8, xs, w, w8, w_scale, counts, base)
                print(f"[{time.perf_counter() - t0:6.1f}s] {model:12s} {layer} E={experts:2d} tpe={tpe:5d} "
                      f"sigma={sigma} max/mean={max(counts) / tpe:.2f} TFLOP/s " + " ".join(parts), flush=True)
        torch.cuda.empty_cache()
    log_json(args.out, {"kind": "clocks_end", **gpu_clocks(), "elapsed_s": time.perf_counter() - t0})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="moe_gemm.jsonl")
    parser.add_argument("--budget-s", type=float, default=900.0)
    parser.add_argument("--target-s", type=float, default=0.01)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-tflop", type=float, default=40.0, help="skip shapes above this many TFLOP per call")
    parser.add_argument("--imbalance", default="", help="comma-separated SIGMAs: unequal-load mode")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.imbalance:
        imbalance(args)
        return
    t0 = time.perf_counter()
    env = env_info()
    info = {"has_grouped_mm": hasattr(torch, "_grouped_mm"),
            "has_scaled_grouped_mm": hasattr(torch, "_scaled_grouped_mm")}
    print(env, info, flush=True)
    warm_clocks(3.0)
    log_json(args.out, {"kind": "env", **env, **info, "clocks_after_warmup": gpu_clocks()})
    for experts, (model, layer, k, n) in ((e, g) for e in EXPERTS for g in GEMMS):
        w = torch.randn(experts, n, k, dtype=torch.bfloat16, device="cuda") * 0.02
        w8, w_scale = rowwise(w)  # [E, N, K] e4m3, scales [E, N]
        for tpe in TOKENS_PER_EXPERT:
            flops = 2 * experts * tpe * k * n
            if flops > args.max_tflop * 1e12 or time.perf_counter() - t0 > args.budget_s:
                continue
            base = {"kind": "moe_gemm", "model": model, "layer": layer, "experts": experts, "tokens_per_expert": tpe,
                    "tokens": experts * tpe, "k": k, "n": n, "flops": flops}
            parts = uniform_config(args, w, w8, w_scale, tpe, info, base)
            print(f"[{time.perf_counter() - t0:6.1f}s] {model:12s} {layer} E={experts:2d} tpe={tpe:5d} "
                  f"TFLOP/s " + " ".join(parts), flush=True)
        torch.cuda.empty_cache()
    if time.perf_counter() - t0 > args.budget_s:
        log_json(args.out, {"kind": "stopped"})
    log_json(args.out, {"kind": "clocks_end", **gpu_clocks(), "elapsed_s": time.perf_counter() - t0})


if __name__ == "__main__":
    main()
