"""Greedy decoding with Hugging Face Transformers' ``model.generate`` on one H200: the decode measurements behind
simulator/validation/data/h200_hf/decode.jsonl (implementation profiles, issue 28).

Models: Qwen2.5-0.5B and Llama-3.2-1B built from hf_common.CONFIGS (random bf16 weights, sdpa attention).
Cases: batch 1 and 8, prompt 512 and 2048 random tokens, 64 new tokens (``min_new_tokens`` = ``max_new_tokens``
and no end-of-sequence token, so every run decodes all 64), ``do_sample=False``.
* eager: the default DynamicCache (a concatenating K/V cache), every kernel launched from Python;
* compiled: ``cache_implementation="static"``, which makes generate compile the decoding forward with
  torch.compile (its default compile config, recorded); only batch 1 and 8 at prompt 512, and only while the
  deadline allows (the first call, which compiles, is timed and recorded as ``first_call_s``).
A logits processor stamps the host clock at every new token; generate synchronises once per token (its stopping
check reads a device flag), so the median interval between stamps is the time per token in steady decoding, and
the first stamp minus the call's start is the prefill. Each case: one warm-up call, then ``--repeats`` timed
calls; medians over every interval of every timed call. Kernels per token: one call of 9 new tokens and one of 1
under torch.profiler; (kernels(9) - kernels(1)) / 8, likewise launch calls and runtime calls by name.

    python3 benchmarks/device/hf_decode.py --out OUTDIR
    python3 benchmarks/device/hf_decode.py --out /tmp/x --device cpu --tiny
"""

from __future__ import annotations

import functools
import gc
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_common import (  # noqa: E402
    Clock,
    Log,
    build_causal_lm,
    device_parser,
    env_info,
    is_cuda,
    median,
    profile_phases,
    run_case,
    sync,
    warm_clocks,
)

MODELS = ("qwen2.5-0.5b", "llama-3.2-1b")
BATCHES = (1, 8)
PROMPTS = (512, 2048)
NEW_TOKENS = 64
COMPILED = (("qwen2.5-0.5b", 1, 512), ("qwen2.5-0.5b", 8, 512), ("llama-3.2-1b", 1, 512),
            ("llama-3.2-1b", 8, 512))


class Stamp:
    """A logits processor that records the host clock each time generate has the logits of a new token."""

    def __init__(self):
        self.times = []

    def __call__(self, input_ids, scores):
        self.times.append(time.perf_counter())
        return scores


def generate(model, ids, new_tokens: int, static: bool, stamp: Stamp | None = None):
    from transformers import LogitsProcessorList

    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                  eos_token_id=None)
    if static:
        kwargs["cache_implementation"] = "static"
    if stamp is not None:
        kwargs["logits_processor"] = LogitsProcessorList([stamp])
    return model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)


def timed_call(model, ids, new_tokens, static, device) -> dict:
    stamp = Stamp()
    sync(device)
    t0 = time.perf_counter()
    out = generate(model, ids, new_tokens, static, stamp)
    sync(device)
    total = time.perf_counter() - t0
    produced = out.shape[1] - ids.shape[1]
    gaps = [b - a for a, b in zip(stamp.times, stamp.times[1:], strict=False)]
    return {"total_s": total, "produced": produced, "prefill_s": stamp.times[0] - t0 if stamp.times else None,
            "gaps": gaps}


def measure(model, name, batch, prompt, static, args, device) -> dict:
    vocab = model.config.vocab_size
    ids = torch.randint(1, vocab, (batch, prompt), device=device)
    new_tokens = NEW_TOKENS if not args.tiny else 8
    first = timed_call(model, ids, new_tokens, static, device)
    calls = [timed_call(model, ids, new_tokens, static, device) for _ in range(args.repeats)]
    gaps = [g for c in calls for g in c["gaps"]]
    res = {"first_call_s": first["total_s"], "produced_tokens": calls[0]["produced"],
           "per_token_s_median": median(gaps), "per_token_s_min": min(gaps) if gaps else None,
           "per_token_s_max": max(gaps) if gaps else None, "prefill_s_median": median(c["prefill_s"] for c in calls),
           "generate_s_median": median(c["total_s"] for c in calls), "timed_calls": len(calls),
           "intervals": len(gaps)}
    if static:
        cc = getattr(model.generation_config, "compile_config", None)
        res["compile_config"] = repr(cc)[:300] if cc is not None else None
        res["compiled_call"] = hasattr(model, "_compiled_call")
        try:
            from torch._dynamo.utils import counters
            res["dynamo_unique_graphs"] = counters["stats"]["unique_graphs"]
        except Exception as exc:  # noqa: BLE001
            res["dynamo_unique_graphs"] = f"error: {exc}"
    if args.profile:
        n = 9 if not args.tiny else 3
        long_ = profile_phases(device, [("generate", lambda: generate(model, ids, n, static))])
        short = profile_phases(device, [("generate", lambda: generate(model, ids, 1, static))])
        per = n - 1
        res["per_token_kernels"] = (long_["kernels"] - short["kernels"]) / per
        res["per_token_launch_calls"] = (long_["launch_calls"] - short["launch_calls"]) / per
        res["per_token_launch_host_s"] = (long_["launch_host_s"] - short["launch_host_s"]) / per
        res["per_token_runtime_calls"] = {k: (long_["runtime_calls"].get(k, 0) - short["runtime_calls"].get(k, 0))
                                          / per for k in set(long_["runtime_calls"]) | set(short["runtime_calls"])}
        res["per_token_memcpy"] = (long_["memcpy"] - short["memcpy"]) / per
        res["prefill_call_kernels"] = short["kernels"]
    return res


def main() -> None:
    parser = device_parser(steps=False)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--no-profile", dest="profile", action="store_false")
    parser.add_argument("--modes", default="eager,compiled")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--compiled-prompt", type=int, default=512, help="prompt length of the compiled cases")
    args = parser.parse_args()
    clock = Clock(args.budget_s)
    log = Log(os.path.join(args.out, "decode.jsonl"))
    device = args.device
    warm_clocks(device)
    log.row({"section": "env", **env_info(device)})
    modes = args.modes.split(",")
    for name in args.models.split(","):
        model = build_causal_lm(name, device, args.tiny)
        model.eval()
        model.generation_config.eos_token_id = None
        with torch.inference_mode():
            if "eager" in modes:
                for batch in BATCHES:
                    for prompt in PROMPTS:
                        prompt_ = prompt if not args.tiny else prompt // 16
                        base = {"section": "decode", "mode": "eager", "cache": "DynamicCache", "model": name,
                                "batch": batch, "prompt": prompt_, "new_tokens": NEW_TOKENS, "device": device}
                        run_case(log, base, clock, 25, functools.partial(
                            measure, model, name, batch, prompt_, False, args, device))
        if "compiled" in modes:
            for cname, batch, _ in COMPILED:
                if cname != name:
                    continue
                prompt_ = args.compiled_prompt if not args.tiny else args.compiled_prompt // 16
                base = {"section": "decode", "mode": "compiled", "cache": "StaticCache", "model": name,
                        "batch": batch, "prompt": prompt_, "new_tokens": NEW_TOKENS, "device": device}
                with torch.inference_mode():
                    run_case(log, base, clock, 100, functools.partial(
                        measure, model, name, batch, prompt_, True, args, device))
        del model
        gc.collect()
        if is_cuda(device):
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
