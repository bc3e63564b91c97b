"""Training steps through Hugging Face ``Trainer`` with its defaults on one H200 (the "Trainer defaults"
implementation profile of issue 28), beside hf_train.py's plain loop on the same models and shapes.

Defaults kept: ``TrainingArguments(bf16=True)`` (autocast over the parameters' dtype: the model as
``from_config`` builds it), the default optimizer (``args.optim``, recorded), ``max_grad_norm=1.0`` (gradient
clipping every step), the default data collator and DataLoader (pin_memory, no workers), logging every 500
steps (so no per-step ``loss.item()``). Changed only what a run on a machine without network needs:
``report_to="none"``, ``save_strategy="no"``. Data: a list of random-token examples (``input_ids`` = ``labels``).

Per case: ``trainer.train()`` over ``--warmups`` + ``--steps`` steps; a callback synchronises the device at each
step's end and stamps the host clock (step time = interval between consecutive stamps; the synchronisation is
the only change to the loop) and resets the peak memory after the warm-up steps; the median over the timed
steps. Kernels per step: (kernels of a 4-step train() - kernels of a 2-step train()) / 2 under torch.profiler.

    python3 benchmarks/device/hf_trainer.py --out OUTDIR
    python3 benchmarks/device/hf_trainer.py --out /tmp/x --device cpu --tiny
"""

from __future__ import annotations

import functools
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_common import device_parser, Clock, Log, build_causal_lm, env_info, is_cuda, median, peak, profile_phases, reset_peak, sync  # noqa: E402,I001

CASES = (("qwen2.5-0.5b", 4, 1024), ("qwen2.5-0.5b", 8, 2048), ("llama-3.2-1b", 4, 1024),
         ("llama-3.2-1b", 8, 2048))


def make_trainer(model, mb: int, seq: int, steps: int, device, stamps: list, warmups: int):
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class Stamp(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            sync(device)
            stamps.append(time.perf_counter())
            if state.global_step == warmups:
                reset_peak(device)

    vocab = model.config.vocab_size
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, vocab, (mb * steps, seq))]
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=mb, max_steps=steps,
                             bf16=is_cuda(device), report_to="none", save_strategy="no",
                             use_cpu=not is_cuda(device))
    return Trainer(model=model, args=args, train_dataset=data, callbacks=[Stamp()])


def measure(model, mb: int, seq: int, args, device) -> dict:
    stamps = []
    n = args.warmups + args.steps
    trainer = make_trainer(model, mb, seq, n, device, stamps, args.warmups)
    sync(device)
    t0 = time.perf_counter()
    trainer.train()
    total = time.perf_counter() - t0
    gaps = [b - a for a, b in zip(stamps[args.warmups - 1:], stamps[args.warmups:], strict=False)]
    res = {"step_s_median": median(gaps), "step_s_samples": gaps, "train_call_s": total,
           "peak_allocated_bytes": peak(device), "optim": str(trainer.args.optim),
           "max_grad_norm": trainer.args.max_grad_norm, "param_dtype": str(next(model.parameters()).dtype),
           "optimizer_class": type(trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer")
                                   else trainer.optimizer).__name__,
           "optimizer_defaults": {k: repr(v) for k, v in trainer.optimizer.defaults.items()}}
    counts = {}
    for k in (2, 4):
        tr = make_trainer(model, mb, seq, k, device, [], 0)
        counts[k] = profile_phases(device, [("train", tr.train)])
    res["per_step_kernels"] = (counts[4]["kernels"] - counts[2]["kernels"]) / 2
    res["per_step_launch_calls"] = (counts[4]["launch_calls"] - counts[2]["launch_calls"]) / 2
    res["per_step_runtime_calls"] = {k: (counts[4]["runtime_calls"].get(k, 0) - counts[2]["runtime_calls"].get(k, 0))
                                     / 2 for k in set(counts[4]["runtime_calls"]) | set(counts[2]["runtime_calls"])}
    res["per_step_dtoh_copies"] = (counts[4]["dtoh_copies"] - counts[2]["dtoh_copies"]) / 2
    return res


def main() -> None:
    parser = device_parser(steps=True)
    args = parser.parse_args()
    clock = Clock(args.budget_s)
    log = Log(os.path.join(args.out, "trainer.jsonl"))
    device = args.device
    log.row({"section": "env", **env_info(device)})
    model, current = None, None
    for name, mb, seq in CASES:
        if args.tiny:
            mb, seq = mb // 2, seq // 16
        row = {"section": "trainer", "model": name, "micro_batch": mb, "seq": seq, "device": device}
        if clock.left() < 30:
            log.row(dict(row, skipped=f"{clock.left():.0f} s left"))
            continue
        if name != current:
            model, current = None, None
            gc.collect()
            model = build_causal_lm(name, device, args.tiny, dtype=None)
            current = name
        t = time.perf_counter()
        try:
            row.update(functools.partial(measure, model, mb, seq, args, device)())
        except Exception as exc:  # noqa: BLE001 - one failed case must not lose the others
            row["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
        row["case_wall_s"] = time.perf_counter() - t
        log.row(row)
        if is_cuda(device):
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
