"""MoE routing, permute and unpermute on one GPU, as plain PyTorch ops: time, bytes moved and GB/s.

For T tokens of hidden size h, E experts and top_k (x: [T, h] bf16; router weight [E, h]):

* ``router_gemm``          logits = x @ W_r.t()                      bytes 2Th + 2Eh + 2TE, flops 2ThE
* ``router_softmax_topk``  softmax(logits.float()) then topk         bytes 2TE + 8Tk (fp32 probs + int64 ids)
* ``router_sigmoid_topk``  DeepSeek-V3 style: sigmoid, topk, normalise the k weights
* ``permute_index``        stable sort of the T*k expert ids, the source token of each slot, tokens per expert
                           (scatter_add count): the index work before the data moves
* ``permute_gather``       x.index_select(0, src_token) -> [T*k, h] in expert order    bytes 2*(T*k*h)*2
* ``unpermute_scatter``    out.index_add_(0, src_token, y * p[:, None]) (y: [T*k, h] expert outputs, p: the
                           routing weight of each slot; bf16 atomics)                 bytes 2Tkh + 2Th (+2Tkh the
                           eager temporary y*p, not counted)
* ``unpermute_gather``     y[inverse].view(T, k, h) weighted by p and summed over k (deterministic)
                                                                                      bytes 2Tkh + 2Th

``bytes`` is the minimal traffic (each token's row read once per copy it feeds, outputs written once); ``gbps``
= bytes / time. Inputs are random (router logits random normal, so the expert loads are near uniform).
Timing: CUDA graph, median of repeats (see _bench.py); ops that cannot be captured fall back to an eager loop.

    python3 benchmarks/device/moe_permute.py --out moe_permute.jsonl [--budget-s 300]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import bench, env_info, gpu_clocks, log_json, record_failure, warm_clocks  # noqa: E402

TOKENS = (16384, 65536, 4096)
HIDDEN = (7168, 4096)
ROUTING = ((8, 256), (8, 64), (2, 64), (2, 8))  # (top_k, experts)


def run_config(args, x: torch.Tensor, top_k: int, E: int, t0: float) -> None:
    """Time every op for one (T, h, top_k, E); one JSON line per op."""
    T, h = x.shape
    wr = torch.randn(E, h, dtype=torch.bfloat16, device="cuda") * h ** -0.5
    logits = x @ wr.t()
    probs, ids = torch.topk(torch.softmax(logits.float(), dim=-1), top_k, dim=-1)
    flat = ids.reshape(-1)
    _, order = torch.sort(flat, stable=True)
    src = order // top_k
    p_sorted = probs.reshape(-1)[order].to(torch.bfloat16)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device="cuda")
    y = torch.randn(T * top_k, h, dtype=torch.bfloat16, device="cuda")
    probs_bf = probs.to(torch.bfloat16)
    ones = torch.ones_like(flat)
    out = torch.zeros(T, h, dtype=torch.bfloat16, device="cuda")

    def sigmoid_topk():
        s = torch.sigmoid(logits.float())
        v, i = torch.topk(s, top_k, dim=-1)
        return v / v.sum(-1, keepdim=True), i

    def permute_index():
        _, o = torch.sort(flat, stable=True)
        counts = torch.zeros(E, dtype=torch.int64, device="cuda").scatter_add_(0, flat, ones)
        return o // top_k, counts

    def unpermute_scatter():
        out.zero_()
        out.index_add_(0, src, y * p_sorted[:, None])

    def unpermute_gather():
        return (y[inverse].view(T, top_k, h) * probs_bf[..., None]).sum(1)

    tkh = T * top_k * h
    ops = {
        "router_gemm": (lambda: x @ wr.t(), 2 * T * h + 2 * E * h + 2 * T * E, 2 * T * h * E),
        "router_softmax_topk": (lambda: torch.topk(torch.softmax(logits.float(), -1), top_k, dim=-1),
                                2 * T * E + 12 * T * top_k, 0),
        "router_sigmoid_topk": (sigmoid_topk, 2 * T * E + 12 * T * top_k, 0),
        "permute_index": (permute_index, 8 * T * top_k * 3, 0),
        "permute_gather": (lambda: x.index_select(0, src), 4 * tkh, 0),
        "unpermute_scatter": (unpermute_scatter, 2 * tkh + 2 * T * h, 0),
        "unpermute_gather": (unpermute_gather, 2 * tkh + 2 * T * h, 0),
    }
    # correctness: the two unpermutes agree, and permute_gather puts tokens in expert order
    try:
        unpermute_scatter()
        ref = unpermute_gather().float()
        err = float((out.float() - ref).norm() / ref.norm())
        gathered = x.index_select(0, src)
        ok = bool(torch.equal(gathered[: min(8, T)], x[src[: min(8, T)]]))
        loads = torch.bincount(flat, minlength=E)
        check = {"unpermute_rel_diff": err, "gather_ok": ok, "max_load_over_mean":
                 float(loads.max() / loads.float().mean())}
    except Exception as exc:  # noqa: BLE001
        check = {"check_error": str(exc)[:200]}
    parts = []
    for name, (fn, nbytes, flops) in ops.items():
        row = {"kind": "moe_permute", "op": name, "T": T, "h": h, "top_k": top_k, "experts": E,
               "bytes": nbytes, **check}
        try:
            t = bench(fn, target_s=args.target_s, repeats=args.repeats, out_bytes=4 * tkh + 8 * T * E)
            row.update(**t, gbps=nbytes / t["time_s"] / 1e9)
            if flops:
                row.update(flops=flops, tflops=flops / t["time_s"] / 1e12)
            parts.append(f"{name}={t['time_s'] * 1e6:.0f}us/{row['gbps']:.0f}GB/s")
        except Exception as exc:  # noqa: BLE001
            record_failure(row, parts, name, exc)
        log_json(args.out, row)
    print(f"[{time.perf_counter() - t0:6.1f}s] T={T} h={h} k={top_k} E={E} {check} " + " ".join(parts),
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="moe_permute.jsonl")
    parser.add_argument("--budget-s", type=float, default=600.0)
    parser.add_argument("--target-s", type=float, default=0.005)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    t0 = time.perf_counter()
    torch.manual_seed(0)
    env = env_info()
    warm_clocks(3.0)
    log_json(args.out, {"kind": "env", **env, "clocks_after_warmup": gpu_clocks()})
    for T in TOKENS:
        for h in HIDDEN:
            x = torch.randn(T, h, dtype=torch.bfloat16, device="cuda")
            for top_k, E in ROUTING:
                if time.perf_counter() - t0 > args.budget_s:
                    print("budget reached", flush=True)
                    log_json(args.out, {"kind": "stopped", "T": T, "h": h, "top_k": top_k, "experts": E})
                    log_json(args.out, {"kind": "clocks_end", **gpu_clocks()})
                    return
                run_config(args, x, top_k, E, t0)
            torch.cuda.empty_cache()
    log_json(args.out, {"kind": "clocks_end", **gpu_clocks(), "elapsed_s": time.perf_counter() - t0})


if __name__ == "__main__":
    main()
