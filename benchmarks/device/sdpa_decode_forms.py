"""Decode attention (one query token per sequence) through PyTorch SDPA in three call forms, bf16, CUDA graphs.

- ``gqa_single_call``: ``F.scaled_dot_product_attention(q, k, v, enable_gqa=True)`` with q of all query heads
  (b, Hq, 1, d) and the cache's K/V heads (b, Hkv, ctx, d) in one call (HF Transformers' sdpa path when it may pass
  enable_gqa);
- ``hf_repeat_kv``: K/V expanded to every query head on each call as HF's ``repeat_kv`` does it (``expand`` of a
  new head axis, then ``reshape``: one strided copy kernel each for K and V), then SDPA over Hq heads: the copies
  are part of the time;
- ``repeat_interleave``: the same expansion by ``torch.repeat_interleave`` (an index-gather kernel, much slower);
- ``expanded_cache``: K/V already stored with Hq heads (a static cache expanded to the query heads), SDPA over Hq
  heads without the copy.

Each shape is timed under a CUDA graph (``_bench.bench``) after the clocks are warmed; one JSON row per (form, shape)
with the bytes of K/V the form reads and the achieved bandwidth.

    python3 benchmarks/device/sdpa_decode_forms.py --out sdpa_decode.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import bench, env_info, warm_clocks  # noqa: E402

HEADS = [(28, 4, 128), (40, 8, 128)]   # (query heads, K/V heads, head dim): Qwen2.5-7B and Qwen2.5-32B attention
BATCHES = [1, 8, 32, 128]
CONTEXTS = [1024, 4096, 16384, 32768]
MAX_TOKENS = 1 << 20                   # batch x context cap: the expanded forms hold Hq/Hkv x the cache


def hf_repeat_kv(x, group):
    """(b, Hkv, s, d) -> (b, Hkv * group, s, d) by expand + reshape, as HF Transformers' repeat_kv."""
    b, hkv, s, d = x.shape
    return x[:, :, None, :, :].expand(b, hkv, group, s, d).reshape(b, hkv * group, s, d)


def forms(q, k, v, group):
    k_exp = k.repeat_interleave(group, dim=1)
    v_exp = v.repeat_interleave(group, dim=1)
    return {
        "gqa_single_call": lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
        "hf_repeat_kv": lambda: F.scaled_dot_product_attention(q, hf_repeat_kv(k, group), hf_repeat_kv(v, group)),
        "repeat_interleave": lambda: F.scaled_dot_product_attention(q, k.repeat_interleave(group, dim=1),
                                                                    v.repeat_interleave(group, dim=1)),
        "expanded_cache": lambda: F.scaled_dot_product_attention(q, k_exp, v_exp),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="sdpa_decode.jsonl")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="one small shape (a CPU dry run of the script)")
    parser.add_argument("--forms", default="gqa_single_call,hf_repeat_kv,repeat_interleave,expanded_cache",
                        help="comma-separated call forms to time")
    args = parser.parse_args()
    device = torch.device(args.device)
    shapes = [(hq, hkv, d, bsz, ctx) for hq, hkv, d in HEADS for bsz in BATCHES for ctx in CONTEXTS
              if bsz * ctx <= MAX_TOKENS]
    if args.tiny:
        shapes = [(4, 2, 16, 1, 64)]
    meta = env_info() if device.type == "cuda" else {"gpu": "cpu", "torch": torch.__version__}
    if device.type == "cuda":
        warm_clocks(5.0)
    with open(args.out, "w") as fh:
        for hq, hkv, d, bsz, ctx in shapes:
            q = torch.randn(bsz, hq, 1, d, dtype=torch.bfloat16, device=device)
            k = torch.randn(bsz, hkv, ctx, d, dtype=torch.bfloat16, device=device)
            v = torch.randn_like(k)
            kv_bytes = 2 * k.numel() * k.element_size()
            for form, fn in forms(q, k, v, hq // hkv).items():
                if form not in args.forms.split(","):
                    continue
                if device.type == "cuda":
                    timing = bench(fn, target_s=0.02)
                else:
                    fn()
                    timing = {"time_s": None}
                read = kv_bytes * (hq // hkv if form == "expanded_cache" else 1)
                row = {"call_form": form, "batch": bsz, "context": ctx, "q_heads": hq, "kv_heads": hkv,
                       "head_dim": d, "dtype": "bf16", "median_s": timing["time_s"], "kv_bytes_read": read,
                       "achieved_GBps": read / timing["time_s"] / 1e9 if timing["time_s"] else None,
                       "timing": timing.get("timing"), "gpu": meta["gpu"], "torch": meta["torch"]}
                fh.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)
            del q, k, v
            if device.type == "cuda":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
