# ruff: noqa: E731, B023, E402, N812
"""Prefill ops of plain PyTorch at h 5120, 40/8 heads of 128, FFN 13824, one GPU; see the README of
simulator/validation/data/h200_prefill_ops. python3 benchmarks/device/prefill_ops.py > prefill_ops.jsonl"""
import json

import torch
import torch.nn.functional as F
from _bench import bench, env_info, gpu_clocks, time_once, warm_clocks
from torch.nn.attention import SDPBackend, sdpa_kernel

H, NH, KV, D, FF = 5120, 40, 8, 128, 13824
r = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16)
log = lambda **row: print(json.dumps(row), flush=True)
norm = lambda x, w: F.rms_norm(x, (H,), w["n"], 1e-5)


def att(q, k, v):
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def rope(x, c, s):
    a, b = x[..., :D // 2], x[..., D // 2:]
    return torch.cat((a * c - b * s, b * c + a * s), dim=-1)


def heads(x, n, t):  # q, k, v views of the fused projection (serve_decode.py's prefill)
    return [y.view(n, t, -1, D).transpose(1, 2) for y in x.split((H, KV * D, KV * D), -1)]


def layer(h, w, kc, vc, c, s, n, t):  # serve_decode.py's prefill layer at this shape
    q, k, v = heads(norm(h, w) @ w["qkv"].t(), n, t)
    kc.copy_(rope(k, c, s))
    vc.copy_(v)
    h = h + att(rope(q, c, s), kc, vc).transpose(1, 2).reshape(n * t, H) @ w["o"].t()
    g, u = (norm(h, w) @ w["gu"].t()).chunk(2, -1)
    return h + (F.silu(g) * u) @ w["dn"].t()


def main():
    log(kind="env", **env_info())
    warm_clocks(6.0)
    log(kind="clocks", **gpu_clocks())
    w = dict(n=r(H), qkv=r(H + 2 * KV * D, H) * .02, o=r(H, H) * .02, gu=r(2 * FF, H) * .02, dn=r(H, FF) * .02)
    with torch.inference_mode():
        for t in (2048, 4096, 8192, 16384):
            q, z = r(1, NH, t, D), torch.zeros(1, KV, t, D, device="cuda", dtype=torch.bfloat16)
            for data, k, v in (("zeros", z, z), ("randn", r(1, KV, t, D), r(1, KV, t, D))):
                log(kind="op", op="prefill_attention", tokens=t, kv_data=data, **bench(lambda: att(q, k, v)))
        for m in (2048, 8192, 16384):
            x, y, xf, gu = r(m, H), r(m, H), r(m, FF), r(m, 2 * FF)
            q, k, v = heads(r(m, H + 2 * KV * D), 1, m)
            c, s, kc, vc = r(1, 1, m, D // 2), r(1, 1, m, D // 2), r(1, KV, m, D), r(1, KV, m, D)
            kr, (g, u), ao = rope(k, c, s), gu.chunk(2, -1), att(rope(q, c, s), kc, vc)
            log(kind="layout", m=m, rope_q=rope(q, c, s).stride(), attn_out=ao.stride())
            ops = dict(rms_norm=lambda: norm(x, w), add=lambda: x + y, rope_q=lambda: rope(q, c, s),
                       rope_k=lambda: rope(k, c, s), cache_k=lambda: kc.copy_(kr), cache_v=lambda: vc.copy_(v),
                       attn_out=lambda: ao.transpose(1, 2).reshape(m, H), silu_mul=lambda: F.silu(g) * u,
                       qkv=lambda: x @ w["qkv"].t(), o=lambda: x @ w["o"].t(), gate_up=lambda: x @ w["gu"].t(),
                       down=lambda: xf @ w["dn"].t())
            for name, fn in ops.items():
                log(kind="op", op=name, m=m, **bench(fn))
        for n, t in ((1, 16384), (8, 2048), (1, 4096)):
            h, c, s, kc, vc = r(n * t, H), r(1, 1, t, D // 2), r(1, 1, t, D // 2), r(n, KV, t, D), r(n, KV, t, D)
            fn = lambda: layer(h, w, kc, vc, c, s, n, t)
            fn()
            ts = sorted(time_once(fn) for _ in range(9))
            log(kind="layer_eager", seqs=n, tokens=t, time_s=ts[4], time_min_s=ts[0], time_max_s=ts[-1])
            log(kind="layer_graph", seqs=n, tokens=t, **bench(fn))
    log(kind="clocks", **gpu_clocks())


if __name__ == "__main__":
    main()
