"""Decode-step and prefill latency of a random-weight Llama-3-8B-shaped model in plain PyTorch (bf16), the
measurement behind simulator/validation/data/h200_serve/ (the serving model's validation).

Model: 32 layers, hidden 4096, 32 query heads, 8 K/V heads (head dim 128), SwiGLU FFN 14336, vocab 128256,
RMSNorm, rotary embeddings (applied to q and k), untied LM head; random bf16 weights (N(0, 0.02)). Each layer:
RMSNorm -> fused QKV GEMM -> RoPE -> K/V written into a preallocated cache -> attention
(F.scaled_dot_product_attention) -> O GEMM (+ all-reduce under TP) -> residual -> RMSNorm -> fused gate/up GEMM ->
SiLU x up -> down GEMM (+ all-reduce under TP) -> residual. Final RMSNorm and the LM head on the last token of
each sequence only (as vLLM computes logits), then argmax.

* decode: ``batch`` sequences, one new token each, attending to ``context`` cached tokens (the new one included).
  The K/V cache is one preallocated pool per layer viewed as (batch, kv_heads, context, head_dim); the query's
  GQA group is folded into the query length (q: (batch, kv_heads, group, head_dim)) so SDPA reads each K/V head
  once, non-causal (the new token sees the whole context). The whole step is captured in one CUDA graph and
  replayed; the time is the median replay (CUDA events) over ``--repeats``. A subset is also timed eagerly (no
  graph: each kernel launched from Python) to measure the launch overhead.
* prefill: one sequence of ``tokens`` prompt tokens (and a few batches of several sequences), causal SDPA
  (FlashAttention backend), K/V written into the cache, eager (prefill is not graph-captured in vLLM either),
  median of ``--repeats`` forward passes under torch.inference_mode.

Clocks are warmed first with bf16 8192^3 products (a cold H200 idles near 345 MHz). One JSON line per
measurement is appended to ``--out``.

    python3 benchmarks/device/serve_decode.py --out serve.jsonl
    torchrun --nproc-per-node 2 benchmarks/device/serve_decode.py --out serve_tp2.jsonl   # TP2 decode only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import time_once, warm_clocks, warm_on_side_stream  # noqa: E402

LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 32, 4096, 32, 8, 128, 14336, 128256
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTEXTS = (1024, 2048, 4096, 8192, 16384, 32768)
MAX_CACHE_TOKENS = 512 * 1024  # batch x context at most: 64 GiB of K/V for this model
PREFILL_TOKENS = (512, 1024, 2048, 4096, 8192, 16384)
PREFILL_BATCHED = ((4, 1024), (8, 2048), (16, 512))  # (sequences, tokens each)
EAGER = ((1, 1024), (1, 8192), (8, 4096), (64, 2048), (256, 1024))


class Model:
    """Weights for one TP rank (heads and FFN columns split ``tp`` ways, as Megatron/vLLM shard them)."""

    def __init__(self, tp: int, cache_tokens: int):
        self.tp = tp
        self.heads, self.kv_heads, self.ffn = HEADS // tp, KV_HEADS // tp, FFN // tp
        std = 0.02
        g = torch.Generator(device="cuda").manual_seed(0)

        def w(*shape):
            return (torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g) * std)

        qkv = (self.heads + 2 * self.kv_heads) * HEAD_DIM
        self.layers = [dict(n1=torch.ones(HIDDEN, device="cuda", dtype=torch.bfloat16),
                            qkv=w(qkv, HIDDEN), o=w(HIDDEN, self.heads * HEAD_DIM),
                            n2=torch.ones(HIDDEN, device="cuda", dtype=torch.bfloat16),
                            gu=w(2 * self.ffn, HIDDEN), down=w(HIDDEN, self.ffn)) for _ in range(LAYERS)]
        self.embed = w(VOCAB, HIDDEN)
        self.norm = torch.ones(HIDDEN, device="cuda", dtype=torch.bfloat16)
        self.head = w(VOCAB // tp, HIDDEN)
        per_layer = 2 * cache_tokens * self.kv_heads * HEAD_DIM
        self.cache = [torch.zeros(per_layer, device="cuda", dtype=torch.bfloat16) for _ in range(LAYERS)]
        self.weight_bytes = sum(t.numel() * 2 for layer in self.layers for t in layer.values()) + \
            (self.embed.numel() + self.head.numel() + HIDDEN) * 2

    def kv(self, layer: int, batch: int, context: int):
        n = batch * self.kv_heads * context * HEAD_DIM
        c = self.cache[layer]
        return (c[:n].view(batch, self.kv_heads, context, HEAD_DIM),
                c[n:2 * n].view(batch, self.kv_heads, context, HEAD_DIM))


def _rms(x, w):
    return F.rms_norm(x, (HIDDEN,), w, 1e-5)


def _rope(x, cos, sin):
    x1, x2 = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def _all_reduce(x, tp):
    if tp > 1:
        torch.distributed.all_reduce(x)
    return x


def decode_step(m: Model, tokens, batch: int, context: int, cos, sin):
    """One decode step: ``tokens`` (batch,) -> next tokens (batch,). K/V of the new token go to position
    context - 1."""
    h = F.embedding(tokens, m.embed)  # (B, H)
    group = m.heads // m.kv_heads
    for i, L in enumerate(m.layers):
        x = _rms(h, L["n1"])
        qkv = x @ L["qkv"].t()
        q, k, v = qkv.split((m.heads * HEAD_DIM, m.kv_heads * HEAD_DIM, m.kv_heads * HEAD_DIM), dim=-1)
        q = _rope(q.view(batch, m.kv_heads, group, HEAD_DIM), cos, sin)
        k = _rope(k.view(batch, m.kv_heads, 1, HEAD_DIM), cos, sin)
        kc, vc = m.kv(i, batch, context)
        kc[:, :, context - 1:context].copy_(k)
        vc[:, :, context - 1:context].copy_(v.view(batch, m.kv_heads, 1, HEAD_DIM))
        a = F.scaled_dot_product_attention(q, kc, vc)  # (B, kvh, group, D)
        h = h + _all_reduce(a.reshape(batch, m.heads * HEAD_DIM) @ L["o"].t(), m.tp)
        x = _rms(h, L["n2"])
        gu = x @ L["gu"].t()
        g, u = gu.chunk(2, dim=-1)
        h = h + _all_reduce((F.silu(g) * u) @ L["down"].t(), m.tp)
    logits = _rms(h, m.norm) @ m.head.t()
    return logits.argmax(dim=-1)


def prefill(m: Model, tokens, seqs: int, length: int, cos, sin):
    """Prefill ``seqs`` sequences of ``length`` tokens: causal attention, K/V written to the cache."""
    h = F.embedding(tokens, m.embed)  # (S*T, H)
    for i, L in enumerate(m.layers):
        x = _rms(h, L["n1"])
        qkv = x @ L["qkv"].t()
        q, k, v = qkv.split((m.heads * HEAD_DIM, m.kv_heads * HEAD_DIM, m.kv_heads * HEAD_DIM), dim=-1)
        q = _rope(q.view(seqs, length, m.heads, HEAD_DIM).transpose(1, 2), cos, sin)
        k = _rope(k.view(seqs, length, m.kv_heads, HEAD_DIM).transpose(1, 2), cos, sin)
        v = v.view(seqs, length, m.kv_heads, HEAD_DIM).transpose(1, 2)
        kc, vc = m.kv(i, seqs, length)
        kc.copy_(k)
        vc.copy_(v)
        a = _causal_attention(q, kc, vc)
        a = a.transpose(1, 2).reshape(seqs * length, m.heads * HEAD_DIM)
        h = h + _all_reduce(a @ L["o"].t(), m.tp)
        x = _rms(h, L["n2"])
        g, u = (x @ L["gu"].t()).chunk(2, dim=-1)
        h = h + _all_reduce((F.silu(g) * u) @ L["down"].t(), m.tp)
    last = h.view(seqs, length, HIDDEN)[:, -1]
    return (_rms(last, m.norm) @ m.head.t()).argmax(dim=-1)


_GQA = {"flash_gqa": True}


def _causal_attention(q, k, v):
    """Causal SDPA on the FlashAttention backend; GQA natively (enable_gqa) where this PyTorch's flash kernel
    takes it, else with K/V heads repeated (recorded in the output as ``attention``)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        if _GQA["flash_gqa"]:
            try:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            except RuntimeError:
                _GQA["flash_gqa"] = False
        group = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                              is_causal=True)


def _events_time(fn, repeats: int) -> list[float]:
    return [time_once(fn) for _ in range(repeats)]


def _rope_tables(positions, shape):
    inv = 1.0 / (500000.0 ** (torch.arange(0, HEAD_DIM // 2, device="cuda", dtype=torch.float32) / (HEAD_DIM // 2)))
    ang = positions.float()[:, None] * inv[None]
    return ang.cos().to(torch.bfloat16).view(shape), ang.sin().to(torch.bfloat16).view(shape)


def run_decode(m: Model, batch: int, context: int, repeats: int, graph: bool) -> dict:
    tokens = torch.randint(0, VOCAB, (batch,), device="cuda")
    cos, sin = _rope_tables(torch.full((batch,), context - 1, device="cuda"), (batch, 1, 1, HEAD_DIM // 2))
    with torch.inference_mode():
        step = lambda: decode_step(m, tokens, batch, context, cos, sin)  # noqa: E731
        warm_on_side_stream(step, 2)
        if graph:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                step()
            g.replay()
            torch.cuda.synchronize()
            samples = _events_time(g.replay, repeats)
            del g
        else:
            samples = _events_time(step, repeats)
    return {"time_s": statistics.median(samples), "time_min_s": min(samples), "time_max_s": max(samples)}


def run_prefill(m: Model, seqs: int, length: int, repeats: int) -> dict:
    tokens = torch.randint(0, VOCAB, (seqs * length,), device="cuda")
    cos, sin = _rope_tables(torch.arange(length, device="cuda"), (1, 1, length, HEAD_DIM // 2))
    with torch.inference_mode():
        prefill(m, tokens, seqs, length, cos, sin)
        torch.cuda.synchronize()
        samples = _events_time(lambda: prefill(m, tokens, seqs, length, cos, sin), repeats)
    return {"time_s": statistics.median(samples), "time_min_s": min(samples), "time_max_s": max(samples),
            "attention": "flash_gqa" if _GQA["flash_gqa"] else "flash_repeat_kv"}


def _graph_time(fn, calls: int = 20, repeats: int = 7) -> float:
    """Median seconds per call of ``fn`` captured ``calls`` times in one CUDA graph."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    return statistics.median(_events_time(g.replay, repeats)) / calls


def run_ops(m: Model, log) -> None:
    """Per-op times (CUDA graphs, one layer's weights): the GEMMs of a layer at M tokens, decode attention at
    (batch, context), causal prefill attention, and one small elementwise kernel (the per-kernel floor)."""
    L = m.layers[0]
    with torch.inference_mode():
        for tokens in (1, 8, 32, 64, 128, 256, 512, 2048, 8192, 16384):
            x = torch.randn(tokens, HIDDEN, device="cuda", dtype=torch.bfloat16)
            xa = torch.randn(tokens, m.heads * HEAD_DIM, device="cuda", dtype=torch.bfloat16)
            xf = torch.randn(tokens, m.ffn, device="cuda", dtype=torch.bfloat16)
            for name, a, w in (("qkv", x, L["qkv"]), ("o", xa, L["o"]), ("gate_up", x, L["gu"]),
                               ("down", xf, L["down"])):
                t = _graph_time(lambda a=a, w=w: a @ w.t())
                log({"kind": "op", "op": name, "m": tokens, "k": w.shape[1], "n": w.shape[0], "time_s": t})
            t = _graph_time(lambda x=x: x + x)
            log({"kind": "op", "op": "add", "m": tokens, "k": HIDDEN, "n": 0, "time_s": t})
        for batch, context in ((1, 4096), (1, 32768), (8, 32768), (16, 8192), (64, 8192), (256, 2048)):
            q = torch.randn(batch, m.kv_heads, m.heads // m.kv_heads, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
            kc, vc = m.kv(0, batch, context)
            t = _graph_time(lambda q=q, kc=kc, vc=vc: F.scaled_dot_product_attention(q, kc, vc))
            log({"kind": "op", "op": "decode_attention", "batch": batch, "context": context, "time_s": t})
        for tokens in (512, 2048, 8192, 16384):
            q = torch.randn(1, m.heads, tokens, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
            kc, vc = m.kv(0, 1, tokens)
            t = _graph_time(lambda q=q, kc=kc, vc=vc: _causal_attention(q, kc, vc), calls=5)
            log({"kind": "op", "op": "prefill_attention", "tokens": tokens, "time_s": t})


def _sweep(m: Model, args, t0: float, log) -> None:
    """The decode grid (CUDA graphs), the eager subset, then the prefill rows, while within ``--budget-s``."""
    for batch in BATCHES:
        for context in CONTEXTS:
            if batch * context > MAX_CACHE_TOKENS or time.perf_counter() - t0 > args.budget_s:
                continue
            r = run_decode(m, batch, context, args.repeats, graph=True)
            log({"kind": "decode", "batch": batch, "context": context, "cuda_graph": True, **r})
    for batch, context in EAGER:
        if time.perf_counter() - t0 < args.budget_s:
            r = run_decode(m, batch, context, args.repeats, graph=False)
            log({"kind": "decode", "batch": batch, "context": context, "cuda_graph": False, **r})
    if not args.skip_prefill:
        for seqs, length in [(1, t) for t in PREFILL_TOKENS] + list(PREFILL_BATCHED):
            if time.perf_counter() - t0 < args.budget_s:
                r = run_prefill(m, seqs, length, max(3, args.repeats // 2))
                log({"kind": "prefill", "seqs": seqs, "tokens": length, **r})


def run_flex(m: Model, log, budget_s: float) -> None:
    """Split-KV decode attention: torch.compile'd FlexAttention (its decoding kernel splits the context over CTAs,
    as flash-decoding does), GQA native, one layer's cache, CUDA-graph timed; the check of the serving model's
    ``flash_decoding`` rate (simulator/serving/backends.py)."""
    from torch.nn.attention.flex_attention import flex_attention

    flex = torch.compile(flex_attention, dynamic=False)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for batch, context in ((1, 4096), (1, 32768), (8, 32768), (16, 8192), (64, 8192), (256, 2048)):
            if time.perf_counter() - t0 > budget_s:
                break
            q = torch.randn(batch, m.heads, 1, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
            kc, vc = m.kv(0, batch, context)
            try:
                t = _graph_time(lambda q=q, kc=kc, vc=vc: flex(q, kc, vc, enable_gqa=True))
            except Exception as exc:  # noqa: BLE001 - record and go on
                log({"kind": "op", "op": "flex_decode_attention", "batch": batch, "context": context,
                     "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
                continue
            log({"kind": "op", "op": "flex_decode_attention", "batch": batch, "context": context, "time_s": t,
                 "compile_s": time.perf_counter() - t0})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warm-s", type=float, default=6.0)
    ap.add_argument("--skip-prefill", action="store_true")
    ap.add_argument("--ops", action="store_true", help="per-op times only (GEMMs, attention, one small kernel)")
    ap.add_argument("--flex", action="store_true", help="split-KV decode attention (FlexAttention) only")
    ap.add_argument("--budget-s", type=float, default=400.0, help="stop starting new measurements after this")
    args = ap.parse_args()
    tp = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if tp > 1:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        torch.distributed.init_process_group("nccl")
    t0 = time.perf_counter()
    props = torch.cuda.get_device_properties(0)
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": props.name,
           "sm_count": props.multi_processor_count, "tp": tp,
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "nccl": ".".join(map(str, torch.cuda.nccl.version())) if tp > 1 else None}
    warm_clocks(args.warm_s)
    m = Model(tp, MAX_CACHE_TOKENS)
    env["weight_bytes_per_gpu"] = m.weight_bytes

    def log(row):
        row = {**row, "tp": tp}
        print(json.dumps(row), flush=True)
        if rank == 0:
            with open(args.out, "a") as fh:
                fh.write(json.dumps(row) + "\n")

    log({"kind": "env", **env})
    if args.ops:
        run_ops(m, log)
        return
    if args.flex:
        run_flex(m, log, args.budget_s)
        return
    _sweep(m, args, t0, log)
    log({"kind": "done", "elapsed_s": time.perf_counter() - t0})
    if tp > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
