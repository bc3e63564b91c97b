"""GPU memory of a plain-PyTorch GPT training loop on one GPU: CUDA context, allocator reserved vs allocated, and
the peak with gradient accumulation.

The model is train_step_gpt.py's GPT (plain nn.Linear / LayerNorm / GeLU / SDPA causal blocks, learned positions,
untied head), AMP (fp32 parameters, bf16 autocast), fused AdamW, loss on fp32 logits. Defaults: 16 layers, hidden
4096, 32 heads, ffn 16384, vocab 32000, seq 4096, micro-batch 1 (about 3.5B parameters).

Each configuration runs in a fresh process (``--config`` given) so that the context and the allocator start clean;
without ``--config`` the script is the driver: it runs every configuration of the sweep in turn as a subprocess
and appends one JSON line per configuration to --out. A configuration is (micro-batches per step for gradient
accumulation, zero_grad(set_to_none=...), vocab, PYTORCH_CUDA_ALLOC_CONF).

Per configuration it records:
* ``context_bytes``: device memory in use (cudaMemGetInfo: total - free) right after CUDA init, minus what
  nvidia-smi showed in use before the process started; ``after_first_gemm_bytes`` the same after one bf16 matmul
  (cuBLAS handle and workspace);
* per phase of one steady-state step (forward / backward of each micro-batch, optimizer step, zero_grad): the
  allocated bytes at the end of the phase and the peak allocated during it;
* ``peak_allocated_bytes`` / ``peak_reserved_bytes``: torch.cuda.max_memory_* over all steps (first step with
  the lazy AdamW state creation included), and ``steady_*`` the same over the steps after the first;
* ``used_bytes_end`` (cudaMemGetInfo total - free at the end) and ``non_torch_bytes`` = used - reserved: the CUDA
  context, cuBLAS/cuDNN handles and other memory outside PyTorch's caching allocator;
* the median step time.

    python3 benchmarks/device/train_memory.py --out memory.jsonl            # the whole sweep
    python3 benchmarks/device/train_memory.py --config 2,1,32000,           # one: accum 2, set_to_none, vocab
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: (micro-batches per step, set_to_none, vocab, PYTORCH_CUDA_ALLOC_CONF)
SWEEP = ((1, 1, 32000, ""), (2, 1, 32000, ""), (1, 0, 32000, ""), (2, 0, 32000, ""),
         (2, 1, 32000, "expandable_segments:True"), (1, 1, 50304, ""), (2, 1, 50304, ""))


def smi_used_mib() -> int | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
        return int(out.strip().splitlines()[0])
    except Exception:  # noqa: BLE001
        return None


def run_one(args, accum: int, set_to_none: bool, vocab: int) -> dict:
    import torch
    import torch.nn.functional as F  # noqa: N812

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from train_step_gpt import GPT

    smi_before = smi_used_mib()
    torch.cuda.init()
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    free, total = torch.cuda.mem_get_info()
    res = {"smi_used_before_mib": smi_before, "total_bytes": total, "used_after_init_bytes": total - free,
           "context_bytes": total - free - (smi_before or 0) * 2**20,
           "reserved_after_init_bytes": torch.cuda.memory_reserved()}
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    free, total = torch.cuda.mem_get_info()
    res.update(after_first_gemm_used_bytes=total - free, after_first_gemm_reserved_bytes=torch.cuda.memory_reserved())
    del a
    torch.cuda.empty_cache()

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = GPT(args.layers, args.hidden, args.heads, args.ffn, vocab, args.seq)
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    batches = [torch.randint(0, vocab, (args.micro_batch, args.seq), device="cuda") for _ in range(accum)]
    res.update(params=params, after_model_allocated_bytes=torch.cuda.memory_allocated())

    phases: list[tuple[str, int, int]] = []

    def mark(name: str, record: bool) -> None:
        if record:
            torch.cuda.synchronize()
            phases.append((name, torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()))
            torch.cuda.reset_peak_memory_stats()

    def step(record: bool = False) -> None:
        if record:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        for i, tokens in enumerate(batches):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(tokens)
            loss = F.cross_entropy(logits.float().view(-1, vocab), tokens.view(-1)) / accum
            del logits
            mark(f"fwd{i}", record)
            loss.backward()
            del loss
            mark(f"bwd{i}", record)
        optimizer.step()
        mark("optimizer", record)
        optimizer.zero_grad(set_to_none=set_to_none)
        mark("zero_grad", record)

    times = []
    steady_alloc = steady_reserved = 0
    for i in range(args.steps):
        if i == 1:
            torch.cuda.synchronize()
            first = (torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved())
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    steady_alloc, steady_reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    free, total = torch.cuda.mem_get_info()
    stats = torch.cuda.memory_stats()
    res.update(first_step_peak_allocated_bytes=first[0], first_step_peak_reserved_bytes=first[1],
               steady_peak_allocated_bytes=steady_alloc, steady_peak_reserved_bytes=steady_reserved,
               peak_allocated_bytes=max(first[0], steady_alloc), peak_reserved_bytes=max(first[1], steady_reserved),
               allocated_end_bytes=torch.cuda.memory_allocated(), reserved_end_bytes=torch.cuda.memory_reserved(),
               used_bytes_end=total - free, non_torch_bytes=total - free - torch.cuda.memory_reserved(),
               smi_used_end_mib=smi_used_mib(), num_alloc_retries=stats.get("num_alloc_retries"),
               inactive_split_bytes_end=stats.get("inactive_split_bytes.all.current"),
               step_s_median=statistics.median(times[1:]), step_s_all=times)
    step(record=True)  # one more steady-state step, with per-phase memory marks
    res["phases"] = [{"phase": n, "allocated_end_bytes": a, "peak_allocated_bytes": p} for n, a, p in phases]
    res.update(torch=torch.__version__, cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0))
    return res


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in (("layers", 16), ("hidden", 4096), ("heads", 32), ("ffn", 16384), ("seq", 4096),
                          ("micro-batch", 1), ("steps", 10)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--config", help="accum,set_to_none(0/1),vocab[,alloc_conf]: run one configuration")
    parser.add_argument("--out", default="memory.jsonl")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="per configuration (driver)")
    args = parser.parse_args()
    if args.config:
        accum, none, vocab, *rest = args.config.split(",")
        res = {"config": {"layers": args.layers, "hidden": args.hidden, "heads": args.heads, "ffn": args.ffn,
                          "seq": args.seq, "micro_batch": args.micro_batch, "vocab": int(vocab),
                          "accum": int(accum), "set_to_none": bool(int(none)),
                          "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "steps": args.steps}}
        try:
            res.update(run_one(args, int(accum), bool(int(none)), int(vocab)))
        except Exception as exc:  # noqa: BLE001
            res["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
        print("RESULT " + json.dumps(res), flush=True)
        return
    for accum, none, vocab, conf in SWEEP:
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        cmd = [sys.executable, __file__, "--config", f"{accum},{none},{vocab}"]
        for name in ("layers", "hidden", "heads", "ffn", "seq", "micro_batch", "steps"):
            cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout_s)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            res = json.loads(lines[-1][7:]) if lines else {"error": "no result", "stderr": proc.stderr[-1500:]}
        except subprocess.TimeoutExpired:
            res = {"error": "timeout"}
        res.setdefault("config", {"accum": accum, "set_to_none": bool(none), "vocab": vocab, "alloc_conf": conf})
        res["wall_s"] = time.perf_counter() - start
        with open(args.out, "a") as fh:
            fh.write(json.dumps(res) + "\n")
        gib = 2**30
        print(f"accum={accum} none={none} vocab={vocab} conf={conf or '-'}: "
              + (f"params={res.get('params', 0) / 1e9:.2f}B peak_alloc={res.get('peak_allocated_bytes', 0) / gib:.2f}"
                 f" GiB peak_reserved={res.get('peak_reserved_bytes', 0) / gib:.2f} GiB non_torch="
                 f"{res.get('non_torch_bytes', 0) / gib:.2f} GiB context={res.get('context_bytes', 0) / gib:.2f} GiB"
                 f" step={res.get('step_s_median', 0):.3f}s" if "error" not in res else f"ERROR {res['error']}")
              + f" ({res['wall_s']:.0f} s)", flush=True)
        if "phases" in res:
            print("   " + " ".join(f"{p['phase']}:{p['allocated_end_bytes'] / gib:.1f}/{p['peak_allocated_bytes'] / gib:.1f}"
                                   for p in res["phases"]), flush=True)


if __name__ == "__main__":
    main()
