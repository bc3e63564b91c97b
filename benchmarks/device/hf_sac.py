"""Op-level selective activation checkpointing (torchtitan's per-op policy) on Hugging Face causal LMs, one H200:
the measurements behind the ``sac`` rows of simulator/validation/data/h200_hf/ (issue 28, item 3).

Same models (hf_common.CONFIGS, random weights, bf16, sdpa), same loop and timing (hf_train.measure: fused AdamW,
``zero_grad(set_to_none=True)``, median of ``--steps`` after ``--warmups``, peak allocated over the timed steps,
peak per phase) as hf_train.py; the one difference is the checkpointing: every decoder layer runs under
``torch.utils.checkpoint.checkpoint(..., use_reentrant=False, context_fn=...)`` through transformers'
``gradient_checkpointing_enable(gradient_checkpointing_kwargs=...)``, with a selective-checkpoint policy that
follows torchtitan's ``SelectiveAC`` (pytorch/torchtitan torchtitan/distributed/activation_checkpoint.py at
b5bcd76c, ``_get_default_save_ops`` and ``_wrap_block``): save the outputs of the partitioner's compute-intensive
ops (``get_default_op_list().compute_intensive_ops``), the SDPA variants, ``aten.max``, ``aten.linear``,
``aten.topk`` and the reduce-scatter / all-to-all collectives, except every second ``aten.mm`` / ``aten.linear``
of a layer's forward (its count restarts with each checkpointed call); always save CUDA-to-CPU copies; recompute
everything else. A fresh policy (fresh counter) per checkpointed call, as torchtitan's ``context_fn`` builds one.
``sac_forward_decisions``: the policy's decisions on saveable ops over one training step's forward, per op.

    python3 benchmarks/device/hf_sac.py --out OUTDIR                       # on the GPU
"""

from __future__ import annotations

import collections
import functools
import gc
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_common import (  # noqa: E402
    Clock,
    Log,
    allocated,
    build_causal_lm,
    device_parser,
    env_info,
    is_cuda,
    run_case,
    warm_clocks,
)
from hf_train import SHAPES, ckpt_kwargs, lm_loss, measure  # noqa: E402

MODELS = ("qwen2.5-0.5b", "llama-3.2-1b", "qwen2.5-1.5b")
#: one step's forward decisions are tallied here while set (a Counter), else None
TALLY: dict = {"on": None}


def save_ops() -> set:
    """torchtitan's default save set (``_get_default_save_ops``), the ops this torch build registers."""
    from torch._functorch.partitioners import get_default_op_list

    ops = {op.default for op in get_default_op_list().compute_intensive_ops}
    aten = torch.ops.aten
    for name in ("_scaled_dot_product_cudnn_attention", "_scaled_dot_product_attention_math",
                 "_scaled_dot_product_fused_attention_overrideable", "max", "linear", "topk"):
        try:
            ops.add(getattr(aten, name).default)
        except (AttributeError, RuntimeError):
            pass
    for name in ("reduce_scatter_tensor", "all_to_all_single"):
        try:
            ops.add(getattr(torch.ops._c10d_functional, name).default)
        except (AttributeError, RuntimeError):
            pass
    return ops


def make_policy(save: set, tally):
    from torch.utils.checkpoint import CheckpointPolicy

    aten = torch.ops.aten
    mm_ops = (aten.mm.default, aten.linear.default)
    meta = {"forward": 0, "recompute": 0}

    def policy(ctx, func, *args, **kwargs):
        if (func == aten._to_copy.default and "cuda" in str(args[0].device) and "device" in kwargs
                and str(kwargs["device"]) == "cpu"):
            return CheckpointPolicy.MUST_SAVE
        mode = "recompute" if ctx.is_recompute else "forward"
        if func in mm_ops:
            meta[mode] += 1
        if func in save:
            keep = not (func in mm_ops and meta[mode] % 2 == 0)
            decision = CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE
            if tally is not None and mode == "forward":
                tally[f"{func}:{'save' if keep else 'recompute'}"] += 1
            return decision
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def enable_op_sac(model, save: set) -> None:
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    def context_fn():
        return create_selective_checkpoint_contexts(make_policy(save, TALLY["on"]))

    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False,
                                                                       "context_fn": context_fn})


def tally_step(model, x, opt) -> dict:
    """The policy's forward decisions over one training step (the gradients are then dropped)."""
    TALLY["on"] = collections.Counter()
    try:
        model(input_ids=x, labels=x).loss.backward()
    finally:
        counts, TALLY["on"] = dict(TALLY["on"]), None
    opt.zero_grad(set_to_none=True)
    return counts


def sac_case(args, device, model, opt, x) -> dict:
    decisions = tally_step(model, x, opt)
    res = measure(device, lm_loss(model, x), opt, args.steps, args.warmups, opt_alone=False, profile=False)
    res["sac_forward_decisions"] = decisions
    return res


def run(args, log, clock, device):
    save = save_ops()
    log.row({"section": "sac_policy", "save_ops": sorted(str(op) for op in save)})
    for name in args.models.split(","):
        if clock.left() < 40:
            log.row({"section": "sac", "model": name, "skipped": "deadline"})
            continue
        model = build_causal_lm(name, device, args.tiny)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=is_cuda(device))
        params = sum(p.numel() for p in model.parameters())
        common = {"section": "sac", "model": name, "params": params, "device": device,
                  "allocated_after_model_bytes": allocated(device)}
        enable_op_sac(model, save)
        for mb, seq in SHAPES:
            if args.tiny:
                mb, seq = mb // 2, seq // 16
            x = torch.randint(0, model.config.vocab_size, (mb, seq), device=device)
            row = dict(common, case="train", micro_batch=mb, seq=seq, checkpointing="op_sac",
                       checkpoint_kwargs=ckpt_kwargs(model))
            run_case(log, row, clock, 25, functools.partial(sac_case, args, device, model, opt, x))
        model.gradient_checkpointing_disable()
        del model, opt
        gc.collect()
        if is_cuda(device):
            torch.cuda.empty_cache()


def main() -> None:
    parser = device_parser(steps=True)
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    clock = Clock(args.budget_s)
    log = Log(os.path.join(args.out, "sac.jsonl"))
    warm_clocks(args.device)
    log.row({"section": "env", **env_info(args.device)})
    try:
        run(args, log, clock, args.device)
    except Exception as exc:  # noqa: BLE001 - recorded
        log.row({"section": "sac", "error": f"{type(exc).__name__}: {str(exc)[:400]}"})


if __name__ == "__main__":
    main()
