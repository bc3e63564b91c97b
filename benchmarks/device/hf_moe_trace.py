"""Kineto traces of ONE training step of OLMoE-1B-7B reduced to 4 layers (every other dimension as published:
hidden 2048, 64 experts of SwiGLU 1024, top-8, 16 heads, vocab 50304), 4x1024 random tokens, bf16 parameters,
fused AdamW, sdpa attention, with each experts implementation of transformers (``grouped_mm``, ``eager``: the
per-expert loop): the per-class attribution of the MoE layer (issue 28, h22). Same loop and measurements as
hf_train.py (``measure``: CUDA-event step / phase times over 5 steps after 2 warm-ups, then one profiled step whose
Kineto trace is written gzipped), one JSON line per case in ``--out``/moe_trace.jsonl.

    python3 benchmarks/device/hf_moe_trace.py --out OUTDIR          # on the GPU
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_common import CONFIGS, Clock, Log, env_info, warm_clocks  # noqa: E402
from hf_train import lm_loss, measure, run_case  # noqa: E402

LAYERS = 4
IMPLS = ("grouped_mm", "eager")


def build_olmoe(layers: int, device):
    """hf_common.CONFIGS' OLMoE-1B-7B with ``layers`` decoder layers, random weights, bf16, sdpa, on ``device``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    dims = dict(CONFIGS["olmoe-1b-7b"], num_hidden_layers=layers)
    config = AutoConfig.for_model(dims.pop("model_type"), **dims)
    torch.manual_seed(0)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")


def set_experts(model, impl: str):
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation(impl)
    else:
        model.config._experts_implementation = impl
    return getattr(model.config, "_experts_implementation", None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--layers", type=int, default=LAYERS)
    parser.add_argument("--budget-s", type=float, default=240)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    device = "cuda"
    clock = Clock(args.budget_s)
    log = Log(os.path.join(args.out, "moe_trace.jsonl"))
    warm_clocks(device)
    log.row({"section": "env", **env_info(device)})
    model = build_olmoe(args.layers, device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    x = torch.randint(0, model.config.vocab_size, (4, 1024), device=device)
    params = sum(p.numel() for p in model.parameters())
    for impl in IMPLS:
        applied = set_experts(model, impl)
        trace = os.path.join(args.out, f"olmoe_l{args.layers}_{impl}_mb4_s1024.json")
        run_case(log, {"section": "moe_trace", "model": "olmoe-1b-7b", "layers": args.layers, "params": params,
                       "device": device, "case": "train", "micro_batch": 4, "seq": 1024,
                       "experts_requested": impl,
                       "experts_applied": applied}, clock, 40,
                 functools.partial(measure, device, lm_loss(model, x), opt, 5, 2, memory=False, opt_alone=False,
                                   trace_path=trace))
    del model, opt
    gc.collect()
    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
