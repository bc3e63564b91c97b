"""Host (CPU) time of an eager MoE layer on one H200: how much of a layer's forward + backward the GPU spends
waiting for the host to issue kernels, at the shapes of the Qwen3-235B-A22B model-zoo runs.

Question it settles (issue 11): the zoo's Qwen3-235B rows run 2-5 ms per layer per micro-batch slower than the
GPU work we price, and more so with 16 local experts (EP8) than with 4 (EP32). Megatron-Core runs these layers
eagerly (no CUDA graph on H100 in those rows), issues the expert GEMMs one expert at a time (TransformerEngine's
GroupedLinear on Hopper in BF16 loops over cuBLAS calls) and reads the per-expert token counts on the host
(a device-to-host copy that empties the launch queue) before the expert GEMMs. This script builds that structure
in plain PyTorch and measures it three ways on the same kernels:

* ``graph``: the whole forward + backward of ``layers`` layers captured in one CUDA graph and replayed: GPU time
  with no host in the way (the splits are known on the host in advance);
* ``eager``: the same, eagerly (the host issues every kernel; no sync): the host cost of launching;
* ``eager_sync``: eager with the token counts copied to the host once per layer forward (``.tolist()``), as the
  dispatchers do.

``exposed = eager time - graph time`` is the host time the GPU waited for. It is a lower bound for Megatron +
TransformerEngine (their Python per module is heavier than plain ``torch.mm``; the router's auxiliary loss, the
DDP gradient hooks and the all-to-all launches are left out), which the report says.

Also measured: host seconds per kernel of small ops issued back to back (``torch.mm`` on tiny matrices,
elementwise add, and an autograd chain forward + backward), and the round trip of one ``.tolist()`` sync.

Run on the device: ``python3 benchmarks/device/moe_host_overhead.py --out $OUT/moe_host.jsonl``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import env_info, gpu_clocks, log_json, warm_clocks, warm_on_side_stream  # noqa: E402

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, EXPERT_FFN, TOP_K, EXPERTS = 4096, 64, 4, 128, 1536, 8, 128  # Qwen3-235B-A22B


class GroupedLinearLoop(torch.autograd.Function):
    """One GEMM per expert into slices of one output (TransformerEngine GroupedLinear's Hopper BF16 path);
    backward: per expert a dgrad GEMM and a wgrad GEMM accumulated into the expert's gradient buffer (Megatron's
    gradient-accumulation fusion writes wgrad into main_grad)."""

    @staticmethod
    def forward(ctx, x, splits, grads, *weights):
        out = torch.empty(x.shape[0], weights[0].shape[0], dtype=x.dtype, device=x.device)
        for xi, oi, w in zip(torch.split(x, splits), torch.split(out, splits), weights, strict=True):
            torch.mm(xi, w.t(), out=oi)
        ctx.save_for_backward(x, *weights)
        ctx.splits, ctx.grads = splits, grads
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, *weights = ctx.saved_tensors
        dx = torch.empty_like(x)
        for xi, gi, dxi, w, gw in zip(torch.split(x, ctx.splits), torch.split(grad_out, ctx.splits),
                                      torch.split(dx, ctx.splits), weights, ctx.grads, strict=True):
            torch.mm(gi, w, out=dxi)
            gw.addmm_(gi.t(), xi)
        return (dx, None, None) + (None,) * len(weights)


def rmsnorm(x, w):
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * w


class Layer:
    """One Qwen3-235B layer per rank at tensor-parallel ``tp`` (attention heads split, sequence-parallel tokens in
    the MoE block) with ``local`` experts and uniform routing (forced balance, as the zoo's runs)."""

    def __init__(self, tp: int, local: int, seq: int, dev, moe: bool = True):
        g = torch.Generator(device="cpu").manual_seed(0)
        p = dict(device=dev, dtype=torch.bfloat16)

        def w(*shape):
            return (torch.randn(*shape, generator=g) * 0.02).to(**p).requires_grad_(True)

        heads, kv = HEADS // tp, max(KV_HEADS // tp, 1)
        self.tp, self.local, self.seq, self.moe = tp, local, seq, moe
        self.heads, self.kv = heads, kv
        self.norm1, self.norm2 = w(HIDDEN), w(HIDDEN)
        self.qkv = w((heads + 2 * kv) * HEAD_DIM, HIDDEN)
        self.proj = w(HIDDEN, heads * HEAD_DIM)
        self.tokens = seq // tp                                  # sequence-parallel tokens per rank
        if moe:
            self.router = w(EXPERTS, HIDDEN)
            self.fc1 = [w(2 * EXPERT_FFN, HIDDEN) for _ in range(local)]
            self.fc2 = [w(HIDDEN, EXPERT_FFN) for _ in range(local)]
            self.fc1_grad = [torch.zeros_like(t) for t in self.fc1]
            self.fc2_grad = [torch.zeros_like(t) for t in self.fc2]
            rows = self.tokens * TOP_K                           # rows received under forced balance
            self.splits = [rows // local] * local
            # received rows as gathers of this rank's tokens (the all-to-all itself is not run here)
            self.src = (torch.arange(rows, device=dev) % self.tokens)
        else:
            ffn = 12288 // tp
            self.up, self.down = w(2 * ffn, HIDDEN), w(HIDDEN, ffn)

    def forward(self, x, sync: bool):
        t = self.tokens
        h = rmsnorm(x, self.norm1)
        full = h.repeat(self.tp, 1)                              # stands in for the SP all-gather (same bytes)
        qkv = full @ self.qkv.t()
        q, k, v = qkv.split([self.heads * HEAD_DIM, self.kv * HEAD_DIM, self.kv * HEAD_DIM], dim=-1)
        q = q.view(1, self.seq, self.heads, HEAD_DIM).transpose(1, 2)
        k = k.view(1, self.seq, self.kv, HEAD_DIM).transpose(1, 2)
        v = v.view(1, self.seq, self.kv, HEAD_DIM).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        a = a.transpose(1, 2).reshape(self.seq, self.heads * HEAD_DIM) @ self.proj.t()
        x = x + a[:t]                                            # stands in for the reduce-scatter
        h = rmsnorm(x, self.norm2)
        if not self.moe:
            up = h @ self.up.t()
            g1, g2 = up.chunk(2, dim=-1)
            return x + (F.silu(g1) * g2) @ self.down.t()
        logits = h @ self.router.t()
        probs = torch.softmax(logits.float(), dim=-1)
        top, idx = torch.topk(probs, TOP_K, dim=-1)
        routing = torch.zeros_like(probs, dtype=torch.bool).scatter_(1, idx, True)
        counts = routing.sum(0)
        splits = self.splits
        if sync:                                                 # the dispatcher's device-to-host read of counts
            _ = counts.tolist()
        order = torch.argsort(self.src, stable=True)
        perm = h.index_select(0, self.src[order])
        y = GroupedLinearLoop.apply(perm, splits, self.fc1_grad, *self.fc1)
        g1, g2 = y.chunk(2, dim=-1)
        y = GroupedLinearLoop.apply(F.silu(g1) * g2, splits, self.fc2_grad, *self.fc2)
        weight = top.reshape(-1)[: y.shape[0]].to(y.dtype).unsqueeze(1)
        out = torch.zeros_like(h).index_add_(0, self.src[order], y * weight)
        return x + out


def step(layers, x, sync):
    h = x
    for layer in layers:
        h = layer.forward(h, sync)
    h.float().sum().backward()


def kernel_count(fn) -> int:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def wall(fn, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def host_time(layers, x, repeats: int) -> tuple[float, float]:
    """Host seconds to issue the forward and the backward (no sync inside) while the GPU is held busy by a sleep
    kernel, so that the host never waits for the GPU: the median over ``repeats`` of each."""
    fwd, bwd = [], []
    for _ in range(repeats):
        torch.cuda.synchronize()
        torch.cuda._sleep(400_000_000)                   # ~0.2 s at 1.98 GHz: longer than any issue time here
        t0 = time.perf_counter()
        h = x
        for layer in layers:
            h = layer.forward(h, False)
        loss = h.float().sum()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        fwd.append(t1 - t0)
        bwd.append(t2 - t1)
    return statistics.median(fwd), statistics.median(bwd)


def graph_time(fn, repeats: int) -> float:
    warm_on_side_stream(fn, 2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    return wall(graph.replay, repeats)


def host_per_kernel(dev, n: int = 4000) -> dict:
    a = torch.randn(64, 64, device=dev, dtype=torch.bfloat16)
    b = torch.randn(64, 64, device=dev, dtype=torch.bfloat16)
    x = torch.randn(1024, device=dev)

    def mm():
        for _ in range(n):
            torch.mm(a, b)

    def add():
        for _ in range(n):
            x.add(1.0)

    leaf = torch.randn(1024, device=dev, requires_grad=True)

    def chain():
        y = leaf
        for _ in range(n // 4):
            y = y * 1.0001
        y.sum().backward()

    def tolist():
        for _ in range(200):
            x[:8].tolist()

    for f in (mm, add, chain, tolist):
        f()
    torch.cuda.synchronize()
    out = {}
    for name, f, count in (("mm_s", mm, n), ("add_s", add, n), ("autograd_mul_fwd_bwd_s", chain, n // 4),
                           ("tolist_roundtrip_s", tolist, 200)):
        out[name] = wall(f, 5) / count
    return out


def measure_case(kind: str, tp: int, local: int, args, dev) -> dict:
    layers = [Layer(tp, local, args.seq, dev, moe=kind == "moe") for _ in range(args.layers)]
    x = torch.randn(args.seq // tp, HIDDEN, device=dev, dtype=torch.bfloat16, requires_grad=True)

    def eager():
        step(layers, x, False)

    def synced():
        step(layers, x, True)

    eager()
    torch.cuda.synchronize()
    kernels = kernel_count(eager) / args.layers
    t_eager = wall(eager, args.repeats) / args.layers
    t_sync = wall(synced, args.repeats) / args.layers if kind == "moe" else t_eager
    h_fwd, h_bwd = (t / args.layers for t in host_time(layers, x, args.repeats))
    try:
        t_graph = graph_time(eager, args.repeats) / args.layers
    except Exception as exc:  # noqa: BLE001
        print(f"  graph capture failed: {type(exc).__name__}: {str(exc)[:160]}", flush=True)
        t_graph = float("nan")
    return {"kind": "layer", "case": kind, "tp": tp, "local_experts": local, "seq": args.seq,
            "tokens_per_expert": (args.seq // tp) * TOP_K // local if local else 0, "layers": args.layers,
            "kernels_per_layer": kernels, "graph_s": t_graph, "eager_s": t_eager, "eager_sync_s": t_sync,
            "exposed_s": t_eager - t_graph, "exposed_sync_s": t_sync - t_graph,
            "host_fwd_s": h_fwd, "host_bwd_s": h_bwd}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="moe_host.jsonl")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=1, help="times the whole case list runs (medians over rounds "
                    "smooth the host's drift)")
    args = ap.parse_args()
    dev = torch.device("cuda")
    warm_clocks()
    log_json(args.out, {"kind": "env", **env_info(), **gpu_clocks()})
    per = host_per_kernel(dev)
    log_json(args.out, {"kind": "host_per_kernel", **per})
    print("host per kernel:", {k: f"{v * 1e6:.2f} us" for k, v in per.items()}, flush=True)
    cases = [("dense", 2, 0), ("dense", 4, 0), ("dense", 8, 0), ("moe", 4, 16), ("moe", 2, 16), ("moe", 2, 4),
             ("moe", 4, 4), ("moe", 2, 8), ("moe", 4, 32), ("moe", 8, 16), ("moe", 1, 1), ("moe", 2, 32)]
    print(f"{'case':>6} {'tp':>3} {'experts':>7} {'kernels':>8} {'graph ms':>9} {'eager ms':>9} {'sync ms':>9} "
          f"{'exposed':>8} {'sync exp':>8} {'host fwd':>8} {'host bwd':>8}  (ms per layer)", flush=True)
    for kind, tp, local in cases * args.rounds:
        row = measure_case(kind, tp, local, args, dev)
        log_json(args.out, row)
        print(f"{kind:>6} {tp:>3} {local:>7} {row['kernels_per_layer']:>8.0f} {row['graph_s'] * 1e3:>9.3f} "
              f"{row['eager_s'] * 1e3:>9.3f} {row['eager_sync_s'] * 1e3:>9.3f} {row['exposed_s'] * 1e3:>8.3f} "
              f"{row['exposed_sync_s'] * 1e3:>8.3f} {row['host_fwd_s'] * 1e3:>8.3f} {row['host_bwd_s'] * 1e3:>8.3f}",
              flush=True)
        torch.cuda.empty_cache()
    log_json(args.out, {"kind": "clocks_after", **gpu_clocks()})


if __name__ == "__main__":
    main()
