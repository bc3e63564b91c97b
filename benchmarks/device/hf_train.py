"""Training steps of Hugging Face Transformers and timm models on one H200, as a new user would write them: the
measurements behind simulator/validation/data/h200_hf/ (implementation profiles, issue 28).

Loop (no Trainer): ``loss = model(input_ids=x, labels=x).loss; loss.backward(); opt.step();
opt.zero_grad(set_to_none=True)`` with bf16 parameters, ``torch.optim.AdamW(fused=True)`` and sdpa attention
(timm ViT: fp32 parameters under bf16 autocast, cross-entropy on random labels). Models are built from the
published configs in hf_common.CONFIGS with random weights; input tokens are random.

Sections (each case a JSON line in ``--out``/train.jsonl, written as soon as it is measured):
1. dense: Qwen2.5-0.5B, Llama-3.2-1B, Qwen2.5-1.5B at micro-batch x sequence 4x1024 and 8x2048, gradient
   checkpointing off and on (``model.gradient_checkpointing_enable()``, the library's defaults), plus a
   host-bound probe at 1x128 (the GPU idles: the step's wall time is the host's issue time).
2. moe: OLMoE-1B-7B at 4x1024 with each experts implementation transformers offers (the default, ``eager``:
   a per-expert loop, ``grouped_mm``: torch's grouped GEMM), checkpointing off.
3. vit: timm vit_base_patch16_224 at batch 64 and 128.
Per case: median over ``--steps`` timed steps (after ``--warmups``) of the step's GPU time (CUDA events around
the step, each step synchronised at its end), of forward / backward / optimizer (+ zero_grad) times (events
between the phases), of the host's issue time (perf_counter from the step's start until its last call
returns, before the synchronisation) and of the wall time; the peak allocated memory over the timed steps and
per phase (a separate step, synchronised and reset between phases); the optimizer step alone over the same
parameters and gradients (median of ``--steps``); and one step under torch.profiler: device kernels, launch
calls and synchronising runtime calls, total and per phase (hf_common.profile_phases). Kineto traces of one step
(Qwen2.5-0.5B and Llama-3.2-1B, both shapes, checkpointing off) are written as .json.gz to ``--traces``.

    python3 benchmarks/device/hf_train.py --out OUTDIR --traces TRACEDIR          # on the GPU
    python3 benchmarks/device/hf_train.py --out /tmp/x --device cpu --tiny         # dry run, tiny configs
"""

from __future__ import annotations

import functools
import gc
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_common import (  # noqa: E402
    Clock,
    Log,
    allocated,
    autocast,
    build_causal_lm,
    device_parser,
    env_info,
    gzip_file,
    is_cuda,
    median,
    peak,
    profile_phases,
    reset_peak,
    run_case,
    sync,
    warm_clocks,
)

DENSE = ("qwen2.5-0.5b", "llama-3.2-1b", "qwen2.5-1.5b")
SHAPES = ((4, 1024), (8, 2048))
TRACED = ("qwen2.5-0.5b", "llama-3.2-1b")
PROBE_SHAPE = (1, 128)


class Loop:
    """The plain loop's four calls around ``forward_loss`` (returns the loss) and the optimizer ``opt``."""

    def __init__(self, forward_loss, opt):
        self.forward_loss, self.opt, self.loss = forward_loss, opt, None

    def fwd(self):
        self.loss = self.forward_loss()

    def bwd(self):
        loss, self.loss = self.loss, None
        loss.backward()

    def step(self):
        self.opt.step()

    def zero(self):
        self.opt.zero_grad(set_to_none=True)

    def full(self):
        self.fwd()
        self.bwd()
        self.step()
        self.zero()

    def phases(self):
        return [("forward", self.fwd), ("backward", self.bwd), ("optimizer", self.step), ("zero_grad", self.zero)]


def _timed_step(loop: Loop, device) -> dict:
    """One step: CUDA events between the phases (GPU time), host clock marks (issue time), then the wall time."""
    cuda = is_cuda(device)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)] if cuda else None
    marks = [time.perf_counter()]
    for i, calls in enumerate(((loop.fwd,), (loop.bwd,), (loop.step, loop.zero))):
        if cuda:
            ev[i].record()
        for call in calls:
            call()
        marks.append(time.perf_counter())
    if cuda:
        ev[3].record()
    sync(device)
    wall = time.perf_counter() - marks[0]
    if cuda:
        gpu = [ev[i].elapsed_time(ev[i + 1]) / 1e3 for i in range(3)]
    else:
        gpu = [marks[i + 1] - marks[i] for i in range(3)]
    return {"step": sum(gpu), "fwd": gpu[0], "bwd": gpu[1], "opt": gpu[2], "host": marks[-1] - marks[0],
            "wall": wall, "host_fwd": marks[1] - marks[0], "host_bwd": marks[2] - marks[1]}


def _phase_memory(loop: Loop, device) -> dict:
    """Peak allocated during, and allocated at the end of, each phase of one step (synchronised, reset between)."""
    phases = {}
    reset_peak(device)
    for name, fn in loop.phases():
        fn()
        sync(device)
        phases[name] = {"peak_allocated_bytes": peak(device), "allocated_end_bytes": allocated(device)}
        reset_peak(device)
    return phases


def _optimizer_alone(loop: Loop, device, steps: int) -> float:
    """Median seconds of the optimizer step alone over the same parameters and one set of gradients."""
    loop.fwd()
    loop.bwd()
    sync(device)
    samples = []
    for _ in range(steps):
        if is_cuda(device):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            loop.step()
            b.record()
            b.synchronize()
            samples.append(a.elapsed_time(b) / 1e3)
        else:
            t = time.perf_counter()
            loop.step()
            samples.append(time.perf_counter() - t)
    loop.zero()
    return median(samples)


def measure(device, forward_loss, opt, steps: int, warmups: int, memory: bool = True, opt_alone: bool = True,
            profile: bool = True, trace_path: str | None = None) -> dict:
    """Time the plain loop around ``forward_loss`` and ``opt``; see the module docstring."""
    loop = Loop(forward_loss, opt)
    res = {}
    sync(device)
    t0 = time.perf_counter()
    loop.full()  # the first step: lazy AdamW state, cuBLAS heuristics
    sync(device)
    res["first_step_s"] = time.perf_counter() - t0
    for _ in range(max(0, warmups - 1)):
        loop.full()
    sync(device)
    res["allocated_after_warmup_bytes"] = allocated(device)
    reset_peak(device)
    rows = [_timed_step(loop, device) for _ in range(steps)]
    for key in rows[0]:
        res[f"{key}_s_median"] = median(r[key] for r in rows)
    res["step_s_samples"] = [r["step"] for r in rows]
    res["peak_allocated_bytes"] = peak(device)
    if memory and is_cuda(device):
        res["phase_memory"] = _phase_memory(loop, device)
    if opt_alone:
        res["optimizer_alone_s_median"] = _optimizer_alone(loop, device, steps)
    if profile:
        res["profile"] = profile_phases(device, loop.phases(), trace_path)
        if trace_path:
            gz = gzip_file(trace_path)
            res["trace_file"] = os.path.basename(gz)
            res["trace_bytes_gz"] = os.path.getsize(gz)
    return res


def ckpt_kwargs(model):
    """The keyword arguments transformers bound to torch.utils.checkpoint (use_reentrant, ...), as applied."""
    for module in model.modules():
        fn = getattr(module, "_gradient_checkpointing_func", None)
        if fn is not None:
            return {k: repr(v) for k, v in getattr(fn, "keywords", {}).items()}
    return None


def lm_loss(model, x):
    return lambda: model(input_ids=x, labels=x).loss


def dense(args, log, clock, device):
    for name in args.models.split(","):
        if clock.left() < 40:
            log.row({"section": "dense", "model": name, "skipped": "deadline"})
            continue
        model = build_causal_lm(name, device, args.tiny)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=is_cuda(device))
        params = sum(p.numel() for p in model.parameters())
        vocab = model.config.vocab_size
        common = {"section": "dense", "model": name, "params": params, "device": device,
                  "allocated_after_model_bytes": allocated(device)}
        mb, seq = PROBE_SHAPE
        x = torch.randint(0, vocab, (mb, seq), device=device)
        run_case(log, dict(common, case="host_probe", micro_batch=mb, seq=seq, checkpointing=False), clock, 20,
                 functools.partial(measure, device, lm_loss(model, x), opt, args.steps, args.warmups,
                                   memory=False, opt_alone=False))
        for mb, seq in SHAPES:
            if args.tiny:
                mb, seq = mb // 2, seq // 16
            x = torch.randint(0, vocab, (mb, seq), device=device)
            for ckpt in (False, True):
                if ckpt:
                    model.gradient_checkpointing_enable()
                else:
                    model.gradient_checkpointing_disable()
                trace = None
                if name in TRACED and not ckpt:
                    trace = os.path.join(args.traces, f"{name}_mb{mb}_s{seq}.json")
                run_case(log, dict(common, case="train", micro_batch=mb, seq=seq, checkpointing=ckpt,
                                   checkpoint_kwargs=ckpt_kwargs(model) if ckpt else None),
                         clock, 25, functools.partial(measure, device, lm_loss(model, x), opt, args.steps,
                                                      args.warmups, trace_path=trace))
        model.gradient_checkpointing_disable()
        del model, opt, x
        gc.collect()
        if is_cuda(device):
            torch.cuda.empty_cache()


def moe(args, log, clock, device):
    name = "olmoe-1b-7b"
    if clock.left() < 60:
        log.row({"section": "moe", "model": name, "skipped": "deadline"})
        return
    model = build_causal_lm(name, device, args.tiny)
    model.train()
    default = getattr(model.config, "_experts_implementation", None)
    impls = [default] + [i for i in ("eager", "grouped_mm") if i != default]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=is_cuda(device))
    mb, seq = (4, 1024) if not args.tiny else (2, 64)
    x = torch.randint(0, model.config.vocab_size, (mb, seq), device=device)
    params = sum(p.numel() for p in model.parameters())
    for impl in impls:
        applied = impl
        try:
            if impl is not None:
                if hasattr(model, "set_experts_implementation"):
                    model.set_experts_implementation(impl)
                else:
                    model.config._experts_implementation = impl
            applied = getattr(model.config, "_experts_implementation", None)
        except Exception as exc:  # noqa: BLE001
            applied = f"error: {type(exc).__name__}: {str(exc)[:200]}"
        run_case(log, {"section": "moe", "model": name, "params": params, "device": device, "case": "train",
                       "micro_batch": mb, "seq": seq, "checkpointing": False, "experts_requested": impl,
                       "experts_applied": applied, "experts_default": default}, clock, 60,
                 functools.partial(measure, device, lm_loss(model, x), opt, 5, 2, opt_alone=False))
    del model, opt
    gc.collect()
    if is_cuda(device):
        torch.cuda.empty_cache()


def vit(args, log, clock, device):
    import timm

    model = timm.create_model("vit_base_patch16_224" if not args.tiny else "vit_tiny_patch16_224",
                              pretrained=False, num_classes=1000).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=is_cuda(device))
    params = sum(p.numel() for p in model.parameters())
    for batch in ((64, 128) if not args.tiny else (2,)):
        images = torch.randn(batch, 3, 224, 224, device=device)
        labels = torch.randint(0, 1000, (batch,), device=device)

        def loss(images=images, labels=labels):
            with autocast(device, True):
                return F.cross_entropy(model(images), labels)
        run_case(log, {"section": "vit", "model": "vit_base_patch16_224", "params": params, "device": device,
                       "case": "train", "batch": batch, "precision": "amp_bf16 (fp32 params, bf16 autocast)"},
                 clock, 20, functools.partial(measure, device, loss, opt, args.steps, args.warmups))


def main() -> None:
    parser = device_parser(steps=True)
    parser.add_argument("--traces", default=None)
    parser.add_argument("--sections", default="dense,moe,vit")
    parser.add_argument("--models", default=",".join(DENSE), help="dense models, in order")
    args = parser.parse_args()
    args.traces = args.traces or args.out
    os.makedirs(args.traces, exist_ok=True)
    clock = Clock(args.budget_s)
    log = Log(os.path.join(args.out, "train.jsonl"))
    device = args.device
    warm_clocks(device)
    log.row({"section": "env", **env_info(device)})
    for section in args.sections.split(","):
        try:
            {"dense": dense, "moe": moe, "vit": vit}[section](args, log, clock, device)
        except Exception as exc:  # noqa: BLE001 - keep the other sections
            log.row({"section": section, "error": f"{type(exc).__name__}: {str(exc)[:400]}"})
            gc.collect()
            if is_cuda(device):
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
